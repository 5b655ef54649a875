"""Views derived from the recorded attention: rollout, and pieces merged into words.

Everything here takes and returns numpy arrays shaped (..., query, key), so it works the
same on one head's map, a layer's heads or the whole model.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .decoding import DecodeResult

WORD_START = "\u2581"  # SentencePiece marks the first piece of a word with it


def rollout(encoder_self: np.ndarray) -> np.ndarray:
    """Attention rollout (Abnar and Zuidema 2020) over the encoder layers.

    Each layer's mean over heads is mixed half and half with the identity (the residual
    path), rows renormalised, and the layers multiplied from the first: row i of the
    result says how much of each input token flowed into position i of the last layer.
    encoder_self (L, H, S, S) -> (S, S).
    """
    size = encoder_self.shape[-1]
    flow = np.eye(size, dtype=np.float64)
    for layer in encoder_self:
        mixed = 0.5 * layer.mean(axis=0) + 0.5 * np.eye(size)
        mixed /= mixed.sum(axis=-1, keepdims=True)
        flow = mixed @ flow
    return flow.astype(np.float32)


def word_spans(pieces: list[str]) -> list[tuple[int, int]]:
    """[start, end) of each word: a piece marked as a word start, a special token, or what follows one, starts a word."""
    spans: list[tuple[int, int]] = []
    for index, piece in enumerate(pieces):
        starts_word = index == 0 or piece.startswith(WORD_START) or _is_special(piece) or _is_special(pieces[index - 1])
        if starts_word:
            spans.append((index, index + 1))
        else:
            spans[-1] = (spans[-1][0], index + 1)
    return spans


def _is_special(piece: str) -> bool:
    return len(piece) > 2 and piece.startswith("<") and piece.endswith(">")


def word_labels(pieces: list[str], spans: list[tuple[int, int]]) -> list[str]:
    return ["".join(pieces[start:end]).replace(WORD_START, "") or WORD_START for start, end in spans]


def merge_words(
    weights: np.ndarray, query_spans: list[tuple[int, int]], key_spans: list[tuple[int, int]]
) -> np.ndarray:
    """Piece-level attention (..., Q, K) -> word-level (..., Qw, Kw).

    A word's weight as a key is the sum over its pieces (rows still sum to 1); as a query
    it is the mean over its pieces' rows.
    """
    by_key = np.stack([weights[..., start:end].sum(axis=-1) for start, end in key_spans], axis=-1)
    return np.stack([by_key[..., start:end, :].mean(axis=-2) for start, end in query_spans], axis=-2)


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
