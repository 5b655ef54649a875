"""A toolkit's PyTorch file (`.pt`, a pickle) read without running anything in it: torch's weights-only
unpickler builds tensors and plain containers only, plus the classes on an allow-list (fairseq's options are an
`argparse.Namespace`); a file that names any other global is refused before any of it is built."""

from __future__ import annotations

import argparse
import pickle
from pathlib import Path
from typing import Any

import torch

from transformer.io.checkpoint import CheckpointError, CheckpointTooLarge, file_limit
from transformer.io.memory import memory_available
from transformer.text.files import FileRefused, open_regular

ALLOWED_GLOBALS = [argparse.Namespace]


def read_pickled(path: Path) -> dict[str, Any]:
    """The dict a toolkit saved with torch.save, tensors memory-mapped from the file; CheckpointError for a file
    that names a global off the allow-list, is not a PyTorch file, or would not fit in the memory free now."""
    try:
        with open_regular(path) as file:  # a pipe or a device is refused before torch opens it
            start = file.read(4)
            size = file.seek(0, 2)
    except (OSError, FileRefused) as error:
        raise CheckpointError(f"{path.name} cannot be read: {str(error)[:200]}") from None
    zipped = start == b"PK\x03\x04"  # torch.save's format since 1.6; before, pickles (protocol 2: b"\x80\x02")
    if not zipped and not start.startswith(b"\x80"):
        raise CheckpointError(f"{path.name} is not a PyTorch file (neither a zip nor a pickle)")
    limit = file_limit(memory_available())
    if size > limit:
        raise CheckpointTooLarge(f"{path.name} is {size / 1e9:.2f} GB; {limit / 1e9:.2f} GB opens now: not opened")
    try:
        with torch.serialization.safe_globals(ALLOWED_GLOBALS):
            loaded = torch.load(path, map_location="cpu", weights_only=True, mmap=zipped)
    except pickle.UnpicklingError as error:
        told = str(error).partition("WeightsUnpickler error:")[2].partition("Check the documentation")[0]
        reason = " ".join(told.split()).split(". ")[0]  # what torch names, without its advice to unpickle anyway
        raise CheckpointError(
            f"{path.name} holds more than weights and options, refused unread: {reason[:200]}"
        ) from None
    except (RuntimeError, OSError, ValueError, EOFError, AttributeError, TypeError) as error:
        raise CheckpointError(f"{path.name} is not a PyTorch file that can be read: {str(error)[:200]}") from None
    if not isinstance(loaded, dict):
        raise CheckpointError(f"{path.name} holds a {type(loaded).__name__}, not a toolkit's checkpoint (a dict)")
    return loaded


def options_of(value: Any) -> dict[str, Any]:
    """An options object as a dict: an argparse.Namespace's attributes, a dict as it is, anything else empty."""
    if isinstance(value, argparse.Namespace):
        return vars(value)
    return value if isinstance(value, dict) else {}
