"""Where a CPU training step of the general model goes, and what makes it faster without changing what it learns.

    python -m benchmarks.training_step [--checkpoint PATH] [--repeats N]

The project's own `training_step` on the 4+3-layer, 256-wide model with an 8k vocabulary (or the checkpoint's
config), a 4,000-token batch, every row against the same step in float32 eager measured in the same run: the
label-smoothed loss read over (tokens, vocabulary) rows instead of a transposed (batch, vocabulary, length) view
(the softmax then runs along contiguous memory), bfloat16 autocast, and one thread. Each row also prints the loss
after its steps beside the baseline's, so a faster step that learns differently shows.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from collections.abc import Callable

import torch
from torch import nn

from transformer.model.config import TransformerConfig
from transformer.model.encoder_decoder import Transformer
from transformer.training.step import training_step

from .model_speed import Row, table

GENERAL = TransformerConfig(
    src_vocab_size=8000, tgt_vocab_size=8000, n_encoder_layers=4, n_decoder_layers=3, dropout=0.0, max_len=128
)
BATCH, LENGTH = 128, 31  # 3,968 target tokens, what a 4,000-token batch of equal-length sentences holds


def _transposed_loss(loss_fn: nn.Module) -> Callable[[torch.Tensor, torch.Tensor], torch.Tensor]:
    """The loss as the step computed it before: over a (batch, vocabulary, length) view of the logits."""
    return lambda flat_logits, flat_gold: loss_fn(
        flat_logits.view(BATCH, LENGTH, -1).transpose(1, 2), flat_gold.view(BATCH, LENGTH)
    )


def _steps_ms(config: TransformerConfig, repeats: int, autocast, threads: int, transposed: bool) -> tuple[float, float]:
    """The median milliseconds of a step (after two warm-up steps) and the loss per token after them."""
    torch.manual_seed(0)
    src = torch.randint(4, config.src_vocab_size, (BATCH, LENGTH))
    decoder_input = torch.randint(4, config.tgt_vocab_size, (BATCH, LENGTH))
    gold = torch.randint(4, config.tgt_vocab_size, (BATCH, LENGTH))
    model = Transformer(config).train()
    optimizer = torch.optim.Adam(model.parameters(), lr=0.0, betas=(0.9, 0.98), eps=1e-9)
    loss_fn = nn.CrossEntropyLoss(ignore_index=config.pad_id, label_smoothing=0.1, reduction="sum")
    used_loss = _transposed_loss(loss_fn) if transposed else loss_fn
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    times, loss = [], 0.0
    try:
        for index in range(repeats + 2):
            started = time.perf_counter()
            loss = training_step(
                model.logits, model, optimizer, used_loss, [src, decoder_input, gold], 3e-4, 1.0, 1, autocast
            )[0].item()
            if index >= 2:
                times.append((time.perf_counter() - started) * 1000)
    finally:
        torch.set_num_threads(before)
    return statistics.median(times), loss


def training_step_rows(config: TransformerConfig = GENERAL, repeats: int = 5) -> list[Row]:
    eager = contextlib.nullcontext()
    bf16 = torch.autocast("cpu", dtype=torch.bfloat16)
    threads = torch.get_num_threads()
    baseline_ms, baseline_loss = _steps_ms(config, repeats, eager, threads, transposed=True)
    variants = [
        ("loss over token rows (the step's own)", eager, threads, False),
        ("loss over token rows, bfloat16 autocast", bf16, threads, False),
        ("loss over token rows, 1 thread", eager, 1, False),
    ]
    rows = []
    for what, autocast, count, transposed in variants:
        ours_ms, loss = _steps_ms(config, repeats, autocast, count, transposed)
        tokens = BATCH * LENGTH / ours_ms * 1000
        rows.append(
            Row(
                f"training step, {what}",
                f"float32 eager, transposed loss, {threads} threads",
                baseline_ms,
                ours_ms,
                "< 1",
                f"{tokens:,.0f} target tokens/s; loss {loss:.4f} (baseline {baseline_loss:.4f})",
            )
        )
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.training_step", description=__doc__)
    parser.add_argument("--checkpoint", help="use this checkpoint's model config instead of the general recipe's")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    config = GENERAL
    if args.checkpoint:
        from transformer.io.checkpoint import load_checkpoint

        config = load_checkpoint(args.checkpoint).config
    print(table(training_step_rows(config, args.repeats)))


if __name__ == "__main__":
    main()
