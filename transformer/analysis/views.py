"""Views of a decode result as pages draw them: one attention kind's maps with labels and masked cells.

Everything here takes and returns numpy arrays shaped (..., query, key), so it works the
same on one head's map, a layer's heads or the whole model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from transformer.analysis.words import merge_words, word_labels, word_spans
from transformer.decoding.result import DecodeResult

KINDS = {
    "encoder": "encoder self-attention",
    "decoder": "decoder masked self-attention",
    "cross": "encoder-decoder attention",
}


@dataclass(frozen=True)
class AttentionView:
    """The maps of one attention kind as a page draws them, with their token labels and masked cells."""

    kind: str
    maps: np.ndarray  # (L, H, Q, K)
    query_pieces: list[str]
    key_pieces: list[str]
    mask: np.ndarray | None  # (Q, K), True where the model could not look

    def mean_over_heads(self) -> np.ndarray:
        return self.maps.mean(axis=1)  # (L, Q, K)


def attention_view(result: DecodeResult, kind: str, step: int | None = None, words: bool = False) -> AttentionView:
    """One kind's maps; decoder rows only up to `step` (what the model has computed by then)."""
    last = result.steps if step is None else min(step, result.steps - 1) + 1
    if kind == "encoder":
        maps, queries, keys = result.encoder_self.numpy(), result.src_pieces, result.src_pieces
    elif kind == "decoder":
        maps, queries = result.decoder_self[:, :, :last, :last].numpy(), result.decoder_input_pieces[:last]
        keys = queries
    elif kind == "cross":
        maps, queries, keys = result.cross[:, :, :last].numpy(), result.decoder_input_pieces[:last], result.src_pieces
    else:
        raise ValueError(f"unknown attention kind {kind!r}; expected one of {', '.join(KINDS)}")
    maps = maps.view()
    maps.flags.writeable = False  # a view into the result, which visitors may share
    mask = np.triu(np.ones((last, last), dtype=bool), k=1) if kind == "decoder" else None
    if not words:
        return AttentionView(kind, maps, list(queries), list(keys), mask)
    query_spans, key_spans = word_spans(list(queries)), word_spans(list(keys))
    merged = merge_words(maps, query_spans, key_spans)
    if mask is not None:  # a word is hidden from a query word when all its pieces were
        mask = merge_words((~mask).astype(np.float32), query_spans, key_spans) == 0
    return AttentionView(
        kind, merged, word_labels(list(queries), query_spans), word_labels(list(keys), key_spans), mask
    )
