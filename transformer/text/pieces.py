"""Pieces shown the way a reader reads them: "▁chiens" as "chiens", the rest of a word as "·ent".

SentencePiece marks the first piece of a word with "▁"; printed as is, every label starts with
it (rotated, "▁little" reads "/little"). Figures, hovers, CSV files and exports all show pieces
through `readable`, so a piece reads the same wherever it appears.
"""

from __future__ import annotations

import re

WORD_START = "\u2581"  # SentencePiece marks the first piece of a word with it
CONTINUES_WORD = "\u00b7"  # a middle dot before a piece that carries on the word before it
SPACE = "\u2423"  # a piece that is only a word start (before a character the vocabulary lacks)
PRODUCES = " → "  # a decoder row's label: the input token, then the token it produces


# A multilingual model's language codes: NLLB's "fra_Latn", mBART's "fr_XX" (M2M100's "__fr__" starts with no letter)
BARE_LANGUAGE_CODE = re.compile(r"[a-z]{2,3}_(?:[A-Z][a-z]{3}|[A-Z]{2})")


def is_special(piece: str) -> bool:
    """<s>, </s>, <pad>, <unk> and the like, and language codes: shown as they are (no word carries on into them)."""
    return (len(piece) > 2 and piece.startswith("<") and piece.endswith(">")) or bool(
        BARE_LANGUAGE_CODE.fullmatch(piece)
    )


def readable(piece: str) -> str:
    """One piece (or several joined into a word) as a reader sees it.

    A word start loses its marker; a piece inside a word that begins with a letter or digit gets
    a middle dot ("jou", "·ent"), punctuation stays as it is ("neige", "."); a lone marker is "␣".
    """
    if piece == WORD_START:
        return SPACE
    if piece.startswith(WORD_START):
        return piece[len(WORD_START) :].replace(WORD_START, " ")
    if is_special(piece) or not piece[:1].isalnum() or " " in piece:  # a space: a caption, not a piece
        return piece
    return CONTINUES_WORD + piece


def readable_label(label: str) -> str:
    """A label made of pieces: one piece, or "input → produced" (pieces never hold a space)."""
    return PRODUCES.join(readable(part) for part in label.split(PRODUCES))


def produced_label(query: str, produced: str) -> str:
    """The label of a decoder row: the token it reads and the token it produces."""
    return f"{query}{PRODUCES}{produced}"
