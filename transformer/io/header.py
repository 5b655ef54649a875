"""The safetensors header of a checkpoint, validated from its bytes alone: nothing is allocated before it passes.

A header names every tensor with its dtype, shape and byte extent; checked against the shapes a config
derives (without building the model), it bounds what loading the file can cost.
"""

from __future__ import annotations

import json
import math
import struct
from pathlib import Path
from typing import Any

from transformer.model.config import shown
from transformer.text.files import FileRefused, open_regular


class CheckpointError(ValueError):
    """A file that is not a usable checkpoint; the message names the problem."""


MAX_HEADER_BYTES = 64 * 1024 * 1024


DTYPE_BYTES = {"F16": 2, "BF16": 2, "F32": 4}


def _without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose names are unique: a repeated tensor name would otherwise let the last one win."""
    unique = dict(pairs)
    if len(unique) != len(pairs):  # one pass with a set: a header may name a million tensors
        seen: set[str] = set()
        repeated = next(name for name, _ in pairs if name in seen or seen.add(name))
        raise CheckpointError(f"malformed header: the name {shown(repeated)} repeats")
    return unique


def read_header(data: bytes, require_metadata: bool = True, max_header_bytes: int = MAX_HEADER_BYTES) -> dict[str, Any]:
    """The safetensors JSON header, checked for size (at most max_header_bytes) and shape before anything is
    allocated.

    A checkpoint's must hold `__metadata__`; another safetensors file (a Hugging Face model's) need not.
    """
    if len(data) < 8:
        raise CheckpointError(f"file is truncated: {len(data)} bytes, too short for a safetensors header")
    # A safetensors header is JSON right after its 8-byte length, whose low byte may well be 0x80 or "PK".
    if data[8:9] != b"{" and (data[:2] == b"PK" or data[:1] == b"\x80"):
        raise CheckpointError(
            "this looks like a PyTorch pickle/zip file; it is refused because loading one can execute code. "
            "Convert it to this project's safetensors format."
        )
    (header_bytes,) = struct.unpack("<Q", data[:8])
    if header_bytes > max_header_bytes:
        raise CheckpointError(
            "this is not a checkpoint file (a checkpoint begins with the length of its header; these first bytes "
            f"would mean a header of {header_bytes:,} bytes, over the limit of {max_header_bytes:,})"
        )
    if 8 + header_bytes > len(data):
        raise CheckpointError(f"file is truncated: header claims {header_bytes:,} bytes, file has {len(data) - 8:,}")
    try:
        header = json.loads(bytes(data[8 : 8 + header_bytes]), object_pairs_hook=_without_duplicates)
    except CheckpointError:  # a repeated name
        raise
    except (ValueError, RecursionError):  # also a number past Python's 4,300 digits, a plain ValueError
        raise CheckpointError("not a checkpoint: the safetensors header is not valid JSON") from None
    if not isinstance(header, dict):
        raise CheckpointError("not a checkpoint: the safetensors header is not a JSON object")
    if require_metadata and not isinstance(header.get("__metadata__"), dict):
        raise CheckpointError("not a checkpoint: the safetensors header has no metadata")
    return header


def _file_prefix(path: str | Path) -> bytes:
    """A checkpoint file's first bytes: its 8-byte header length and the header (bounded), nothing of its body."""
    try:
        with open_regular(path) as file:
            prefix = file.read(8)
            if len(prefix) == 8:
                prefix += file.read(min(struct.unpack("<Q", prefix)[0], MAX_HEADER_BYTES + 1))
    except FileRefused as error:
        raise CheckpointError(str(error)) from None
    return prefix


def read_file_header(path: str | Path, require_metadata: bool = True) -> dict[str, Any]:
    """The header of a checkpoint file, reading only its first bytes (for listing files without loading them)."""
    return read_header(_file_prefix(path), require_metadata)


def declared_size(path: str | Path) -> int:
    """The bytes a checkpoint file's header accounts for (8, the header, and its tensors' extents), from its first
    bytes alone: a file of any other size is damaged, and is refused before its body is read. CheckpointError for
    a header that cannot be read."""
    prefix = _file_prefix(path)
    header, length = read_header(prefix), struct.unpack("<Q", prefix[:8])[0]
    ends = [
        entry["data_offsets"][1]
        for name, entry in header.items()
        if name != "__metadata__" and isinstance(entry, dict) and is_int_list(entry.get("data_offsets"), 2)
    ]
    return 8 + length + max(ends, default=0)


def stored_elements(header: dict[str, Any]) -> int:
    """The numbers a file's tensors hold, by their shapes in its header (their bytes depend on their dtype)."""
    return sum(
        math.prod(entry["shape"])
        for name, entry in header.items()
        if name != "__metadata__" and isinstance(entry, dict) and is_int_list(entry.get("shape"))
    )


def is_int_list(value: Any, length: int | None = None) -> bool:
    return (
        isinstance(value, list)
        and (length is None or len(value) == length)
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value)
    )


def check_tensors(header: dict[str, Any], expected: dict[str, tuple[int, ...]], payload_bytes: int) -> None:
    """Names, shapes, dtypes and extents of the stored tensors against the config's, from the header alone.

    The extents must tile the payload exactly (as safetensors requires), so the tensors hold no more numbers
    than the file has bytes: a small file cannot make the loader allocate a large model.
    """
    stored = {name: entry for name, entry in header.items() if name != "__metadata__"}
    missing = sorted(set(expected) - set(stored))
    extra = sorted(set(stored) - set(expected))
    if missing or extra:
        raise CheckpointError(
            "tensors do not match the config: "
            + (f"missing {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}; " if missing else "")
            + (f"unexpected {', '.join(extra[:5])}{' ...' if len(extra) > 5 else ''}" if extra else "")
        )
    extents = []
    for name, entry in stored.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("dtype"), str) or entry["dtype"] not in DTYPE_BYTES:
            raise CheckpointError(f"tensor {name}: unsupported or missing dtype")
        shape, offsets = entry.get("shape"), entry.get("data_offsets")
        if not is_int_list(shape):
            raise CheckpointError(f"tensor {name}: malformed shape {shown(shape)}")
        if tuple(shape) != expected[name]:
            raise CheckpointError(f"tensor {name} has shape {shape}, the config needs {list(expected[name])}")
        if not is_int_list(offsets, 2):
            raise CheckpointError(f"tensor {name}: malformed data offsets {offsets!r}")
        start, end = offsets
        if not start <= end <= payload_bytes or end - start != math.prod(shape) * DTYPE_BYTES[entry["dtype"]]:
            raise CheckpointError(f"tensor {name}: data offsets are inconsistent (file truncated or corrupt)")
        extents.append((start, end))
    covered = 0
    for start, end in sorted(extents):
        if start != covered:
            raise CheckpointError("tensor data overlaps or leaves gaps (file corrupt or crafted)")
        covered = end
    if covered != payload_bytes:
        raise CheckpointError(f"tensor data covers {covered:,} of the file's {payload_bytes:,} payload bytes")
