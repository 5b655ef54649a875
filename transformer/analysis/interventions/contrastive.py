"""Contrastive accuracy over a pair set (as LingEval97, ContraPro and WinoMT score a model): a pair is correct when
the clean source prefers the target (its metric > 0) and the corrupted one the foil (< 0), both read on the clean
translation at the target's step; the share correct with a bootstrap 95 % interval, by set and by phenomenon. A pair
whose clean translation never writes its target is *not written*: counted, and left out of every share."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from transformer.analysis.interventions.attribution_patching import attribution_patching
from transformer.analysis.interventions.pair_sets import Pair
from transformer.analysis.interventions.patching import Contrast, NotWritten, Span, contrast_of_texts
from transformer.analysis.interventions.sites import Patching, patch_every_site, recorded_runs
from transformer.analysis.words import word_spans
from transformer.decoding.result import DecodeInputError, DecodeResult
from transformer.model.encoder_decoder import Transformer
from transformer.text.tokenizer import TokenizerBase

METHODS = ("exact", "attribution", "both")
RESAMPLES = 2000
SEED = 0
READ, NOT_WRITTEN, REFUSED = "read", "not written", "refused"


@dataclass(frozen=True)
class Outcome:
    """One pair's two metrics, or why it was not read: not written (its clean translation never writes the target)
    or refused (the foil no one piece, sources of different piece counts)."""

    id: str
    phenomenon: str
    status: str  # READ, NOT_WRITTEN or REFUSED
    step: int | None = None  # 0-based, where read
    metric_clean: float = float("nan")
    metric_corrupt: float = float("nan")
    why: str = ""  # where not read

    @property
    def written(self) -> bool:
        return self.status == READ

    @property
    def correct(self) -> bool:
        return self.written and self.metric_clean > 0 > self.metric_corrupt


@dataclass(frozen=True)
class Accuracy:
    """The share of written pairs that are correct, its bootstrap 95 % interval, and the counts."""

    pairs: int
    written: int
    correct: int
    share: float
    low: float
    high: float


def contrast_of_pair(
    model: Transformer, tokenizer: TokenizerBase, pair: Pair
) -> tuple[Contrast, DecodeResult] | Outcome:
    """The pair's contrast and the clean decode, as `patch` reads one pair; or the pair's outcome where it cannot
    be read (not written, or refused with why)."""
    step = None if pair.step is None else pair.step - 1
    try:
        return contrast_of_texts(model, tokenizer, pair.clean, pair.corrupt, pair.target, pair.foil, step)
    except NotWritten as error:
        return Outcome(pair.id, pair.phenomenon, NOT_WRITTEN, why=str(error))
    except (ValueError, DecodeInputError) as error:
        return Outcome(pair.id, pair.phenomenon, REFUSED, why=str(error))


def outcome_of(model: Transformer, tokenizer: TokenizerBase, pair: Pair) -> Outcome:
    """One pair's metrics on its clean and corrupted sources: the two recorded runs of patching, nothing patched."""
    found = contrast_of_pair(model, tokenizer, pair)
    if isinstance(found, Outcome):
        return found
    contrast = found[0]
    clean, corrupt = recorded_runs(model, [contrast.clean_src, contrast.corrupt_src], contrast)
    return Outcome(pair.id, pair.phenomenon, READ, contrast.step, clean.metric, corrupt.metric)


@dataclass(frozen=True)
class PairPatching:
    """One pair of a set patched as `patch` patches it alone: its outcome and, where it was read, what was patched."""

    pair: Pair
    outcome: Outcome
    contrast: Contrast | None = None
    clean: DecodeResult | None = None
    spans: list[Span] | None = None
    patching: Patching | None = None  # exact patching's shares
    estimate: Patching | None = None  # attribution patching's

    @property
    def shares(self) -> Patching | None:
        """The pair's shares: exact where they were computed, else the estimate."""
        return self.patching or self.estimate


def patched_pairs(
    model: Transformer,
    tokenizer: TokenizerBase,
    pairs: list[Pair],
    noising: bool = False,
    words: bool = False,
    before_each: Callable[[Contrast, list[Span] | None], None] = lambda contrast, spans: None,
    method: str = "exact",
) -> Iterator[PairPatching]:
    """Every site of each pair patched in turn, one pair at a time (the pair's own run: what `patch` computes for it
    alone), by `method`: "exact", "attribution" (attribution patching's estimate) or "both"; a pair that cannot be
    read is yielded with its outcome alone. `before_each` hears each read pair's contrast before it is patched (a
    budget's check): a ValueError it raises refuses that pair alone, with its message."""
    if method not in METHODS:
        raise ValueError(f"the method is one of {', '.join(METHODS)}, not {method!r}")
    for pair in pairs:
        found = contrast_of_pair(model, tokenizer, pair)
        if isinstance(found, Outcome):
            yield PairPatching(pair, found)
            continue
        contrast, clean = found
        spans = word_spans(clean.src_pieces) if words else None
        try:
            before_each(contrast, spans)
        except ValueError as error:  # past a budget: this pair is refused, the others still run
            yield PairPatching(pair, Outcome(pair.id, pair.phenomenon, REFUSED, why=str(error)))
            continue
        exact = patch_every_site(model, contrast, noising, spans=spans) if method != "attribution" else None
        estimate = attribution_patching(model, contrast, noising, spans) if method != "exact" else None
        metrics = exact or estimate
        outcome = Outcome(pair.id, pair.phenomenon, READ, contrast.step, metrics.metric_clean, metrics.metric_corrupt)
        yield PairPatching(pair, outcome, contrast, clean, spans, exact, estimate)


def accuracy(outcomes: list[Outcome], resamples: int = RESAMPLES, seed: int = SEED) -> Accuracy:
    """The share correct among the written pairs, with the percentile bootstrap's 95 % interval (resampling the
    written pairs `resamples` times with a fixed seed: the same set gives the same interval)."""
    correct = np.array([o.correct for o in outcomes if o.written], dtype=float)
    if not len(correct):
        return Accuracy(len(outcomes), 0, 0, float("nan"), float("nan"), float("nan"))
    draws = np.random.default_rng(seed).integers(0, len(correct), (resamples, len(correct)))
    shares = correct[draws].mean(axis=1)
    low, high = np.percentile(shares, [2.5, 97.5])
    return Accuracy(len(outcomes), len(correct), int(correct.sum()), float(correct.mean()), float(low), float(high))


def by_phenomenon(outcomes: list[Outcome]) -> dict[str, Accuracy]:
    """accuracy() of each phenomenon's pairs, in the order they first appear."""
    names = dict.fromkeys(o.phenomenon for o in outcomes)
    return {name: accuracy([o for o in outcomes if o.phenomenon == name]) for name in names}
