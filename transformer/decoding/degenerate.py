"""Signs that a decode went outside what the model knows: said as notes beside the output, never refusals.

A German sentence given to an English-French model comes apart into letters and comes back as
"Jemmmmmmm ... Le Le Le Le"; a model past its training lengths repeats itself until the length limit.
Most nonsense shows no such mark, but the model says it itself: it gives its own tokens low probability.
"""

from __future__ import annotations

import math
import re

import numpy as np

from transformer.decoding.result import DecodeResult

FRAGMENTED_SHARE = 0.35  # of source pieces that are one or two letters inside a word
REPEATS = 4  # the same piece (or a short run of pieces) this many times in a row
# Pieces per whitespace-separated word above which a source reads as another language than the model's: the
# default's tokenizer splits English sentences of its dev sets into 1.6 pieces a word (99 % of FLORES under 2.74)
# and Multi30k's German captions into 3.3 (95 % over 2.64); `python -m benchmarks.quality.output_notes --language-only`.
FOREIGN_PIECES_PER_WORD = 2.8
FOREIGN_MIN_WORDS = 4  # fewer words say too little
# Sentence ends: . ! ? (and runs of them, and a closing quote) followed by a space or the end.
SENTENCE_END = re.compile(r"(\S*?)[.!?…]+[\"'»”)]?(?=\s|$)")
ABBREVIATION = re.compile(r"[A-Z][a-z]{0,2}|(\w\.)+\w|\w")  # Mr. Dr. St. U.S. p.m. A. (an initial): no end
# How the unsure note is calibrated (benchmarks/quality/output_notes.py measures it on dev sets): outputs of sentence chrF
# under POOR are poor, over GOOD good, and the threshold notes at most MOST_GOOD_NOTED of the good ones.
POOR, GOOD = 20.0, 60.0  # sentence chrF
MOST_GOOD_NOTED = 0.10  # the calibration's bound: notes on at most this share of good outputs
# Mean natural log-probability of the output's own tokens below which a decode is called unsure, for each shipped
# model (by name): the highest threshold that notes at most 10 % of the good outputs, measured by
# `python -m benchmarks.quality.output_notes` on 150 sentences of each dev set (FLORES, newstest2013, Tatoeba, Multi30k val).
# en-fr-general: below -0.78 are 58 % of the outputs with sentence chrF under 20 and 10 % of those over 60;
# en-fr-captions: below -0.5, 99 % and 7 %. A model sure of good and poor outputs alike needs the lower threshold.
UNSURE_BELOW = {"en-fr-general": -0.78, "en-fr-captions": -0.5}


def mean_log_prob(result: DecodeResult) -> float:
    """The mean log-probability the model gave the tokens it chose: its own confidence in the output."""
    return float(result.token_probs.clamp_min(1e-12).log().mean()) if result.steps else 0.0


def decode_notes(
    result: DecodeResult,
    eos_piece: str,
    unsure_below: float,
    calibrated: bool = True,
    source_language: str | None = None,
) -> list[str]:
    """Plain-language notes on what looks degenerate in a decode, most telling first; `calibrated` says whether
    `unsure_below` was measured on this very model (else the note says it is a hint); `source_language` names the
    language the model reads, where it is known."""
    notes = []
    words = [piece for piece in result.src_pieces if piece != eos_piece]
    fragments = [piece for piece in words if not piece.startswith("\u2581") and len(piece) <= 2 and piece.isalpha()]
    foreign = foreign_note(words, source_language)
    if foreign:
        notes.append(foreign)
    elif len(words) >= 6 and len(fragments) / len(words) > FRAGMENTED_SHARE:
        notes.append(
            f"The sentence falls apart into short pieces ({len(fragments)} of its {len(words)} are one or two letters "
            "inside a word): this model's vocabulary lacks many of its words, and its output may not mean much."
        )
    confidence = mean_log_prob(result)
    if confidence < unsure_below:
        evidence = (
            "On the dev sets, most outputs this unsure were poor translations"
            if calibrated
            else "For the shipped default model, on its dev sets, most outputs this unsure were poor translations; "
            "this model's own were not measured, so take it as a hint"
        )
        notes.append(
            f"The model is unsure of this output: it gave its own tokens {math.exp(confidence):.0%} probability on "
            f"average (geometric mean). {evidence}; read this one, and its maps, with that in mind."
        )
    repeated = _longest_repeat(result.tgt_pieces)
    if repeated:
        run, times = repeated
        notes.append(
            f"The output repeats itself ('{''.join(run).replace(chr(0x2581), ' ').strip()}' {times} times in "
            "a row), a sign the model has lost its way."
        )
    if result.tgt_pieces and result.tgt_pieces[-1] != eos_piece:
        notes.append(f"The output stopped at the length limit ({result.steps} tokens) without ending: it is cut.")
    dropped = dropped_sentences_note(text_of(words), result.text)
    if dropped:
        notes.append(dropped)
    return notes


def text_of(pieces: list[str]) -> str:
    return "".join(pieces).replace("\u2581", " ").strip()


def foreign_note(source_pieces: list[str], language: str | None) -> str | None:
    """A note where the source's words fall into many more pieces than the model's own language's do: the
    tokenizer has not seen such words, as with another language (or, for a narrow model, words far from its
    training text). None where the source reads as the model's language."""
    words = len(text_of(source_pieces).split())
    if words < FOREIGN_MIN_WORDS or len(source_pieces) / words <= FOREIGN_PIECES_PER_WORD:
        return None
    return (
        f"This does not read like {language or 'the language this model translates from'}: its words fall into "
        f"{len(source_pieces) / words:.1f} pieces each, where the sentences the shipped default learned from take "
        f"about 1.6 (this note starts at {FOREIGN_PIECES_PER_WORD:g}). The model has not learned these words, so its "
        "output says little about them."
    )


def sentence_count(text: str) -> int:
    """Sentences in a text: its sentence ends (not an abbreviation's or an initial's period), and a last sentence
    left without one."""
    ends = [end for end in SENTENCE_END.finditer(text) if not ABBREVIATION.fullmatch(end.group(1).lstrip("\"'«“("))]
    tail = text[ends[-1].end() :] if ends else text
    return len(ends) + bool(re.search(r"\w", tail))


def dropped_sentences_note(source: str, output: str) -> str | None:
    """A note where the input has several sentences and the output fewer: a model trained on single sentences
    leaves out what comes after the first ones, and nothing else says so."""
    wanted, written = sentence_count(source), sentence_count(output)
    if wanted < 2 or written >= wanted:
        return None
    return (
        f"The input has {wanted} sentences and the output {written}: this model learned from one sentence at a time, "
        "and given several it runs them together or leaves some out. Translate them one by one to see each."
    )


def _longest_repeat(pieces: list[str]) -> tuple[list[str], int] | None:
    """The run of 1 to 4 pieces repeated most often back to back, if REPEATS times or more (3 for longer runs)."""
    best = None
    for size in range(1, 5):
        needed = REPEATS if size == 1 else 3
        for start in range(len(pieces) - size * needed + 1):
            run = pieces[start : start + size]
            times = 1
            while pieces[start + times * size : start + (times + 1) * size] == run:
                times += 1
            if times >= needed and (best is None or times * size > len(best[0]) * best[1]):
                best = (run, times)
    return best


def noted(rows: np.ndarray, below: float) -> tuple[float, float]:
    """Shares of poor and of good outputs that get the note (NaN where a set has none)."""
    chrf, confidence = rows[:, 0], rows[:, 1]
    flagged = confidence < below
    poor, good = chrf < POOR, chrf > GOOD
    return (flagged[poor].mean() if poor.any() else np.nan, flagged[good].mean() if good.any() else np.nan)


def calibrated(rows: np.ndarray) -> float | None:
    """The highest threshold that notes at most MOST_GOOD_NOTED of the good outputs (the most poor ones noted)."""
    good = np.sort(rows[rows[:, 0] > GOOD, 1])
    return float(good[int(MOST_GOOD_NOTED * good.size)]) if good.size else None  # that many good ones below it
