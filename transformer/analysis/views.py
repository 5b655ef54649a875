"""Views of a decode result as pages draw them: one attention kind's maps with labels and masked cells.

Everything here takes and returns numpy arrays shaped (..., query, key), so it works the
same on one head's map, a layer's heads or the whole model.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import numpy as np

from transformer.analysis.words import is_punctuation, merge_words, word_labels, word_spans
from transformer.decoding.result import DecodeResult
from transformer.model.kinds import AttentionKind
from transformer.text.pieces import produced_label, readable_label


@dataclass(frozen=True)
class AttentionView:
    """The maps of one attention kind as a page draws them, with their token labels and masked cells."""

    kind: AttentionKind
    maps: np.ndarray  # (L, H, Q, K)
    query_pieces: list[str]
    key_pieces: list[str]
    mask: np.ndarray | None  # (Q, K), True where the model could not look

    def mean_over_heads(self) -> np.ndarray:
        return self.maps.mean(axis=1)  # (L, Q, K)


def attention_view(
    result: DecodeResult, kind: AttentionKind | str, step: int | None = None, words: bool = False
) -> AttentionView:
    """One kind's maps; decoder rows only up to `step` (what the model has computed by then)."""
    kind = AttentionKind(kind)
    last = result.steps if step is None else min(step, result.steps - 1) + 1
    rows = slice(None) if kind.queries_from_source else slice(last)
    columns = slice(None) if kind.keys_from_source else slice(last)
    maps = result.maps(kind)[:, :, rows, columns].numpy()
    queries, keys = result.query_pieces(kind)[rows], result.key_pieces(kind)[columns]
    maps = maps.view()
    maps.flags.writeable = False  # a view into the result, which visitors may share
    mask = np.triu(np.ones((last, last), dtype=bool), k=1) if kind.masked else None
    produced = None if kind.queries_from_source else result.tgt_pieces[rows]
    if not words:
        return AttentionView(kind, maps, _query_labels(list(queries), produced), list(keys), mask)
    key_spans = word_spans(list(keys))
    if produced is None:
        query_spans = word_spans(list(queries))
        labels = word_labels(list(queries), query_spans)
    else:  # a row per word produced, the mean of the rows that wrote its pieces ("en → T-shirt"): the rows
        # of an input word would straddle two outputs ("T-shirt → -shirt rouge"), its input shifted by one. It
        # reads the word before it (whose last piece it was fed), named whole: "août → 1992.", not "·t → 1992.".
        query_spans = word_spans(list(produced))
        written = word_labels(list(produced), query_spans)
        labels = _query_labels([queries[0], *written[:-1]], written)
    merged = merge_words(maps, query_spans, key_spans)
    if mask is not None:  # a word is hidden from a query word when all its pieces were
        mask = merge_words((~mask).astype(np.float32), query_spans, key_spans) == 0
    return AttentionView(kind, merged, labels, word_labels(list(keys), key_spans), mask)


def _query_labels(queries: list[str], produced: list[str] | None) -> list[str]:
    """A decoder row is labelled by its input and the token it produces ("en → robe"): read by its input
    alone, row "en" looking at "dress" seems shifted by one, though it is producing "robe"."""
    return queries if produced is None else [produced_label(query, output) for query, output in zip(queries, produced)]


def matching_rows(first: AttentionView, second: AttentionView) -> list[int] | None:
    """The rows at which two views over words (two models with different tokenizers, the same text) read the same
    word, where their keys are the same words; None where the keys differ or the rows do not pair up, so that no
    row is compared with another word's."""

    def words(labels: list[str]) -> list[str]:
        return [readable_label(label) for label in labels]

    if words(first.key_pieces) != words(second.key_pieces) or len(first.query_pieces) != len(second.query_pieces):
        return None
    pairs = zip(words(first.query_pieces), words(second.query_pieces))
    return [row for row, (a, b) in enumerate(pairs) if a == b]


SINK_PIECES = ("</s>", "<s>", "<pad>")  # the special tokens heads park their weight on (attention sinks)


def is_sink(piece: str) -> bool:
    """A special token or a piece (or word) of punctuation alone: where heads park weight they do not use."""
    return piece in SINK_PIECES or is_punctuation(piece)


def without_sinks(
    weights: np.ndarray, keys: Sequence[str], mask: np.ndarray | None = None
) -> tuple[np.ndarray, list[int]]:
    """Weights over keys (..., K) without the sink keys (`</s>`, `<s>` and punctuation), each row renormalised over
    the keys left (masked ones at 0), NaN where nothing is left; and the indices of the keys kept."""
    kept = [index for index, key in enumerate(keys) if not is_sink(key)]
    values = weights[..., kept].astype(np.float64)
    if mask is not None:
        values = np.where(mask[..., kept], 0.0, values)
    totals = values.sum(axis=-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(totals > 0, values / totals, np.nan).astype(np.float32), kept


def content_only(view: AttentionView) -> AttentionView:
    """The view without its sink keys, each row renormalised over the keys left (without_sinks): a row with nothing
    left is NaN (drawn grey). The same view where every key is content."""
    if not any(is_sink(piece) for piece in view.key_pieces):
        return view
    maps, kept = without_sinks(view.maps, view.key_pieces, view.mask)
    mask = None if view.mask is None else view.mask[:, kept]
    return replace(view, maps=maps, key_pieces=[view.key_pieces[i] for i in kept], mask=mask)
