"""Hugging Face model directories of the families this project reads, told apart by config.json's model_type."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import torch

from transformer.hugging_face.bart import import_bart
from transformer.hugging_face.files import read_config_json, read_json, regular_file
from transformer.hugging_face.m2m100 import import_m2m100, is_nllb
from transformer.hugging_face.marian import describe_marian, import_marian
from transformer.hugging_face.t5 import import_t5
from transformer.io.checkpoint import Checkpoint, CheckpointError

IMPORTERS: dict[str, Callable[..., Checkpoint]] = {
    "marian": import_marian,
    "m2m_100": import_m2m100,
    "bart": import_bart,
    "mbart": import_bart,
    "t5": import_t5,
    "mt5": import_t5,
}
# Variants of the families above whose layers this format cannot hold, refused with the reason.
REFUSED = {
    "nllb_moe": "NLLB-MoE routes each token through a few of many expert feed-forward layers (mixture of experts)",
    "switch_transformers": "Switch Transformers route each token to one of many expert feed-forward layers",
    "longt5": "LongT5 attends locally and through transient global tokens, not over the whole sequence",
}
FAMILY_NAMES = {"marian": "Marian", "m2m_100": "M2M100", "bart": "BART", "mbart": "mBART-50", "t5": "T5", "mt5": "mT5"}


def model_type(path: Path) -> str | None:
    """config.json's model_type of a Hugging Face directory, or None for anything else; CheckpointError for a
    hostile config (too deep, too large, not a regular file)."""
    if not path.is_dir() or regular_file(path, "config.json") is None:
        return None
    kind = read_config_json(path).get("model_type")
    return kind if isinstance(kind, str) else None


def is_hf_directory(path: Path) -> bool:
    """Whether path is a Hugging Face directory of a family read here (a hostile one reads as not)."""
    try:
        return model_type(path) in IMPORTERS
    except (CheckpointError, OSError):
        return False


WEIGHT_SUFFIXES = (".safetensors", ".bin")


def weights_size(directory: Path) -> str | None:
    """The size of a directory's weight files, as the checkpoint list gives a file's ("300.4 MB"); None if none."""
    sizes = [path.stat().st_size for path in directory.iterdir() if path.suffix in WEIGHT_SUFFIXES and path.is_file()]
    return f"{sum(sizes) / 1e6:.1f} MB" if sizes else None


def _language_pair(directory: Path) -> str | None:
    """The pair a multilingual directory translates by default: tokenizer_config.json's src_lang and tgt_lang."""
    try:
        settings = read_json(directory, "tokenizer_config.json")
    except CheckpointError:
        return None
    pair = [settings.get(name) if isinstance(settings, dict) else None for name in ("src_lang", "tgt_lang")]
    return "→".join(code[:20] for code in pair) if all(isinstance(code, str) for code in pair) else None


def describe_hf(directory: Path) -> str:
    """A one-line label for a directory, read without loading the model (a hostile config.json reads as none): its
    name, language pair where its files name one, family and size, as a checkpoint file's label gives them."""
    try:
        kind = model_type(directory)
    except (CheckpointError, OSError):
        return f"{directory.name} · Hugging Face (config.json unreadable)"
    size = weights_size(directory)
    if kind == "marian":
        return " · ".join(part for part in (describe_marian(directory), size) if part)
    family = FAMILY_NAMES.get(kind or "", kind)
    if kind == "m2m_100" and is_nllb(directory):
        family = "NLLB-200"
    return " · ".join(
        part for part in (directory.name, _language_pair(directory), f"Hugging Face {family}", size) if part
    )


def import_hf(directory: str | Path, device: torch.device | str = "cpu") -> Checkpoint:
    """A Hugging Face directory of any family read here, as a checkpoint of this project."""
    directory = Path(directory)
    kind = model_type(directory)
    if kind in REFUSED:
        raise CheckpointError(f"{directory.name}: {REFUSED[kind]}, which this format cannot hold: not read")
    if kind not in IMPORTERS:
        known = ", ".join(f"{name} ({key})" for key, name in FAMILY_NAMES.items())
        raise CheckpointError(
            f"{directory} is not a Hugging Face model directory of a family read here ({known}): model_type "
            f"{str(kind)[:40]!r}"
        )
    return IMPORTERS[kind](directory, device)
