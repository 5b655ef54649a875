"""A training run's checkpoints as a timeline: each read in turn, the run's untrained start first where asked."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from transformer.analysis.timeline import GoldPairs, Snapshot, Timeline, build_timeline
from transformer.io.checkpoint import Checkpoint, load_checkpoint
from transformer.io.metadata import read_metadata
from transformer.model.encoder_decoder import Transformer
from transformer.text.tokenizer import TokenizerBase


def untrained_like(checkpoint: Checkpoint, seed: int) -> Transformer:
    """A freshly initialised model of the checkpoint's shape: the run's starting point, seeded."""
    torch.manual_seed(seed)
    model = Transformer(checkpoint.config).eval()
    return model.requires_grad_(False)


def snapshot_of(checkpoint: Checkpoint, file: str) -> Snapshot:
    """The point of the run a checkpoint holds, from what training wrote in it (0 where it wrote nothing)."""
    training = read_metadata(checkpoint.metadata).training
    epoch = training.epochs_done if training and training.epochs_done is not None else 0
    bleu = next((v.val_bleu for v in (training.validation if training else []) if v.epoch == epoch), None)
    steps = training.steps if training and training.steps is not None else 0
    untrained = training is not None and training.steps == 0  # `train --keep-last` keeps the run's start
    return Snapshot("before training" if untrained else f"epoch {epoch}", epoch, steps, bleu, file)


def run_snapshots(
    files: Sequence[str | Path], untrained_seed: int | None, progress: Callable[[str], None]
) -> Iterator[tuple[Snapshot, Transformer, TokenizerBase]]:
    """The run's snapshots in order, each checkpoint loaded when its turn comes (one in memory at a time)."""
    first = load_checkpoint(files[0])
    if untrained_seed is not None:
        progress("before training")
        yield Snapshot("before training", 0, 0, None, ""), untrained_like(first, untrained_seed), first.tokenizer
    for i, path in enumerate(map(Path, files)):
        checkpoint = first if i == 0 else load_checkpoint(path)
        if not checkpoint.tokenizer.same_as(first.tokenizer) or checkpoint.config != first.config:
            raise ValueError(f"{path.name} is not of the same run as {Path(files[0]).name}: its model or "
                             "vocabulary differs")  # fmt: skip
        snapshot = snapshot_of(checkpoint, path.name)
        progress(snapshot.label)
        yield snapshot, checkpoint.model, checkpoint.tokenizer


def timeline_of_run(
    files: Sequence[str | Path],
    probes: Sequence[tuple[str, str]],
    gold: GoldPairs | None = None,
    untrained_seed: int | None = None,
    progress: Callable[[str], None] = lambda label: None,
) -> Timeline:
    """The timeline of a run's checkpoint files (oldest first), with the loss curve the last one recorded;
    `progress` hears each snapshot's label as its turn comes."""
    if not files:
        raise ValueError("a timeline needs at least one checkpoint")
    timeline = build_timeline(run_snapshots(files, untrained_seed, progress), probes, gold)
    training = read_metadata(load_checkpoint(files[-1]).metadata).training
    if training is None:
        return timeline
    return replace(timeline, loss_curve=np.array(training.loss_curve, dtype=np.float32),
                   loss_every=training.loss_curve_every)  # fmt: skip
