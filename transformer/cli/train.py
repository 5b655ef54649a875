"""Training from the command line: `train`, `average` (the mean of a run's epochs), `holdout` (a dev set held out by source sentence), `synthetic` (the tiny sequence-reversal model)."""

from __future__ import annotations

import argparse
import os

import torch

from transformer.cli.common import (
    TOKENIZER_CONFIG_FIELDS,
    add_train_fields,
    field_values,
)
from transformer.io.checkpoint import DEFAULT_CHECKPOINT
from transformer.model.config import TransformerConfig


def cmd_train(args: argparse.Namespace) -> int:
    from transformer.training.settings import TrainSettings
    from transformer.training.train import train

    values = field_values(args, TrainSettings, skip={"model"})
    for name in ("train_src", "train_tgt", "val_src", "val_tgt", "train_weights", "snapshot_epochs"):
        values[name] = tuple(values.get(name, ()))
    model = field_values(args, TransformerConfig, skip=TOKENIZER_CONFIG_FIELDS)
    values["model"] = TransformerConfig(src_vocab_size=args.vocab_size, tgt_vocab_size=args.vocab_size, **model)
    progress = train(TrainSettings(**values), resume=args.resume, continue_from=args.continue_from)
    if os.environ.get("RANK", "0") == "0":  # under torchrun, only rank 0 validated: its line alone
        print(
            f"done: {progress.step} steps, best validation BLEU {progress.best_bleu:.2f} (epoch {progress.best_epoch})"
        )
    return 0


def cmd_average(args: argparse.Namespace) -> int:
    from transformer.io.average import average_checkpoints
    from transformer.io.checkpoint import save_checkpoint

    averaged = average_checkpoints(args.checkpoints)
    save_checkpoint(args.out, averaged.model, averaged.tokenizer, averaged.metadata, getattr(torch, args.dtype))
    print(f"wrote {args.out}: the mean of {len(args.checkpoints)} checkpoints")
    return 0


def cmd_holdout(args: argparse.Namespace) -> int:
    from transformer.text.holdout import write_holdout

    for part, path in write_holdout(args.src, args.tgt, args.size, args.out_dir, args.seed).items():
        print(f"{part}: {path}")
    return 0


def cmd_synthetic(args: argparse.Namespace) -> int:
    from transformer.training.synthetic import train_reversal

    bleu = train_reversal(args.out, seed=args.seed, epochs=args.epochs)
    print(f"wrote {args.out}: validation BLEU {bleu:.2f}")
    return 0


def add_parsers(commands: argparse._SubParsersAction) -> None:
    """Registers this module's commands."""
    train = commands.add_parser("train", help="train a model on parallel text and save the best checkpoint")
    add_train_fields(train)
    train.set_defaults(run=cmd_train)

    average = commands.add_parser("average", help="the mean of several checkpoints of one run (e.g. its last epochs)")
    average.add_argument("checkpoints", nargs="+", help="checkpoint files of the same model and vocabulary")
    average.add_argument("--out", required=True, help="the checkpoint file to write")
    average.add_argument("--dtype", choices=["float32", "float16"], default="float16")
    average.set_defaults(run=cmd_average)

    holdout = commands.add_parser("holdout", help="hold a dev set out of a corpus, by source sentence")
    holdout.add_argument("--src", required=True)
    holdout.add_argument("--tgt", required=True)
    holdout.add_argument("--size", type=int, default=1000, help="distinct source sentences to hold out")
    holdout.add_argument("--seed", type=int, default=1)
    holdout.add_argument("--out-dir", required=True, help="NAME-train and NAME-dev files are written there")
    holdout.set_defaults(run=cmd_holdout)

    synthetic = commands.add_parser("synthetic", help="train the tiny sequence-reversal model (about a minute)")
    synthetic.add_argument("--out", default=str(DEFAULT_CHECKPOINT.with_name("reverse.safetensors")))
    synthetic.add_argument("--seed", type=int, default=1)
    synthetic.add_argument("--epochs", type=int, default=30)
    synthetic.set_defaults(run=cmd_synthetic)
