"""SentencePiece pieces merged into words, for labels and for word-level attention."""

from __future__ import annotations

import numpy as np

WORD_START = "\u2581"  # SentencePiece marks the first piece of a word with it


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
