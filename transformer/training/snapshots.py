"""A training run's checkpoints as a timeline: each read in turn, the run's untrained start first where asked."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np
import torch

from transformer.analysis.timeline import GoldPairs, Snapshot, Timeline, build_timeline
from transformer.decoding.greedy import decode_with_chooser
from transformer.io.checkpoint import Checkpoint, file_model, load_checkpoint
from transformer.io.header import read_file_header
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
        if not checkpoint.same_model_as(first):
            raise ValueError(
                f"{path.name} is not of the same run as {Path(files[0]).name}: its model or vocabulary differs"
            )
        snapshot = snapshot_of(checkpoint, path.name)
        progress(snapshot.label)
        yield snapshot, checkpoint.model, checkpoint.tokenizer


def check_one_run(files: Sequence[str | Path]) -> None:
    """ValueError unless every file holds the model and vocabulary of the first, read from the headers alone:
    before the probes are read (a minute a snapshot), not after."""
    first_config, first_tokenizer = file_model(files[0])
    for path in map(Path, files[1:]):
        config, tokenizer = file_model(path)
        if not config.same_model(first_config) or tokenizer != first_tokenizer:
            raise ValueError(
                f"{path.name} is not of the same run as {Path(files[0]).name}: its model or vocabulary differs"
            )


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
    check_one_run(files)
    timeline = build_timeline(run_snapshots(files, untrained_seed, progress), probes, gold)
    training = read_metadata(load_checkpoint(files[-1]).metadata).training
    if training is None:
        return timeline
    return replace(
        timeline, loss_curve=np.array(training.loss_curve, dtype=np.float32), loss_every=training.loss_curve_every
    )


def run_point(path: str | Path) -> tuple[int, int] | None:
    """(epochs done, optimizer steps done) that training wrote in a checkpoint file, read from its header alone;
    None for a file with no such record (an import, an average) or no checkpoint at all."""
    try:
        raw = json.loads(read_file_header(path)["__metadata__"].get("metadata", "{}"))
        training = read_metadata(raw).training
    except (OSError, ValueError, RecursionError, AttributeError, TypeError):  # ValueError: CheckpointError too
        return None
    if training is None or training.epochs_done is None or training.steps is None:
        return None
    return training.epochs_done, training.steps


def snapshot_files(timeline: Timeline, files: Iterable[str | Path]) -> list[Path | None]:
    """For each snapshot of a timeline, the file among `files` that holds it (the same epochs and steps done), or
    None; the untrained start of a run needs none (untrained_like rebuilds it from the run's seed)."""
    held: dict[tuple[int, int], Path] = {}
    for path in map(Path, files):
        point = run_point(path)
        if point is not None:
            held.setdefault(point, path)
    return [held.get((snapshot.epoch, snapshot.step)) for snapshot in timeline.snapshots]


def sentence_timeline(
    timeline: Timeline,
    files: Sequence[Path | None],
    source: str,
    reference: str | None,
    load: Callable[[Path], Checkpoint] = load_checkpoint,
) -> Timeline:
    """The timeline of one sentence of the visitor's through the snapshots whose files are here (snapshot_files),
    read on `reference` or, without one, on the last snapshot's own translation; with the run's loss curve. `load`
    gives each file's checkpoint (the app's: one shared copy per server, not one per sentence).

    The untrained start is rebuilt from the seed the last checkpoint's run was trained with. ValueError where the
    last snapshot's file is missing (the maps are read on its vocabulary), or a file is of another run."""
    if files[-1] is None:
        raise ValueError(f"the checkpoint of {timeline.snapshots[-1].label} is not here")
    last = load(files[-1])
    settings = last.metadata.get("settings")
    seed = settings.get("seed") if isinstance(settings, dict) else None
    reference = reference or decode_with_chooser(last.model, last.tokenizer, source).text

    def run() -> Iterator[tuple]:
        for snapshot, path in zip(timeline.snapshots, files):
            if path is not None:
                checkpoint = last if path == files[-1] else load(path)
                if not checkpoint.same_model_as(last):
                    raise ValueError(f"{path.name} is not of the same run as {files[-1].name}")
                yield snapshot, checkpoint.model, checkpoint.tokenizer
            elif snapshot.step == 0 and isinstance(seed, int):  # the untrained start, without a file
                yield snapshot, untrained_like(last, seed), last.tokenizer

    built = build_timeline(run(), [(source, reference)])
    return replace(built, model=timeline.model, loss_curve=timeline.loss_curve, loss_every=timeline.loss_every)
