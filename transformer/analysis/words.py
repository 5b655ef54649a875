"""SentencePiece pieces merged into words, for labels and for word-level attention."""

from __future__ import annotations

import unicodedata

import numpy as np

from transformer.text.pieces import WORD_START, is_special


def word_spans(pieces: list[str]) -> list[tuple[int, int]]:
    """[start, end) of each word: a piece marked as a word start, a special token, or what follows one, starts a word."""
    spans: list[tuple[int, int]] = []
    for index, piece in enumerate(pieces):
        starts_word = index == 0 or piece.startswith(WORD_START) or is_special(piece) or is_special(pieces[index - 1])
        if starts_word:
            spans.append((index, index + 1))
        else:
            spans[-1] = (spans[-1][0], index + 1)
    return spans


def is_punctuation(piece: str) -> bool:
    """A piece (or a word, or its label) of punctuation alone, its word-start marker and middle dot aside."""
    text = piece.replace(WORD_START, "").replace("·", "").strip()
    return bool(text) and all(unicodedata.category(character).startswith("P") for character in text)


def punctuation_cores(pieces: list[str], spans: list[tuple[int, int]]) -> list[tuple[int, tuple[int, int]]]:
    """(word, its span without the punctuation pieces at its ends) for each word that has such pieces and more
    ("▁tired" "." -> "▁tired"): what a knockout cuts to leave a word's full stop in."""
    cores = []
    for word, (start, end) in enumerate(spans):
        first, last = start, end
        while last - first > 1 and is_punctuation(pieces[first]):
            first += 1
        while last - first > 1 and is_punctuation(pieces[last - 1]):
            last -= 1
        if (first, last) != (start, end) and not is_punctuation(pieces[first]):
            cores.append((word, (first, last)))
    return cores


def word_labels(pieces: list[str], spans: list[tuple[int, int]]) -> list[str]:
    """Each word's pieces joined ("▁jou" "ent" -> "▁jouent"): still a piece to `readable`, which shows "jouent"."""
    return ["".join(pieces[start:end]) for start, end in spans]


def merge_words(
    weights: np.ndarray, query_spans: list[tuple[int, int]], key_spans: list[tuple[int, int]]
) -> np.ndarray:
    """Piece-level attention (..., Q, K) -> word-level (..., Qw, Kw).

    A word's weight as a key is the sum over its pieces (rows still sum to 1); as a query
    it is the mean over its pieces' rows.
    """
    by_key = keys_as_words(weights, key_spans)
    return np.stack([by_key[..., start:end, :].mean(axis=-2) for start, end in query_spans], axis=-2)


def keys_as_words(weights: np.ndarray, key_spans: list[tuple[int, int]]) -> np.ndarray:
    """Weights over pieces (..., K) -> over words (..., Kw): a word gets the sum over its pieces."""
    return np.stack([weights[..., start:end].sum(axis=-1) for start, end in key_spans], axis=-1)


def over_words(values: np.ndarray, pieces: list[str], words: bool) -> tuple[np.ndarray, list[str]]:
    """Values over tokens (..., K) and the tokens' labels, merged into words when asked: a word's value is the
    sum over its pieces (attention weights and attributions both add up)."""
    if not words:
        return values, list(pieces)
    spans = word_spans(list(pieces))
    return keys_as_words(values, spans), word_labels(list(pieces), spans)


def probabilities_over_words(
    probabilities: np.ndarray, pieces: list[str], words: bool
) -> tuple[np.ndarray, list[str], list[tuple[int, int]]]:
    """Each output token's probability and label, or each word's where asked: the product of its pieces' (the
    probability the model wrote the whole word, each piece given those before it); and the [start, end) steps of
    each."""
    spans = word_spans(list(pieces)) if words else [(step, step + 1) for step in range(len(pieces))]
    merged = np.array([np.prod(probabilities[start:end]) for start, end in spans], dtype=np.float64)
    return merged, word_labels(list(pieces), spans), spans
