"""A pair set run for the Pair sets page: each pair patched as `patch-set` patches it (exact, the estimate or both,
and each head's ablation where asked), kept as it finishes, so that a Stop loses nothing done and the run goes on
from there; visitors asking the same run (the checkpoint, the set's pairs, the settings) share it, as a classroom
running the teacher's set runs it once."""

from __future__ import annotations

import hashlib
import threading
from collections.abc import Callable
from dataclasses import dataclass

import cachetools
import numpy as np

from transformer.analysis.interventions.budget import check_contrast
from transformer.analysis.interventions.contrastive import REFUSED, Outcome, PairPatching, patched_pairs
from transformer.analysis.interventions.pair_sets import Pair, pair_line
from transformer.analysis.interventions.patching import Contrast, Span
from transformer.analysis.interventions.set_ablation import metrics_with_each_head_off
from transformer.decoding.result import DecodeInputError, source_ids
from transformer.decoding.strategies import check_decode
from transformer.io.checkpoint import Checkpoint
from ui.services.cache import CACHE_SECONDS
from ui.services.models import DECODE_LIMIT_BYTES, PATCH_MAX_PASSES

MAX_PAGE_PAIRS = 1000  # a page's run; `patch-set` takes sets of any size, spread over processes
KEPT_RUNS = 8  # runs kept at once on a server (a run of 1,000 pairs of the default holds about 20 MB)


@dataclass(frozen=True)
class SetSettings:
    method: str  # "exact", "attribution" or "both"
    noising: bool
    words: bool
    ablation: bool  # each head switched off alone against the accuracy


@dataclass(frozen=True)
class PairRun:
    """One pair as the run left it: its patching (PairPatching) and, where asked, its two metrics with each head
    off (`every_head`'s order)."""

    patched: PairPatching
    ablation: tuple[np.ndarray, np.ndarray] | None = None


class SetStopped(Exception):
    """The visitor stopped the run (or left): the pairs done are kept."""


_RUNS: cachetools.TTLCache = cachetools.TTLCache(KEPT_RUNS, CACHE_SECONDS)
_LOCK = threading.Lock()


def run_key(checkpoint_key: str, pairs: list[Pair], settings: SetSettings) -> tuple:
    """What names a run: the checkpoint, every pair as its line says it, and the settings."""
    digest = hashlib.sha256("\n".join(pair_line(pair) for pair in pairs).encode()).hexdigest()
    return checkpoint_key, digest, settings


def kept(key: tuple) -> dict[str, PairRun]:
    """The pairs of this run done so far, by id (a run no one has started: none)."""
    with _LOCK:
        return _RUNS.setdefault(key, {})


def too_long(checkpoint: Checkpoint, pair: Pair) -> Outcome | None:
    """The pair refused where decoding its clean sentence would hold more than a decode may here; else None."""
    try:
        length = len(source_ids(checkpoint.tokenizer, pair.clean, checkpoint.config.max_len)[0])
        check_decode(checkpoint.model, length, 0, DECODE_LIMIT_BYTES)
    except (ValueError, DecodeInputError) as error:
        return Outcome(pair.id, pair.phenomenon, REFUSED, why=str(error))
    return None


def run_set(
    checkpoint: Checkpoint,
    key: tuple,
    pairs: list[Pair],
    settings: SetSettings,
    progress: Callable[[int, int], None],
    should_stop: Callable[[], bool],
) -> list[PairRun]:
    """Every pair of the set run (those done before skipped), in order, `progress` hearing how many of those left
    are done; SetStopped once `should_stop` says so between pairs, what finished kept under `key`. Each pair held to the server's decode and patching budgets (a
    pair past them is refused alone, saying why)."""
    model, tokenizer, done = checkpoint.model, checkpoint.tokenizer, kept(key)

    def within_budget(contrast: Contrast, spans: list[Span] | None) -> None:
        check_contrast(model, contrast, spans, DECODE_LIMIT_BYTES, PATCH_MAX_PASSES)

    left = [pair for pair in pairs if pair.id not in done]
    for pair in left:
        refused = too_long(checkpoint, pair)
        if refused is not None:
            done[pair.id] = PairRun(PairPatching(pair, refused))
    left = [pair for pair in left if pair.id not in done]
    runs = patched_pairs(model, tokenizer, left, settings.noising, settings.words, within_budget, settings.method)
    for number, run in enumerate(runs, 1):
        ablation = None
        if settings.ablation and run.contrast is not None:
            ablation = metrics_with_each_head_off(model, run.contrast)
        done[run.pair.id] = PairRun(run, ablation)
        progress(number, len(left))
        if number < len(left) and should_stop():
            raise SetStopped
    return [done[pair.id] for pair in pairs]
