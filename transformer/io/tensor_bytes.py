"""Safetensors tensors to and from bytes without a copy of the whole: a tensor read is a view of its buffer, and a
file is written tensor by tensor.

safetensors' own `save` builds the whole file's bytes after a contiguous copy of every tensor: with the model beside
them, four times a model's weights (measured: docs/performance.md). Written here, a save holds one tensor's copy
beside the model.
"""

from __future__ import annotations

import json
import math
import struct
from typing import Any, BinaryIO

import torch

SAFETENSORS_DTYPES = {"F32": torch.float32, "F16": torch.float16, "BF16": torch.bfloat16}  # little-endian
SAFETENSORS_NAMES = {kind: name for name, kind in SAFETENSORS_DTYPES.items()}


def tensor_in(buffer: Any, offset: int, dtype: str, shape: tuple[int, ...]) -> torch.Tensor:
    """The tensor of safetensors `dtype` and `shape` at byte `offset` of `buffer`, a view of it (the buffer kept alive
    by the tensor); an empty one where the shape holds nothing."""
    kind, count = SAFETENSORS_DTYPES[dtype], math.prod(shape)
    view = torch.frombuffer(buffer, dtype=kind, count=count, offset=offset) if count else torch.empty(0, dtype=kind)
    return view.reshape(shape)


def write_tensors(
    handle: BinaryIO, tensors: dict[str, torch.Tensor], dtype: torch.dtype, metadata: dict[str, str]
) -> None:
    """A safetensors file of `tensors`, each converted to `dtype` on the CPU as it is written: the header (every
    tensor's dtype, shape and byte range, known without converting one), then each tensor's bytes in turn."""
    entries: dict[str, Any] = {"__metadata__": metadata}
    offset = 0
    for name, tensor in tensors.items():
        size = tensor.numel() * dtype.itemsize
        entries[name] = {
            "dtype": SAFETENSORS_NAMES[dtype],
            "shape": list(tensor.shape),
            "data_offsets": [offset, offset + size],
        }
        offset += size
    handle.write(header_bytes(entries))
    for tensor in tensors.values():
        flat = tensor.detach().to("cpu", dtype).contiguous().reshape(-1)  # a laid-out weight: one transposed copy
        if flat.numel():
            handle.write(flat.view(torch.uint8).numpy().data)


def header_bytes(entries: dict[str, Any]) -> bytes:
    """A safetensors file's beginning: its header's length (8 bytes, little-endian), then the header's JSON, padded
    with spaces so that the tensors start 8-byte aligned, as safetensors lays them out."""
    header = json.dumps(entries, separators=(",", ":")).encode()
    header += b" " * (-len(header) % 8)
    return struct.pack("<Q", len(header)) + header
