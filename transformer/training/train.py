"""Training (section 5 of the paper): Adam with warm-up, label smoothing, token-count batches.

Resumable at any step, deterministic with a seed on the CPU, mixed precision on CUDA, and
data-parallel under torchrun (one process per GPU).
"""

from __future__ import annotations

import contextlib
import copy
import math
import os
import platform
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any

import sacrebleu
import torch
import torch.distributed as dist
from torch import nn
from tqdm import tqdm

from transformer.decoding.translate import translate_texts
from transformer.io.checkpoint import remove_stale_temporaries, save_checkpoint, update_metadata, write_atomically
from transformer.model.config import TransformerConfig
from transformer.model.encoder_decoder import Transformer
from transformer.text.files import read_parallel
from transformer.text.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, train_tokenizer
from transformer.training.batches import iterate_batches, rank_batches, token_batches
from transformer.training.corpora import Corpus, encode_pairs, epoch_indices, prepared_pairs, vocabulary_sample
from transformer.training.state import (
    LoadedState,
    Progress,
    check_same_model,
    load_state,
    save_state,
    state_from_checkpoint,
)

DEFAULT_MODEL = TransformerConfig(src_vocab_size=8000, tgt_vocab_size=8000, max_len=128)
READ_LOSS_EVERY = 25  # steps between reads of the loss on a GPU (each read waits for it)
DATA_FIELDS = {"train_src", "train_tgt", "val_src", "val_tgt", "train_weights", "out"}  # metadata's "data" says these


@dataclass(frozen=True)
class TrainSettings:
    """Everything a training run is given; stored in the checkpoint for reproduction."""

    train_src: tuple[str, ...]  # one file per corpus (a single path is one corpus)
    train_tgt: tuple[str, ...]  # line N translates line N of the same corpus's train_src
    val_src: tuple[str, ...]  # one file per validation set; the best checkpoint has the best mean BLEU over them
    val_tgt: tuple[str, ...]
    out: str  # the best checkpoint by validation BLEU
    train_weights: tuple[float, ...] = ()  # times an epoch reads each corpus (0.5: a new random half each epoch); 1s
    src_lang: str = "en"
    tgt_lang: str = "fr"
    # The model to train. Its vocabulary size is what the joint tokenizer is asked for; the trained
    # tokenizer's real size and special ids replace the config's.
    model: TransformerConfig = DEFAULT_MODEL
    tokenizer_type: str = "unigram"  # SentencePiece model type: unigram, bpe, word, char
    tokenizer_sample: int = 1_000_000  # sentences (both sides, drawn as the weights say) the vocabulary is trained on
    epochs: int = 30
    max_steps: int = 0  # stop (and save) after this many steps in all; 0: no limit
    max_tokens: int = 4000  # padded tokens per side of a batch
    lr_factor: float = 0.5  # scales the Noam schedule
    warmup: int = 800
    label_smoothing: float = 0.1
    clip_norm: float = 1.0
    patience: int = 5  # epochs without a better validation BLEU before stopping
    seed: int = 1
    snapshot_epochs: tuple[int, ...] = ()  # also keep the model after these epochs
    save_every: int = 200  # steps between saves of the resumable state
    save_dtype: str = "float16"
    val_limit: int = 0  # validate on the first N sentences only; 0: all
    max_seconds: float = 0  # start no new epoch after this much training time in this call; 0: no limit
    keep_last: int = 0  # also keep the models of the last N epochs (and the untrained start) beside --out; 0: none
    cpu_bfloat16: bool = False  # bfloat16 autocast on the CPU as on a GPU: faster on cores with bfloat16 instructions

    def __post_init__(self) -> None:
        for name in ("train_src", "train_tgt", "val_src", "val_tgt"):
            if isinstance(getattr(self, name), str):
                object.__setattr__(self, name, (getattr(self, name),))
        weights = tuple(float(w) for w in self.train_weights) or (1.0,) * len(self.train_src)
        object.__setattr__(self, "train_weights", weights)
        if not len(self.train_src) == len(self.train_tgt) == len(weights):
            raise ValueError(
                f"{len(self.train_src)} source files, {len(self.train_tgt)} target files and "
                f"{len(weights)} weights: give one of each per training corpus"
            )
        if not self.val_src:
            raise ValueError("give at least one validation set (--val-src and --val-tgt)")
        if len(self.val_src) != len(self.val_tgt):
            raise ValueError(f"{len(self.val_src)} validation source files but {len(self.val_tgt)} target files")
        if not all(w > 0 for w in weights):
            raise ValueError("every corpus weight must be above 0 (leave a corpus out instead)")

    @property
    def corpora(self) -> tuple[Corpus, ...]:
        return tuple(Corpus(s, t, w) for s, t, w in zip(self.train_src, self.train_tgt, self.train_weights))

    @property
    def validation_sets(self) -> tuple[Corpus, ...]:
        return tuple(Corpus(s, t) for s, t in zip(self.val_src, self.val_tgt))

    @property
    def state_path(self) -> Path:
        return Path(self.out).with_suffix(".state.safetensors")

    @property
    def cache_path(self) -> Path:
        """The training data's ids, prepared once (see corpora.prepared_pairs)."""
        return Path(self.out).with_suffix(".data.npz")


def noam_rate(step: int, d_model: int, factor: float, warmup: int) -> float:
    """lrate = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (equation 3)."""
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def _distributed() -> tuple[int, int]:
    """(rank, world size) under torchrun, (0, 1) otherwise."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return (dist.get_rank(), world) if world > 1 else (0, 1)


def _device(rank: int) -> torch.device:
    if torch.cuda.is_available():
        index = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


class _Logits(nn.Module):
    """model.logits as a forward(), which DistributedDataParallel needs to synchronise gradients."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        return self.model.logits(src, tgt)


@dataclass(frozen=True)
class ValidationSet:
    name: str
    src: list[str]
    ref: list[str]
    pairs: list[tuple[list[int], list[int]]]


def validate(model: Transformer, tokenizer, sets: list[ValidationSet], settings: TrainSettings) -> dict[str, float]:
    """Teacher-forced loss per token over every set, greedy sacreBLEU of each, and their mean BLEU (`val_bleu`,
    which chooses the best checkpoint: one set alone would pick the model that fits its own domain)."""
    device = next(model.parameters()).device
    model.eval()
    loss_sum, tokens = 0.0, 0
    pairs = [pair for validation in sets for pair in validation.pairs]
    with torch.inference_mode():
        for _, (s, t_in, t_out) in iterate_batches(
            pairs, token_batches(pairs, settings.max_tokens, 0, 0), PAD_ID, model.config.start_id
        ):
            logits = model.logits(s.to(device), t_in.to(device)).float()
            loss_sum += nn.functional.cross_entropy(
                logits.transpose(1, 2), t_out.to(device), ignore_index=PAD_ID, reduction="sum"
            ).item()
            tokens += int((t_out != PAD_ID).sum())
    bleus = {
        f"val_bleu {validation.name}": sacrebleu.corpus_bleu(
            translate_texts(model, tokenizer, validation.src, batch_size=128), [validation.ref]
        ).score
        for validation in sets
    }
    model.train()
    mean = sum(bleus.values()) / len(bleus)
    return {"val_loss": loss_sum / max(tokens, 1), "val_bleu": mean, **(bleus if len(bleus) > 1 else {})}


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


def train(
    settings: TrainSettings, resume: bool = False, quiet: bool = False, continue_from: str | Path | None = None
) -> Progress:
    """Runs (or continues) training; returns the progress reached.

    continue_from: a checkpoint of an earlier run to go on from when there is no state beside `out` (the run
    directory was lost): its weights, tokenizer and progress, with Adam's moments anew (state_from_checkpoint).
    """
    rank, world = _distributed()
    device = _device(rank)
    torch.backends.cuda.matmul.allow_tf32 = True
    validation_texts = [read_parallel(v.src, v.tgt) for v in settings.validation_sets]
    if settings.val_limit:
        validation_texts = [(src[: settings.val_limit], ref[: settings.val_limit]) for src, ref in validation_texts]
    if rank == 0:
        stale = [p for path in (Path(settings.out), settings.state_path) for p in remove_stale_temporaries(path)]
        if stale and not quiet:
            print(f"removed {len(stale)} temporary file(s) left by an interrupted save beside {settings.out}")
    state: LoadedState | None = load_state(settings.state_path) if resume and settings.state_path.exists() else None
    if state is None and continue_from:
        state = state_from_checkpoint(Path(continue_from))
        if rank == 0 and not Path(settings.out).exists():  # the best so far, until an epoch beats it
            write_atomically(Path(settings.out), Path(continue_from).read_bytes())
        if not quiet:
            print(f"continuing from {continue_from} after epoch {state.progress.epoch} (Adam's moments anew)")
    elif resume and state is None and not quiet:
        print(f"no state at {settings.state_path}: starting afresh")
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
    compute_logits = nn.parallel.DistributedDataParallel(_Logits(model)) if world > 1 else model.logits
    corpora = prepared_pairs(tokenizer, settings.corpora, config.max_len, settings.cache_path, texts, write=rank == 0)
    pairs = [pair for corpus in corpora for pair in corpus]
    names = [v.name for v in settings.validation_sets]
    validation = [
        ValidationSet(
            name if names.count(name) == 1 else f"{i + 1}:{name}",
            src,
            ref,
            encode_pairs(tokenizer, src, ref, config.max_len),
        )
        for i, (name, (src, ref)) in enumerate(zip(names, validation_texts))
    ]
    data = {
        f"train {i + 1}": {"path": c.src, "lines": len(p), "weight": c.weight}
        for i, (c, p) in enumerate(zip(settings.corpora, corpora))
    }
    data |= {
        f"val {i + 1}": {"path": corpus.src, "lines": len(v.src)}
        for i, (corpus, v) in enumerate(zip(settings.validation_sets, validation))
    }
    loss_fn = nn.CrossEntropyLoss(ignore_index=PAD_ID, label_smoothing=settings.label_smoothing, reduction="sum")
    autocast = torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda" or settings.cpu_bfloat16)
    best_weights = None

    def save(path: str | Path, weights: Transformer, extra_scores: dict | None = None) -> None:
        metadata = _metadata(settings, progress, data, device, world)
        if extra_scores:
            metadata["scores"] = extra_scores
        save_checkpoint(path, weights, tokenizer, metadata, getattr(torch, settings.save_dtype))

    if rank == 0 and progress.step == 0 and settings.keep_last:  # the run's start: a timeline's first point
        save(epoch_path(settings.out, 0), model)
    model.train()
    started = time.perf_counter() - progress.elapsed_seconds
    call_started = time.perf_counter()  # --max-seconds is this call's budget: a resumed run gets it anew
    while progress.epoch < settings.epochs:
        drawn = epoch_indices([len(c) for c in corpora], settings.train_weights, settings.seed, progress.epoch)
        batches = rank_batches(
            token_batches(pairs, settings.max_tokens, settings.seed, progress.epoch, drawn), rank, world
        )
        bar = tqdm(
            total=len(batches),
            initial=progress.batch,
            desc=f"epoch {progress.epoch + 1}",
            disable=quiet or rank > 0,
            unit="batch",
        )
        window_tokens, window_start, window_batches = 0, time.perf_counter(), 0
        pending: list[torch.Tensor] = []
        # Reading a loss waits for the GPU: there only every few steps, so the CPU prepares the next batches
        # while the GPU still computes (on the CPU the step is done when it returns: every step).
        read_every = READ_LOSS_EVERY if device.type == "cuda" else 1
        for index, batch in iterate_batches(pairs, batches, PAD_ID, config.start_id, progress.batch):
            # Dropout's random numbers for each step and rank follow from (seed, step, rank) alone, so a resumed
            # run, on one process or several, draws exactly what an uninterrupted one would.
            torch.manual_seed(settings.seed * 1_000_003 + progress.step * world + rank)
            lr = noam_rate(progress.step + 1, config.d_model, settings.lr_factor, settings.warmup)
            pending.append(
                training_step(
                    compute_logits,
                    model,
                    optimizer,
                    loss_fn,
                    [t.to(device) for t in batch],
                    lr,
                    settings.clip_norm,
                    world,
                    autocast,
                )
            )
            progress.step += 1
            progress.batch = index + 1
            progress.lr_curve.append(lr)
            stop_now = bool(settings.max_steps) and progress.step >= settings.max_steps  # the same on every rank
            save_now = rank == 0 and (progress.step % settings.save_every == 0 or stop_now)
            if len(pending) == read_every or save_now or stop_now or progress.batch == len(batches):
                window_batches += len(pending)
                bar.update(len(pending))
                window_tokens += _record_losses(progress, pending)
                progress.elapsed_seconds = time.perf_counter() - started
                seconds = time.perf_counter() - window_start
                bar.set_postfix(
                    loss=f"{progress.loss_curve[-1]:.3f}",
                    tok_s=f"{window_tokens / seconds:.0f}",
                    left=time_left(
                        settings, progress, len(batches), seconds / window_batches, time.perf_counter() - call_started
                    ),
                )
            if save_now:
                save_state(settings.state_path, model, optimizer, tokenizer, progress, asdict(settings))
            if stop_now:
                bar.close()
                return _finish(model, world, device, progress)
        bar.close()
        progress.epoch += 1
        progress.batch = 0
        stop = False
        if rank == 0:  # validates and saves while the other ranks wait at the broadcast below
            scores = validate(model, tokenizer, validation, settings)
            progress.epochs.append(
                {
                    "epoch": progress.epoch,
                    "step": progress.step,
                    **scores,
                    "seconds": round(time.perf_counter() - started, 1),
                }
            )
            if not quiet:
                tqdm.write(
                    f"epoch {progress.epoch}: val loss {scores['val_loss']:.3f}, val BLEU {scores['val_bleu']:.2f}"
                )
            if scores["val_bleu"] > progress.best_bleu:
                progress.best_bleu, progress.best_epoch, progress.epochs_without_gain = (
                    scores["val_bleu"],
                    progress.epoch,
                    0,
                )
                best_weights = copy.deepcopy(model)
                save(settings.out, model)
            else:
                progress.epochs_without_gain += 1
            if progress.epoch in settings.snapshot_epochs or settings.keep_last:
                save(epoch_path(settings.out, progress.epoch), model, {"val_bleu_greedy": scores["val_bleu"]})
            dropped = progress.epoch - settings.keep_last
            if settings.keep_last and dropped > 0 and dropped not in settings.snapshot_epochs:
                epoch_path(settings.out, dropped).unlink(missing_ok=True)
            progress.elapsed_seconds = time.perf_counter() - started
            save_state(settings.state_path, model, optimizer, tokenizer, progress, asdict(settings))
            out_of_time = bool(settings.max_seconds) and time.perf_counter() - call_started > settings.max_seconds
            stop = progress.epochs_without_gain >= settings.patience or out_of_time
        if rank_zero_says(stop, world, device):  # one decision, rank 0's clock and validation, for every rank
            break
    if rank == 0 and best_weights is not None:  # the best weights, with the whole run's curves
        save(settings.out, best_weights)
    elif rank == 0 and Path(settings.out).exists():  # resumed after the best epoch: its file gets the whole curves
        update_metadata(
            Path(settings.out), lambda metadata: metadata.update(_metadata(settings, progress, data, device, world))
        )
    return _finish(model, world, device, progress)


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


def training_step(
    compute_logits: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    model: Transformer,
    optimizer: torch.optim.Optimizer,
    loss_fn: nn.Module,
    batch: list[torch.Tensor],
    lr: float,
    clip_norm: float,
    world: int,
    autocast: contextlib.AbstractContextManager,
) -> torch.Tensor:
    """One optimizer step on (src, decoder input, gold) of this rank; returns [the loss per target token, the
    target tokens], both over every rank, as a tensor on the device (reading it waits for the step to finish).

    The loss is normalised by every rank's target tokens together, so that a step of W ranks equals one
    process's step over all W batches: DDP averages the ranks' gradients, so each rank's summed loss is
    scaled by W / (all ranks' tokens).
    """
    src, decoder_input, gold = batch
    for group in optimizer.param_groups:
        group["lr"] = lr
    with autocast:
        logits = compute_logits(src, decoder_input)
    summed = loss_fn(logits.float().flatten(0, 1), gold.flatten())  # one row per token: softmax over the last dim
    totals = torch.stack([summed.detach(), (gold != PAD_ID).sum().to(summed)])
    if world > 1:
        dist.all_reduce(totals)
    optimizer.zero_grad(set_to_none=True)
    (summed * world / totals[1]).backward()
    nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()
    return torch.stack([totals[0] / totals[1], totals[1]]).detach()


def _record_losses(progress: Progress, pending: list[torch.Tensor]) -> int:
    """Appends the pending steps' losses to the curve and empties the list; returns their target tokens."""
    values = torch.stack(pending).tolist()
    pending.clear()
    progress.loss_curve.extend(loss for loss, _ in values)
    return int(sum(tokens for _, tokens in values))


def rank_zero_says(flag: bool, world: int, device: torch.device) -> bool:
    """Rank 0's decision for every rank (each rank's own clock and state would disagree, and a rank that
    stopped alone would leave the others waiting in a collective)."""
    if world == 1:
        return flag
    decision = torch.tensor([int(flag)], device=device)
    dist.broadcast(decision, src=0)
    return bool(decision.item())


def _finish(model: Transformer, world: int, device: torch.device, progress: Progress) -> Progress:
    """Under torchrun: checks that every rank holds the same weights, waits for rank 0's saves, and leaves."""
    if world > 1:
        checksum = torch.stack([p.detach().double().sum() for p in model.parameters()]).to(device)
        gathered = [torch.zeros_like(checksum) for _ in range(world)]
        dist.all_gather(gathered, checksum)
        if any(not torch.equal(gathered[0], other) for other in gathered[1:]):
            raise RuntimeError("the ranks' weights differ after training: data-parallel steps went out of step")
        dist.barrier()
        dist.destroy_process_group()
    return progress
