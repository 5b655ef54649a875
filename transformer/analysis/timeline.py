"""How a model learned: its checkpoints along one training run, read on the same probe sentences.

Every snapshot (an epoch's checkpoint, or the run's untrained start) reads each probe's *reference* translation
teacher forced, so every snapshot's maps have the same rows and columns and can be stepped through like the decode
explorer's steps. Beside the maps, per snapshot: the probability it gave each reference token, its own greedy
output, and each decoder layer's logit-lens rank of the reference token. Per kind, layer and head: the entropy of
its attention, its Jensen-Shannon distance from the last snapshot's map and, given hand-aligned pairs, the AER of
its cross-attention; a head *settles* at the first snapshot from which its distance stays under SETTLED_BELOW.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path

import numpy as np

from transformer.analysis.alignment import GoldAlignment, aer_grid, align_corpus
from transformer.analysis.heads.statistics import js_divergence, row_entropy
from transformer.decoding.forcing import teacher_force_ids
from transformer.decoding.greedy import decode_with_chooser
from transformer.decoding.lens import read_lens
from transformer.decoding.result import source_ids
from transformer.model.config import shown
from transformer.model.encoder_decoder import Transformer
from transformer.model.kinds import AttentionKind
from transformer.text.tokenizer import TokenizerBase

SETTLED_BELOW = 0.05  # nats of Jensen-Shannon distance (0 same, ln 2 = 0.69 disjoint) under which a head has settled
KINDS = tuple(AttentionKind)


@dataclass(frozen=True)
class Snapshot:
    """One point of the run: its label on the page, the epochs and optimizer steps done, its validation BLEU."""

    label: str  # "epoch 3", "before training"
    epoch: int  # epochs done (0 before training)
    step: int  # optimizer steps done
    val_bleu: float | None  # the run's mean validation BLEU after this epoch, where recorded
    file: str  # the checkpoint's file name ("" for the untrained start)


@dataclass(frozen=True)
class ProbeTimeline:
    """One probe sentence through the run: every snapshot's maps over its reference, teacher forced."""

    source: str
    reference: str
    src_pieces: list[str]  # S pieces, eos included
    tgt_pieces: list[str]  # T reference pieces, eos included: row t of a map is the step that produced piece t
    outputs: list[str]  # each snapshot's greedy translation of the source
    maps: dict[AttentionKind, np.ndarray]  # (E, L, H, Q, K) float16 per kind
    token_probs: np.ndarray  # (E, T) the probability each snapshot gave each reference piece
    lens_rank: np.ndarray  # (E, L_dec, T) each decoder layer's logit-lens rank of the reference piece (1: top)


@dataclass(frozen=True)
class Timeline:
    """A run's snapshots, its probes' timelines, and the per-head measures over the snapshots."""

    model: str  # the run's model, named after the last snapshot's file
    snapshots: list[Snapshot]
    probes: list[ProbeTimeline]
    entropy: dict[AttentionKind, np.ndarray]  # (E, L, H) mean row entropy over the probes, nats
    distance: dict[AttentionKind, np.ndarray]  # (E, L, H) mean Jensen-Shannon distance from the last snapshot
    aer: np.ndarray | None = None  # (E, L_dec, H + 1) cross-attention AER per head, the layer's mean last
    aer_method: str = ""  # how the AER was read ("attention · output · argmax over 24 pairs")
    loss_curve: np.ndarray = field(default_factory=lambda: np.zeros(0, np.float32))  # training loss
    loss_every: int = 1  # the loss curve keeps every n-th optimizer step

    def settled_at(self, kind: AttentionKind) -> np.ndarray:
        """(L, H) the index of the first snapshot from which each head's distance stays under SETTLED_BELOW."""
        close = self.distance[kind] < SETTLED_BELOW  # (E, L, H); the last snapshot is at distance 0
        stays = np.flip(np.logical_and.accumulate(np.flip(close, 0), axis=0), 0)  # close here and at every later one
        return np.argmax(stays, axis=0)

    def at(self, indices: Sequence[int]) -> Timeline:
        """The timeline of these snapshots alone (in order): what a view of a long run can carry."""
        rows = list(indices)
        probes = [
            replace(
                p,
                outputs=[p.outputs[e] for e in rows],
                maps={kind: maps[rows] for kind, maps in p.maps.items()},
                token_probs=p.token_probs[rows],
                lens_rank=p.lens_rank[rows],
            )
            for p in self.probes
        ]
        return replace(
            self,
            snapshots=[self.snapshots[e] for e in rows],
            probes=probes,
            entropy={kind: values[rows] for kind, values in self.entropy.items()},
            distance={kind: values[rows] for kind, values in self.distance.items()},
            aer=None if self.aer is None else self.aer[rows],
        )

    def table(self) -> list[dict]:
        """A row per snapshot, kind, layer and head: what the CLI writes as CSV."""
        rows = []
        for kind in KINDS:
            settled = self.settled_at(kind)
            for e, snapshot in enumerate(self.snapshots):
                for layer, head in np.ndindex(*self.entropy[kind].shape[1:]):
                    aer = self.aer[e, layer, head] if self.aer is not None and kind is AttentionKind.CROSS else None
                    rows.append(
                        {
                            "snapshot": snapshot.label,
                            "epoch": snapshot.epoch,
                            "kind": kind.value,
                            "layer": layer + 1,
                            "head": head + 1,
                            "entropy": round(float(self.entropy[kind][e, layer, head]), 5),
                            "distance_from_last": round(float(self.distance[kind][e, layer, head]), 5),
                            "aer": "" if aer is None or np.isnan(aer) else round(float(aer), 5),
                            "settled_at": self.snapshots[settled[layer, head]].label,
                        }
                    )
        return rows


@dataclass(frozen=True)
class GoldPairs:
    """Hand-aligned pairs to score each snapshot's heads on (`align`'s inputs)."""

    sources: list[str]
    targets: list[str]
    golds: list[GoldAlignment]


def _probe_reading(model: Transformer, tokenizer: TokenizerBase, source: str, reference: str) -> tuple:
    src_ids, truncated = source_ids(tokenizer, source, model.config.max_len)
    tgt_ids, cut = source_ids(tokenizer, reference, model.config.max_len, side="target")
    if truncated or cut:
        raise ValueError(f"the probe {shown(source)} or its reference is longer than the model reads")
    forced = teacher_force_ids(model, tokenizer, src_ids, tgt_ids)
    forced = replace(forced, lens=read_lens(model, forced.lens, tgt_ids))  # its ranks, whatever the vocabulary
    maps = {kind: forced.maps(kind).numpy().astype(np.float16) for kind in KINDS}
    babble = 2 * len(tgt_ids) + 4  # an untrained model's output runs to max_len: a few words past the reference show it
    return forced, maps, decode_with_chooser(model, tokenizer, source, max_new_tokens=babble).text


def build_timeline(
    run: Iterable[tuple[Snapshot, Transformer, TokenizerBase]],
    probes: Sequence[tuple[str, str]],
    gold: GoldPairs | None = None,
) -> Timeline:
    """Reads every probe with every snapshot of a run (oldest first; each model may be dropped once read).

    The timeline is named after the last snapshot's file; the loss curve is the caller's to add (from metadata)."""
    if not probes:
        raise ValueError("a timeline needs at least one probe sentence")
    snapshots, readings, reports = [], [], []
    for snapshot, model, tokenizer in run:
        snapshots.append(snapshot)
        readings.append([_probe_reading(model, tokenizer, source, reference) for source, reference in probes])
        if gold is not None:
            reports.append(align_corpus(model, tokenizer, gold.sources, gold.targets, gold.golds))
    if not snapshots:
        raise ValueError("a timeline needs at least one checkpoint")
    aer, method = None, ""
    if reports:  # every snapshot read the way the last one's best attention method reads best
        best = next(s.method for s in reports[-1].scores if s.method.measure == "attention")
        method = f"attention · {best.convention} · {best.extraction} over {len(reports[-1].aligned)} pairs"
        aer = np.stack([aer_grid(report, "attention", best.convention, best.extraction) for report in reports])
    timelines = [
        ProbeTimeline(
            source,
            reference,
            readings[-1][p][0].src_pieces,
            readings[-1][p][0].tgt_pieces,
            [read[p][2] for read in readings],
            {kind: np.stack([read[p][1][kind] for read in readings]) for kind in KINDS},
            np.stack([read[p][0].token_probs.numpy() for read in readings]).astype(np.float32),
            np.stack([read[p][0].lens.chosen_rank.numpy() for read in readings]).astype(np.float32),
        )
        for p, (source, reference) in enumerate(probes)
    ]
    name = Path(snapshots[-1].file).stem or "untrained"
    return Timeline(
        name, snapshots, timelines, *head_measures(timelines), None if aer is None else aer.astype(np.float32), method
    )


def head_measures(probes: Sequence[ProbeTimeline]) -> tuple[dict, dict]:
    """Per kind, (E, L, H) mean row entropy and mean Jensen-Shannon distance from the last snapshot, over probes.

    Rows of the masked self-attention hold zeros past the query, which add nothing to either."""
    entropy, distance = {}, {}
    for kind in KINDS:
        per_probe = [np.asarray(p.maps[kind], dtype=np.float64) for p in probes]  # (E, L, H, Q, K) each
        entropy[kind] = np.mean([row_entropy(maps) for maps in per_probe], axis=0)
        distance[kind] = np.mean([js_divergence(maps, maps[-1:]) for maps in per_probe], axis=0)
    return entropy, distance
