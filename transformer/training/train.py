"""Training (section 5 of the paper): Adam with warm-up, label smoothing, token-count batches.

Resumable at any step, deterministic with a seed on the CPU, mixed precision on CUDA, and
data-parallel under torchrun (one process per GPU).
"""

from __future__ import annotations

import contextlib
import copy
import gc
import math
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn
from tqdm import tqdm

from transformer.io.checkpoint import remove_stale_temporaries, save_checkpoint, update_metadata, write_atomically
from transformer.model.config import TransformerConfig
from transformer.model.encoder_decoder import Transformer
from transformer.text.files import read_parallel
from transformer.text.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, train_tokenizer
from transformer.training.batches import iterate_batches, rank_batches, token_batches
from transformer.training.corpora import encode_pairs, epoch_indices, prepared_pairs, vocabulary_sample
from transformer.training.distributed import Logits, device_for_rank, finish, rank_and_world, rank_zero_says
from transformer.training.evaluate import ValidationSet, validate
from transformer.training.settings import DATA_FIELDS, TrainSettings
from transformer.training.state import (
    LoadedState,
    Progress,
    check_same_model,
    load_state,
    save_state,
    state_from_checkpoint,
)
from transformer.training.step import noam_rate, record_losses, training_step

READ_LOSS_EVERY = 25  # steps between reads of the loss on a GPU (each read waits for it)


def _metadata(
    settings: TrainSettings, progress: Progress, data: dict[str, dict], device: torch.device, world: int
) -> dict[str, Any]:
    every = max(1, len(progress.loss_curve) // 2000)  # keep the stored curve small
    hardware = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"{platform.processor() or platform.machine()} CPU, {torch.get_num_threads()} threads"
    )
    return {
        "languages": {"src": settings.src_lang, "tgt": settings.tgt_lang},
        "data": data,
        "settings": {k: v for k, v in asdict(settings).items() if k not in DATA_FIELDS},
        "training": {
            "steps": progress.step,
            "epochs_done": len(progress.epochs),
            "best_epoch": progress.best_epoch,
            "seconds": round(progress.elapsed_seconds, 1),
            "hardware": f"{world} x {hardware}",
            "torch": torch.__version__,
            "loss_curve_every": every,
            "loss_curve": [round(x, 4) for x in progress.loss_curve[::every]],
            "lr_curve": [float(f"{x:.3g}") for x in progress.lr_curve[::every]],
            "validation": progress.epochs,
        },
        "scores": {"val_bleu_greedy": progress.best_bleu},
    }


@dataclass
class Run:
    """A training run under way in this process: what train()'s steps share."""

    settings: TrainSettings
    rank: int
    world: int
    device: torch.device
    quiet: bool
    tokenizer: Tokenizer
    config: TransformerConfig
    model: Transformer
    optimizer: torch.optim.Optimizer
    progress: Progress
    corpora: list[list[tuple[list[int], list[int]]]]
    validation: list[ValidationSet]
    data: dict[str, dict]  # the metadata's record of the files read
    compute_logits: Callable[[torch.Tensor, torch.Tensor], torch.Tensor] = field(init=False)
    loss_fn: nn.Module = field(init=False)
    autocast: contextlib.AbstractContextManager = field(init=False)
    started: float = field(init=False)  # the run's clock (its earlier calls' seconds included)
    call_started: float = field(init=False)  # this call's clock: --max-seconds is this call's budget
    best_weights: Transformer | None = None

    def __post_init__(self) -> None:
        settings, world = self.settings, self.world
        self.compute_logits = (
            nn.parallel.DistributedDataParallel(Logits(self.model)) if world > 1 else self.model.logits
        )
        self.loss_fn = nn.CrossEntropyLoss(
            ignore_index=PAD_ID, label_smoothing=settings.label_smoothing, reduction="sum"
        )
        bfloat16 = self.device.type == "cuda" or settings.cpu_bfloat16
        self.autocast = torch.autocast(self.device.type, dtype=torch.bfloat16, enabled=bfloat16)
        self.started = time.perf_counter() - self.progress.elapsed_seconds
        self.call_started = time.perf_counter()

    @property
    def pairs(self) -> list[tuple[list[int], list[int]]]:
        return [pair for corpus in self.corpora for pair in corpus]

    def save(self, path: str | Path, weights: Transformer, extra_scores: dict | None = None) -> None:
        metadata = _metadata(self.settings, self.progress, self.data, self.device, self.world)
        if extra_scores:
            metadata["scores"] = extra_scores
        save_checkpoint(path, weights, self.tokenizer, metadata, getattr(torch, self.settings.save_dtype))

    def save_state(self) -> None:
        save_state(
            self.settings.state_path, self.model, self.optimizer, self.tokenizer, self.progress, asdict(self.settings)
        )


def train(
    settings: TrainSettings, resume: bool = False, quiet: bool = False, continue_from: str | Path | None = None
) -> Progress:
    """Runs (or continues) training; returns the progress reached.

    continue_from: a checkpoint of an earlier run to go on from when there is no state beside `out` (the run
    directory was lost): its weights, tokenizer and progress, with Adam's moments anew (state_from_checkpoint).
    """
    run = _start(settings, resume, quiet, continue_from)
    while run.progress.epoch < settings.epochs:
        if _train_epoch(run):  # --max-steps reached
            return _finish(run)
        if rank_zero_says(_end_epoch(run) if run.rank == 0 else False, run.world, run.device):
            break
    _save_best(run)
    return _finish(run)


def _finish(run: Run) -> Progress:
    """The run's end (distributed.finish), its data-parallel wrapper let go first. The wrapper sits in a reference
    cycle: left to the garbage collector, it and the process group its reducer holds outlived the group's
    destruction, to be torn down with the interpreter, where gloo's threads could end a finished rank in SIGABRT."""
    run.compute_logits = run.model.logits
    gc.collect()
    return finish(run.model, run.world, run.device, run.progress)


def _start(settings: TrainSettings, resume: bool, quiet: bool, continue_from: str | Path | None) -> Run:
    """The run's setup: its state (resumed, continued or none), tokenizer, model, optimizer and data."""
    rank, world = rank_and_world()
    device = device_for_rank(rank)
    torch.backends.cuda.matmul.allow_tf32 = True
    validation_texts = [read_parallel(v.src, v.tgt) for v in settings.validation_sets]
    if settings.val_limit:
        validation_texts = [(src[: settings.val_limit], ref[: settings.val_limit]) for src, ref in validation_texts]
    if rank == 0:
        stale = [p for path in (Path(settings.out), settings.state_path) for p in remove_stale_temporaries(path)]
        if stale and not quiet:
            print(f"removed {len(stale)} temporary file(s) left by an interrupted save beside {settings.out}")
    state = _earlier_state(settings, resume, quiet, continue_from, rank)
    torch.manual_seed(settings.seed)
    texts = None if state else [read_parallel(corpus.src, corpus.tgt) for corpus in settings.corpora]
    tokenizer = state.tokenizer if state else _joint_tokenizer(texts, settings, rank, world)
    config = replace(
        settings.model,
        src_vocab_size=tokenizer.vocab_size,
        tgt_vocab_size=tokenizer.vocab_size,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
    )
    if state:
        check_same_model(settings.state_path, state.config, config)
    model = Transformer(config).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9)
    progress = Progress()
    if state:
        state.restore(model, optimizer)
        progress = state.progress
    corpora = prepared_pairs(tokenizer, settings.corpora, config.max_len, settings.cache_path, texts, write=rank == 0)
    validation = _validation_sets(settings, validation_texts, tokenizer, config.max_len)
    data = {
        f"train {i + 1}": {"path": c.src, "lines": len(p), "weight": c.weight}
        for i, (c, p) in enumerate(zip(settings.corpora, corpora))
    }
    data |= {
        f"val {i + 1}": {"path": corpus.src, "lines": len(v.src)}
        for i, (corpus, v) in enumerate(zip(settings.validation_sets, validation))
    }
    run = Run(
        settings, rank, world, device, quiet, tokenizer, config, model, optimizer, progress, corpora, validation, data
    )
    if rank == 0 and progress.step == 0 and settings.keep_last:  # the run's start: a timeline's first point
        run.save(epoch_path(settings.out, 0), model)
    model.train()
    return run


def _earlier_state(
    settings: TrainSettings, resume: bool, quiet: bool, continue_from: str | Path | None, rank: int
) -> LoadedState | None:
    """The state to go on from: this run's own (resume), an earlier run's checkpoint (continue_from), or none."""
    state: LoadedState | None = load_state(settings.state_path) if resume and settings.state_path.exists() else None
    if state is None and continue_from:
        state = state_from_checkpoint(Path(continue_from))
        if rank == 0 and not Path(settings.out).exists():  # the best so far, until an epoch beats it
            write_atomically(Path(settings.out), Path(continue_from).read_bytes())
        if not quiet:
            print(f"continuing from {continue_from} after epoch {state.progress.epoch} (Adam's moments anew)")
    elif resume and state is None and not quiet:
        print(f"no state at {settings.state_path}: starting afresh")
    return state


def _validation_sets(
    settings: TrainSettings, texts: list[tuple[list[str], list[str]]], tokenizer: Tokenizer, max_len: int
) -> list[ValidationSet]:
    names = [v.name for v in settings.validation_sets]
    return [
        ValidationSet(
            name if names.count(name) == 1 else f"{i + 1}:{name}", src, ref, encode_pairs(tokenizer, src, ref, max_len)
        )
        for i, (name, (src, ref)) in enumerate(zip(names, texts))
    ]


def _train_epoch(run: Run) -> bool:
    """One epoch's steps (or the rest of one, resumed); True when --max-steps stopped the run within it."""
    settings, progress, config = run.settings, run.progress, run.config
    pairs = run.pairs
    drawn = epoch_indices([len(c) for c in run.corpora], settings.train_weights, settings.seed, progress.epoch)
    batches = rank_batches(
        token_batches(pairs, settings.max_tokens, settings.seed, progress.epoch, drawn), run.rank, run.world
    )
    bar = tqdm(
        total=len(batches),
        initial=progress.batch,
        desc=f"epoch {progress.epoch + 1}",
        disable=run.quiet or run.rank > 0,
        unit="batch",
    )
    window = [0, time.perf_counter(), 0]  # target tokens, start, batches since the last reading
    pending: list[torch.Tensor] = []
    # Reading a loss waits for the GPU: there only every few steps, so the CPU prepares the next batches
    # while the GPU still computes (on the CPU the step is done when it returns: every step).
    read_every = READ_LOSS_EVERY if run.device.type == "cuda" else 1
    for index, batch in iterate_batches(pairs, batches, PAD_ID, config.start_id, progress.batch):
        # Dropout's random numbers for each step and rank follow from (seed, step, rank) alone, so a resumed
        # run, on one process or several, draws exactly what an uninterrupted one would.
        torch.manual_seed(settings.seed * 1_000_003 + progress.step * run.world + run.rank)
        lr = noam_rate(progress.step + 1, config.d_model, settings.lr_factor, settings.warmup)
        batch = [t.to(run.device) for t in batch]
        pending.append(
            training_step(
                run.compute_logits,
                run.model,
                run.optimizer,
                run.loss_fn,
                batch,
                lr,
                settings.clip_norm,
                run.world,
                run.autocast,
            )
        )
        progress.step += 1
        progress.batch = index + 1
        progress.lr_curve.append(lr)
        stop_now = bool(settings.max_steps) and progress.step >= settings.max_steps  # the same on every rank
        save_now = run.rank == 0 and (progress.step % settings.save_every == 0 or stop_now)
        if len(pending) == read_every or save_now or stop_now or progress.batch == len(batches):
            _show_losses(run, bar, pending, window, len(batches))
        if save_now:
            run.save_state()
        if stop_now:
            bar.close()
            return True
    bar.close()
    progress.epoch += 1
    progress.batch = 0
    return False


def _show_losses(run: Run, bar: tqdm, pending: list[torch.Tensor], window: list, epoch_batches: int) -> None:
    """Reads the pending steps' losses into the curve and the progress bar (loss, tokens a second, time left)."""
    window[2] += len(pending)
    bar.update(len(pending))
    window[0] += record_losses(run.progress, pending)
    run.progress.elapsed_seconds = time.perf_counter() - run.started
    seconds = time.perf_counter() - window[1]
    left = time_left(
        run.settings, run.progress, epoch_batches, seconds / window[2], time.perf_counter() - run.call_started
    )
    bar.set_postfix(loss=f"{run.progress.loss_curve[-1]:.3f}", tok_s=f"{window[0] / seconds:.0f}", left=left)


def _end_epoch(run: Run) -> bool:
    """Rank 0 validates and saves (the best, the epoch's snapshot, the state) while the other ranks wait; whether
    the run should stop (no gain for --patience epochs, or --max-seconds spent)."""
    settings, progress = run.settings, run.progress
    scores = validate(run.model, run.tokenizer, run.validation, settings)
    seconds = round(time.perf_counter() - run.started, 1)
    progress.epochs.append({"epoch": progress.epoch, "step": progress.step, **scores, "seconds": seconds})
    if not run.quiet:
        tqdm.write(f"epoch {progress.epoch}: val loss {scores['val_loss']:.3f}, val BLEU {scores['val_bleu']:.2f}")
    if scores["val_bleu"] > progress.best_bleu:
        progress.best_bleu, progress.best_epoch, progress.epochs_without_gain = scores["val_bleu"], progress.epoch, 0
        run.best_weights = copy.deepcopy(run.model)
        run.save(settings.out, run.model)
    else:
        progress.epochs_without_gain += 1
    if progress.epoch in settings.snapshot_epochs or settings.keep_last:
        run.save(epoch_path(settings.out, progress.epoch), run.model, {"val_bleu_greedy": scores["val_bleu"]})
    dropped = progress.epoch - settings.keep_last
    if settings.keep_last and dropped > 0 and dropped not in settings.snapshot_epochs:
        epoch_path(settings.out, dropped).unlink(missing_ok=True)
    progress.elapsed_seconds = time.perf_counter() - run.started
    run.save_state()
    out_of_time = bool(settings.max_seconds) and time.perf_counter() - run.call_started > settings.max_seconds
    return progress.epochs_without_gain >= settings.patience or out_of_time


def _save_best(run: Run) -> None:
    """Rank 0 writes the best weights with the whole run's curves (or, resumed after the best epoch, gives its
    file the whole curves)."""
    if run.rank == 0 and run.best_weights is not None:
        run.save(run.settings.out, run.best_weights)
    elif run.rank == 0 and Path(run.settings.out).exists():
        metadata = _metadata(run.settings, run.progress, run.data, run.device, run.world)
        update_metadata(Path(run.settings.out), lambda stored: stored.update(metadata))


def epoch_path(out: str | Path, epoch: int) -> Path:
    """Where the model after an epoch is kept (--snapshot-epochs, --keep-last)."""
    out = Path(out)
    return out.with_name(f"{out.stem}-epoch{epoch}{out.suffix}")


def time_left(
    settings: TrainSettings, progress: Progress, epoch_batches: int, seconds_per_batch: float, call_seconds: float
) -> str:
    """The estimate of the whole run's remaining time: this epoch's rest, then the epochs still allowed (by
    --epochs, and by --max-seconds, this call's budget, which lets the epoch in progress when it passes finish)."""
    epoch_seconds = epoch_batches * seconds_per_batch
    rest = (epoch_batches - progress.batch) * seconds_per_batch
    later = settings.epochs - progress.epoch - 1
    if settings.max_seconds:
        budget = settings.max_seconds - call_seconds - rest
        later = min(later, max(0, math.ceil(budget / epoch_seconds)))
    total = int(rest + later * epoch_seconds)
    return f"{total // 3600}h{total % 3600 // 60:02d}m" if total >= 3600 else f"{total // 60}m{total % 60:02d}s"


def _joint_tokenizer(
    texts: list[tuple[list[str], list[str]]], settings: TrainSettings, rank: int, world: int
) -> Tokenizer:
    """Trained on rank 0 (on a sample of the weighted mix) and sent to the others, so every rank encodes alike."""
    proto = None
    if rank == 0:
        sample = vocabulary_sample(texts, settings.train_weights, settings.tokenizer_sample, settings.seed)
        proto = train_tokenizer(sample, settings.model.src_vocab_size, settings.tokenizer_type).model_proto
    if world > 1:
        shared = [proto]
        dist.broadcast_object_list(shared, src=0)
        proto = shared[0]
    return Tokenizer(proto)
