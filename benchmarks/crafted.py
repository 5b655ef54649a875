"""Checkpoint files changed by hand, their tensors left as they are: what the tests and the hostile-upload benchmark
send where a checkpoint is read."""

from __future__ import annotations

import json
import struct

from transformer.io.header import read_header


def with_config(data: bytes, **changes) -> bytes:
    """The checkpoint bytes with its config's fields changed, the tensors left as they are."""
    config = json.loads(read_header(data)["__metadata__"]["config"]) | changes
    return with_metadata(data, config=json.dumps(config))


def with_metadata(data: bytes, **changes) -> bytes:
    """The checkpoint bytes with `__metadata__` entries replaced, the tensors left as they are."""
    header = read_header(data)
    header["__metadata__"].update(changes)
    return with_header(data, json.dumps(header).encode())


def with_header(data: bytes, encoded: bytes) -> bytes:
    """The checkpoint bytes with another header (JSON text), padded as safetensors pads it; the tensors kept."""
    length = struct.unpack("<Q", data[:8])[0]
    encoded += b" " * (-len(encoded) % 8)
    return struct.pack("<Q", len(encoded)) + encoded + data[8 + length :]
