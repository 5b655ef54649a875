"""The pruning curve of Michel, Levy and Neubig (2019, Figure 3) for one model: heads switched off together, 10 %
of all heads at a time up to 60 %, in order of importance (least important first), against the same counts taken
in random order (the mean of three seeded orders) and most important first; the BLEU of the greedy output at each
point. Every point is a set of heads switched off in one model (the probe's gates), its sentences decoded in
batches that mix points (importance.ablated_rows)."""

from __future__ import annotations

import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import torch

from transformer.analysis.heads.importance import RowProgress, ablated_rows, corpus_of, scores
from transformer.decoding.translate import translate_texts
from transformer.model.encoder_decoder import Transformer
from transformer.model.heads import Head, every_head
from transformer.text.tokenizer import TokenizerBase

SHARES_OFF = (0.1, 0.2, 0.3, 0.4, 0.5, 0.6)  # of all heads, switched off at each point
RANDOM_ORDERS = 3
LEAST_FIRST, RANDOM, MOST_FIRST = "least important first", "random order", "most important first"


@dataclass(frozen=True)
class PruningCurve:
    """One order's points: the heads off at each (the first random order's, for the random curve) and the BLEU
    there (the mean of the orders for the random curve); point 0 is the intact model."""

    order: str
    counts: tuple[int, ...]
    bleu: tuple[float, ...]
    heads_off: tuple[frozenset[Head], ...]


def head_counts(model: Transformer) -> list[int]:
    total = len(every_head(model.config))
    return [round(share * total) for share in SHARES_OFF]


def orders(ranking: Sequence[Head], seed: int = 0) -> dict[str, list[list[Head]]]:
    """Each curve's orders of removal: `ranking` runs from the most important head to the least."""
    shuffled = []
    for index in range(RANDOM_ORDERS):
        order = list(ranking)
        random.Random(seed + index).shuffle(order)
        shuffled.append(order)
    return {LEAST_FIRST: [list(ranking)[::-1]], RANDOM: shuffled, MOST_FIRST: [list(ranking)]}


@torch.inference_mode()
def pruning_curves(
    model: Transformer,
    tokenizer: TokenizerBase,
    sources: Sequence[str],
    references: Sequence[str],
    ranking: Sequence[Head],
    intact: Sequence[str] | None = None,
    seed: int = 0,
    progress: RowProgress | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    rows_per_batch: int = 256,
) -> list[PruningCurve]:
    """The three curves over the sample, `ranking` (every head, most important first) deciding the orders; `intact`,
    the intact model's greedy outputs where they are at hand."""
    if sorted(ranking) != sorted(every_head(model.config)):
        raise ValueError("the ranking must hold every head of the model once")
    counts = head_counts(model)
    removal = orders(ranking, seed)
    wanted = {frozenset(order[:count]) for runs in removal.values() for order in runs for count in counts}
    corpus = corpus_of(model, tokenizer, sources, references)
    found = ablated_rows(model, tokenizer, corpus, sorted(wanted, key=sorted), rows_per_batch, progress, should_stop)
    bleu = {heads: scores(outputs, references)[0] for heads, (outputs, _) in found.items()}
    intact_bleu = scores(intact or translate_texts(model, tokenizer, sources), references)[0]
    curves = []
    for name, runs in removal.items():
        points = [[bleu[frozenset(order[:count])] for count in counts] for order in runs]
        curves.append(
            PruningCurve(
                name,
                (0, *counts),
                (intact_bleu, *np.mean(points, axis=0).tolist()),
                (frozenset(), *(frozenset(runs[0][:count]) for count in counts)),
            )
        )
    return curves


def ranking_by(importance: dict[Head, float]) -> list[Head]:
    """Heads from the most important to the least by a score where larger is more important (ties in head order)."""
    return sorted(importance, key=lambda head: (-importance[head], head))
