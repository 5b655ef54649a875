"""Any model the app and the command line open by path: a checkpoint file of this project, a Hugging Face
directory, or a fairseq directory (or its `.pt` file), told apart by what the path holds, never by running it."""

from __future__ import annotations

from pathlib import Path

import torch

from transformer.hugging_face.directory import describe_hf, import_hf, is_hf_directory
from transformer.io.checkpoint import Checkpoint, load_checkpoint
from transformer.toolkits.fairseq import describe_fairseq, import_fairseq, is_fairseq_directory


def is_model_directory(path: Path) -> bool:
    """Whether path is a directory of a model read here (Hugging Face's or fairseq's)."""
    return is_hf_directory(path) or is_fairseq_directory(path)


def describe_directory(path: Path) -> str:
    """The checkpoint list's label for a model directory, read without loading the model."""
    return describe_fairseq(path) if is_fairseq_directory(path) else describe_hf(path)


def load_any_checkpoint(path: str | Path, device: torch.device | str = "cpu") -> Checkpoint:
    """A checkpoint file, or a toolkit's model converted as it is read (the command line's and the app's
    --checkpoint): a fairseq directory or `.pt` file, a Hugging Face directory."""
    path = Path(path)
    if is_fairseq_directory(path) or (path.suffix == ".pt" and path.is_file()):
        return import_fairseq(path, device)
    return import_hf(path, device) if path.is_dir() else load_checkpoint(path, device)
