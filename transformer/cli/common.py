"""What the commands share: the checkpoint and device flags, a settings dataclass as flags, decoding settings."""

from __future__ import annotations

import argparse
import ast
import re
import sys
from collections.abc import Collection
from dataclasses import MISSING, Field, fields
from pathlib import Path

import torch

from transformer.decoding.result import DecodeResult, truncation_note
from transformer.decoding.strategies import DecodeSettings, decode_text
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, Checkpoint
from transformer.model.config import TransformerConfig
from transformer.text.tokenizer import LONE_SURROGATE
from transformer.toolkits.opening import load_any_checkpoint

FIELD_HELP = {
    "train_src": "training source files, one per corpus",
    "train_tgt": "their target files, in the same order",
    "train_weights": "how many times an epoch reads each corpus, in the same order (0.5: a new random half each "
    "epoch); every corpus once if not given",
    "val_src": "validation source files, one per set: the best checkpoint has the best mean BLEU over the sets",
    "val_tgt": "their reference files, in the same order",
    "snapshot_epochs": "also keep the model after these epochs",
    "keep_last": "also keep the models of the last N epochs beside --out, for `average`, and the untrained start "
    "(NAME-epoch0), for `timeline`",
    "max_seconds": "start no new epoch after this many seconds of training in this call (a resumed or continued "
    "run gets them anew: a session's budget); the epoch in progress finishes; 0: no limit",
    "tokenizer_sample": "sentences (both sides, drawn in the weights' proportions) the vocabulary is trained on",
    "cpu_bfloat16": "bfloat16 autocast on the CPU too (a GPU always uses it): faster steps where the cores have "
    "bfloat16 instructions (avx512_bf16 or amx_bf16 in lscpu), slower where not; `python -m "
    "benchmarks.training_step` measures it",
}


# The config's fields the tokenizer decides: not options of `train`.
TOKENIZER_CONFIG_FIELDS = {"src_vocab_size", "tgt_vocab_size", "pad_id", "unk_id", "bos_id", "eos_id"}


def device(name: str) -> str:
    if name == "cuda" and not torch.cuda.is_available():
        print("CUDA is not available: running on the CPU", file=sys.stderr)
        return "cpu"
    return name


def add_checkpoint(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--checkpoint",
        default=str(DEFAULT_CHECKPOINT),
        help="checkpoint file, a Hugging Face model directory (Marian, M2M100, NLLB, mBART-50, BART, T5) or a fairseq "
        "model (its directory or .pt file) (default: %(default)s)",
    )
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")


def decode_argument(args: argparse.Namespace) -> tuple[Checkpoint, DecodeResult]:
    """The --text sentence decoded by the --checkpoint model as the decoding flags say (or, with a --target, that
    translation teacher forced), noting a cut on stderr."""
    undecodable = LONE_SURROGATE.search(args.text)  # what the shell's non-UTF-8 bytes become in sys.argv
    if undecodable:
        byte = undecodable.group().encode("utf-8", "surrogateescape").hex()
        raise ValueError(f"--text is not UTF-8 text (byte 0x{byte}); give the sentence as UTF-8")
    target = getattr(args, "target", None)
    if target is not None and not target.strip():
        raise ValueError("--target is empty: give the translation to read, or leave --target out to decode")
    checkpoint = load_any_checkpoint(args.checkpoint, device(args.device))
    if target is not None:  # a command that reads a given translation: teacher forced
        from transformer.decoding.forcing import teacher_force

        result = teacher_force(checkpoint.model, checkpoint.tokenizer, args.text, args.target)
    else:
        result = decode_text(checkpoint.model, checkpoint.tokenizer, args.text, decode_settings(args))
    if result.truncated:
        print(f"note: {truncation_note(checkpoint.tokenizer, checkpoint.config.max_len)}", file=sys.stderr)
    return checkpoint, result


def write_arrays(args: argparse.Namespace, arrays: dict) -> Path:
    """--out as .npz, or JSON with --format json."""
    from transformer.io.export import json_text, npz_bytes

    out = Path(args.out)
    if args.format == "json":
        out.write_text(json_text(arrays), encoding="utf-8")
    else:
        out.write_bytes(npz_bytes(arrays))
    return out


def add_fields(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    settings: type,
    defaults: object | None = None,
    skip: Collection[str] = (),
) -> None:
    """One flag per field of a settings dataclass (--beam-width for beam_width), typed as the field.

    Defaults are the field's own, or those of the given instance; a Literal field's values are its choices.
    """
    for field in fields(settings):
        if field.name in skip:
            continue
        flag = "--" + field.name.replace("_", "-")
        default = field.default if defaults is None else getattr(defaults, field.name)
        required = default is MISSING
        sequence = re.fullmatch(r"tuple\[(int|float|str), \.\.\.\]", field.type)
        if sequence:  # one value or several after the flag: --train-src a.en b.en
            kind = {"int": int, "float": float, "str": str}[sequence.group(1)]
            parser.add_argument(
                flag,
                type=kind,
                nargs="+" if required else "*",
                required=required,
                default=None if required else list(default),
                help=field_help(field, required),
            )
        elif field.type == "bool":
            parser.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=default, help=FIELD_HELP.get(field.name)
            )
        else:
            literal = re.fullmatch(r"Literal\[(.*)\]", field.type)
            choices = ast.literal_eval(f"({literal.group(1)},)") if literal else None
            kind = {"int": int, "int | None": int, "float": float}.get(field.type, str)
            parser.add_argument(
                flag,
                type=kind,
                required=required,
                default=None if required else default,
                choices=choices,
                help=field_help(field, required),
            )


def field_help(field: Field, required: bool) -> str | None:
    """The field's comment in its dataclass, when it has one (FIELD_HELP), and its default."""
    text = FIELD_HELP.get(field.name, "")
    return text if required else f"{text}{'; ' if text else ''}default: %(default)s"


def field_values(args: argparse.Namespace, settings: type, skip: Collection[str] = ()) -> dict:
    """The parsed flags that add_fields made for a settings dataclass, by field name (unset ones left out)."""
    return {
        f.name: getattr(args, f.name)
        for f in fields(settings)
        if f.name not in skip and getattr(args, f.name, None) is not None
    }


def add_train_fields(parser: argparse.ArgumentParser) -> None:
    from transformer.training.settings import DEFAULT_MODEL, TrainSettings

    add_fields(parser, TrainSettings, skip={"model"})
    model = parser.add_argument_group("the model (TransformerConfig); the tokenizer sets the special ids")
    model.add_argument(
        "--vocab-size",
        type=int,
        default=DEFAULT_MODEL.src_vocab_size,
        help="joint vocabulary asked of the tokenizer (default: %(default)s)",
    )
    add_fields(model, TransformerConfig, DEFAULT_MODEL, skip=TOKENIZER_CONFIG_FIELDS)
    parser.add_argument("--resume", action="store_true", help="continue from the saved state beside --out")
    parser.add_argument(
        "--continue-from",
        metavar="CHECKPOINT",
        help="where no state is beside --out (a lost run directory): go on from this checkpoint of "
        "the same run, its weights, vocabulary and epochs, Adam's moments anew",
    )


def add_decode_fields(parser: argparse.ArgumentParser) -> None:
    add_fields(parser, DecodeSettings)
    parser.add_argument("--beam", type=int, default=1, help="shorthand: beam search of this width (1: as --strategy)")


def decode_settings(args: argparse.Namespace) -> DecodeSettings:
    values = field_values(args, DecodeSettings)
    if args.beam > 1:
        values.update(strategy="beam", beam_width=args.beam)
    return DecodeSettings(**values)
