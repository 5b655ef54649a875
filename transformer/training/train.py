"""Training (section 5 of the paper): Adam with warm-up, label smoothing, token-count batches.

Resumable at any step, deterministic with a seed on the CPU, mixed precision on CUDA, and
data-parallel under torchrun (one process per GPU).
"""

from __future__ import annotations

import contextlib
import copy
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
from transformer.io.checkpoint import remove_stale_temporaries, save_checkpoint, update_metadata
from transformer.model.config import TransformerConfig
from transformer.model.encoder_decoder import Transformer
from transformer.text.files import read_parallel
from transformer.text.tokenizer import BOS_ID, EOS_ID, PAD_ID, UNK_ID, Tokenizer, train_tokenizer
from transformer.training.batches import encode_pairs, iterate_batches, rank_batches, token_batches
from transformer.training.state import LoadedState, Progress, check_same_model, load_state, save_state

DEFAULT_MODEL = TransformerConfig(src_vocab_size=8000, tgt_vocab_size=8000, max_len=128)


@dataclass(frozen=True)
class TrainSettings:
    """Everything a training run is given; stored in the checkpoint for reproduction."""

    train_src: str
    train_tgt: str
    val_src: str
    val_tgt: str
    out: str  # the best checkpoint by validation BLEU
    src_lang: str = "en"
    tgt_lang: str = "fr"
    # The model to train. Its vocabulary size is what the joint tokenizer is asked for; the trained
    # tokenizer's real size and special ids replace the config's.
    model: TransformerConfig = DEFAULT_MODEL
    tokenizer_type: str = "unigram"  # SentencePiece model type: unigram, bpe, word, char
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
    max_seconds: float = 0  # start no new epoch after this much training time; 0: no limit

    @property
    def state_path(self) -> Path:
        return Path(self.out).with_suffix(".state.safetensors")


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


def validate(
    model: Transformer, tokenizer, pairs, src: list[str], ref: list[str], settings: TrainSettings
) -> dict[str, float]:
    """Teacher-forced loss per token and greedy sacreBLEU on the validation set."""
    device = next(model.parameters()).device
    model.eval()
    loss_sum, tokens = 0.0, 0
    with torch.inference_mode():
        for _, (s, t_in, t_out) in iterate_batches(
            pairs, token_batches(pairs, settings.max_tokens, 0, 0), PAD_ID, model.config.start_id
        ):
            logits = model.logits(s.to(device), t_in.to(device)).float()
            loss_sum += nn.functional.cross_entropy(
                logits.transpose(1, 2), t_out.to(device), ignore_index=PAD_ID, reduction="sum"
            ).item()
            tokens += int((t_out != PAD_ID).sum())
    hypotheses = translate_texts(model, tokenizer, src, batch_size=128)
    model.train()
    return {"val_loss": loss_sum / max(tokens, 1), "val_bleu": sacrebleu.corpus_bleu(hypotheses, [ref]).score}


def _metadata(
    settings: TrainSettings, progress: Progress, counts: dict[str, int], device: torch.device, world: int
) -> dict[str, Any]:
    every = max(1, len(progress.loss_curve) // 2000)  # keep the stored curve small
    hardware = (
        torch.cuda.get_device_name(device)
        if device.type == "cuda"
        else f"{platform.processor() or platform.machine()} CPU, {torch.get_num_threads()} threads"
    )
    return {
        "languages": {"src": settings.src_lang, "tgt": settings.tgt_lang},
        "data": {name: {"path": getattr(settings, name), "lines": counts[name]} for name in counts},
        "settings": {k: v for k, v in asdict(settings).items() if k not in counts and k != "out"},
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


def train(settings: TrainSettings, resume: bool = False, quiet: bool = False) -> Progress:
    """Runs (or continues) training; returns the progress reached."""
    rank, world = _distributed()
    device = _device(rank)
    torch.backends.cuda.matmul.allow_tf32 = True
    src, tgt = read_parallel(settings.train_src, settings.train_tgt)
    val_src, val_tgt = read_parallel(settings.val_src, settings.val_tgt)
    if settings.val_limit:
        val_src, val_tgt = val_src[: settings.val_limit], val_tgt[: settings.val_limit]
    counts = {"train_src": len(src), "train_tgt": len(tgt), "val_src": len(val_src), "val_tgt": len(val_tgt)}
    if rank == 0:
        stale = [p for path in (Path(settings.out), settings.state_path) for p in remove_stale_temporaries(path)]
        if stale and not quiet:
            print(f"removed {len(stale)} temporary file(s) left by an interrupted save beside {settings.out}")
    state: LoadedState | None = load_state(settings.state_path) if resume and settings.state_path.exists() else None
    if resume and state is None and not quiet:
        print(f"no state at {settings.state_path}: starting afresh")
    torch.manual_seed(settings.seed)
    tokenizer = state.tokenizer if state else _joint_tokenizer(src + tgt, settings, rank, world)
    config = replace(
        settings.model, src_vocab_size=tokenizer.vocab_size, tgt_vocab_size=tokenizer.vocab_size,
        pad_id=PAD_ID, unk_id=UNK_ID, bos_id=BOS_ID, eos_id=EOS_ID,
    )  # fmt: skip
    if state:
        check_same_model(settings.state_path, state.config, config)
    model = Transformer(config).to(device)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9)
    progress = Progress()
    if state:
        state.restore(model, optimizer)
        progress = state.progress
    compute_logits = nn.parallel.DistributedDataParallel(_Logits(model)) if world > 1 else model.logits
    pairs = encode_pairs(tokenizer, src, tgt, config.max_len)
    val_pairs = encode_pairs(tokenizer, val_src, val_tgt, config.max_len)
    loss_fn = nn.CrossEntropyLoss(ignore_index=PAD_ID, label_smoothing=settings.label_smoothing, reduction="sum")
    autocast = torch.autocast("cuda", dtype=torch.bfloat16, enabled=device.type == "cuda")
    best_weights = None

    def save(path: str | Path, weights: Transformer, extra_scores: dict | None = None) -> None:
        metadata = _metadata(settings, progress, counts, device, world)
        if extra_scores:
            metadata["scores"] = extra_scores
        save_checkpoint(path, weights, tokenizer, metadata, getattr(torch, settings.save_dtype))

    model.train()
    started = time.perf_counter() - progress.elapsed_seconds
    while progress.epoch < settings.epochs:
        batches = rank_batches(token_batches(pairs, settings.max_tokens, settings.seed, progress.epoch), rank, world)
        bar = tqdm(total=len(batches), initial=progress.batch, desc=f"epoch {progress.epoch + 1}",
                   disable=quiet or rank > 0, unit="batch")  # fmt: skip
        window_tokens, window_start = 0, time.perf_counter()
        for index, batch in iterate_batches(pairs, batches, PAD_ID, config.start_id, progress.batch):
            # Dropout's random numbers for each step and rank follow from (seed, step, rank) alone, so a resumed
            # run, on one process or several, draws exactly what an uninterrupted one would.
            torch.manual_seed(settings.seed * 1_000_003 + progress.step * world + rank)
            lr = noam_rate(progress.step + 1, config.d_model, settings.lr_factor, settings.warmup)
            loss, tokens = training_step(compute_logits, model, optimizer, loss_fn, [t.to(device) for t in batch],
                                         lr, settings.clip_norm, world, autocast)  # fmt: skip
            progress.step += 1
            progress.batch = index + 1
            progress.loss_curve.append(loss)
            progress.lr_curve.append(lr)
            window_tokens += tokens
            bar.update(1)
            bar.set_postfix(loss=f"{loss:.3f}", tok_s=f"{window_tokens / (time.perf_counter() - window_start):.0f}")
            progress.elapsed_seconds = time.perf_counter() - started
            stop_now = bool(settings.max_steps) and progress.step >= settings.max_steps  # the same on every rank
            if rank == 0 and (progress.step % settings.save_every == 0 or stop_now):
                save_state(settings.state_path, model, optimizer, tokenizer, progress, asdict(settings))
            if stop_now:
                bar.close()
                return _finish(model, world, device, progress)
        bar.close()
        progress.epoch += 1
        progress.batch = 0
        stop = False
        if rank == 0:  # validates and saves while the other ranks wait at the broadcast below
            scores = validate(model, tokenizer, val_pairs, val_src, val_tgt, settings)
            progress.epochs.append({"epoch": progress.epoch, "step": progress.step, **scores,
                                    "seconds": round(time.perf_counter() - started, 1)})  # fmt: skip
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
            if progress.epoch in settings.snapshot_epochs:
                out = Path(settings.out)
                save(
                    out.with_name(f"{out.stem}-epoch{progress.epoch}{out.suffix}"),
                    model,
                    {"val_bleu_greedy": scores["val_bleu"]},
                )
            progress.elapsed_seconds = time.perf_counter() - started
            save_state(settings.state_path, model, optimizer, tokenizer, progress, asdict(settings))
            out_of_time = bool(settings.max_seconds) and time.perf_counter() - started > settings.max_seconds
            stop = progress.epochs_without_gain >= settings.patience or out_of_time
        if rank_zero_says(stop, world, device):  # one decision, rank 0's clock and validation, for every rank
            break
    if rank == 0 and best_weights is not None:  # the best weights, with the whole run's curves
        save(settings.out, best_weights)
    elif rank == 0 and Path(settings.out).exists():  # resumed after the best epoch: its file gets the whole curves
        update_metadata(
            Path(settings.out), lambda metadata: metadata.update(_metadata(settings, progress, counts, device, world))
        )
    return _finish(model, world, device, progress)


def _joint_tokenizer(sentences: list[str], settings: TrainSettings, rank: int, world: int) -> Tokenizer:
    """Trained on rank 0 and sent to the others, so that every rank encodes the data alike."""
    proto = (
        train_tokenizer(sentences, settings.model.src_vocab_size, settings.tokenizer_type).model_proto
        if rank == 0
        else None
    )
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
) -> tuple[float, int]:
    """One optimizer step on (src, decoder input, gold) of this rank; returns the loss per target token and
    the target tokens, both over every rank.

    The loss is normalised by every rank's target tokens together, so that a step of W ranks equals one
    process's step over all W batches: DDP averages the ranks' gradients, so each rank's summed loss is
    scaled by W / (all ranks' tokens).
    """
    src, decoder_input, gold = batch
    for group in optimizer.param_groups:
        group["lr"] = lr
    with autocast:
        logits = compute_logits(src, decoder_input)
    summed = loss_fn(logits.float().transpose(1, 2), gold)
    totals = torch.stack([summed.detach(), (gold != PAD_ID).sum().to(summed)])
    if world > 1:
        dist.all_reduce(totals)
    optimizer.zero_grad(set_to_none=True)
    (summed * world / totals[1]).backward()
    nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()
    return float(totals[0] / totals[1]), int(totals[1])


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
