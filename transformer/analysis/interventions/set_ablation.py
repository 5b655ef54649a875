"""A head's ablation against a pair set's contrastive accuracy: each head switched off (its output zeroed before W_O,
as `--heads-off` does) in both of a pair's runs, its two metrics read again, and the set's accuracy computed with
that head off. Activation patching says where a difference is carried; ablation says whether the model still gets
the pairs right without the head (Michel et al. 2019 switch heads off to measure what a task needs of them).

One pair's runs with each head off are rows of a batch: each row's heads are gated (Probe.gates), one head off a
row, so a model of 144 heads costs 2 × 145 rows a pair, in passes of ROWS_PER_PASS rows."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch

from transformer.analysis.interventions.contrastive import READ, Accuracy, Outcome, accuracy
from transformer.analysis.interventions.patching import Contrast, step_metric
from transformer.decoding.result import model_device
from transformer.model.encoder_decoder import Transformer
from transformer.model.heads import Head, every_head
from transformer.model.probes import Probe

ROWS_PER_PASS = 64


@dataclass(frozen=True)
class HeadAblation:
    """The set's accuracy with one head off, against its accuracy with every head on: `broken` pairs correct with
    the head on and wrong with it off, `mended` the reverse; `gap_change` the mean change of metric_clean −
    metric_corrupt (how far apart the two sources' preferences are) over the written pairs."""

    head: Head
    accuracy: Accuracy
    change: float  # the share correct with the head off, less the share with every head on
    broken: int
    mended: int
    gap_change: float


def metrics_with_each_head_off(
    model: Transformer, contrast: Contrast, heads: list[Head] | None = None
) -> tuple[np.ndarray, np.ndarray]:
    """The metric of the clean and of the corrupted source with each head of `heads` (every head where None) off
    alone, each (heads,): the pair's two runs as `patch` reads them, one head zeroed."""
    heads = every_head(model.config) if heads is None else heads
    starts = range(0, len(heads), ROWS_PER_PASS)
    found = [
        np.concatenate(
            [np.zeros(0)] + [_gated_metrics(model, contrast, source, heads[at : at + ROWS_PER_PASS]) for at in starts]
        )
        for source in (contrast.clean_src, contrast.corrupt_src)
    ]
    return found[0], found[1]


def _gated_metrics(model: Transformer, contrast: Contrast, source: list[int], heads: list[Head]) -> np.ndarray:
    """The metric of `source` run once a head: row r with heads[r] off."""
    n_heads, rows = model.config.n_heads, len(heads)
    gates: dict[tuple, torch.Tensor] = {}
    for row, head in enumerate(heads):
        gate = gates.setdefault((head.kind, head.layer), torch.ones(rows, n_heads, device=model_device(model)))
        gate[row, head.index] = 0.0
    src = torch.tensor([source], device=model_device(model)).expand(rows, -1)
    with torch.no_grad():
        return step_metric(model, src, contrast, probe=Probe(gates=gates)).double().cpu().numpy()


def ablation_over_set(
    outcomes: list[Outcome], with_each_off: dict[str, tuple[np.ndarray, np.ndarray]], heads: list[Head]
) -> list[HeadAblation]:
    """Each head's ablation over the set: `outcomes` the pairs with every head on, `with_each_off` each written
    pair's two metrics with each head off (by id, as metrics_with_each_head_off gives them, in `heads`' order)."""
    written = [o for o in outcomes if o.status == READ]
    intact = accuracy(outcomes)
    found = []
    for index, head in enumerate(heads):
        off = [
            Outcome(o.id, o.phenomenon, READ, o.step, *(float(m[index]) for m in with_each_off[o.id])) for o in written
        ]
        share = accuracy(off + [o for o in outcomes if o.status != READ])
        broken = sum(a.correct and not b.correct for a, b in zip(written, off))
        mended = sum(b.correct and not a.correct for a, b in zip(written, off))
        gaps = [(b.metric_clean - b.metric_corrupt) - (a.metric_clean - a.metric_corrupt) for a, b in zip(written, off)]
        gap = float(np.mean(gaps)) if gaps else float("nan")
        found.append(HeadAblation(head, share, share.share - intact.share, broken, mended, gap))
    return found
