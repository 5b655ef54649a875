"""Helpers shared by several test modules (fixtures live in conftest.py)."""

from __future__ import annotations

import gzip
import json
import re
import struct
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from transformer.io.checkpoint import read_header

REPO = Path(__file__).resolve().parent.parent


def with_config(data: bytes, **changes) -> bytes:
    """The checkpoint bytes with its config's fields changed, the tensors left as they are."""
    config = json.loads(read_header(data)["__metadata__"]["config"]) | changes
    return with_metadata(data, config=json.dumps(config))


def with_metadata(data: bytes, **changes) -> bytes:
    """The checkpoint bytes with `__metadata__` entries replaced, the tensors left as they are."""
    length = struct.unpack("<Q", data[:8])[0]
    header = read_header(data)
    header["__metadata__"].update(changes)
    encoded = json.dumps(header).encode()
    encoded += b" " * (-len(encoded) % 8)
    return struct.pack("<Q", len(encoded)) + encoded + data[8 + length :]


def _status_kib(field: str) -> int:
    return int(re.search(rf"{field}:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1))


@dataclass
class Cost:
    """What a block of code cost: wall seconds, and how far it raised the process's peak memory."""

    seconds: float = 0.0
    peak_growth_mb: float = 0.0


@contextmanager
def measured() -> Iterator[Cost]:
    """Peak RSS growth of the block, measured by resetting the kernel's high-water mark (VmHWM) first."""
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    before, cost, start = _status_kib("VmRSS"), Cost(), time.perf_counter()
    try:
        yield cost
    finally:
        cost.seconds = time.perf_counter() - start
        cost.peak_growth_mb = (_status_kib("VmHWM") - before) / 1024


def gzip_bomb(megabytes: int) -> bytes:
    """Gzip members of 8 MB of short lines each, concatenated: about 8 KB of file per 8 MB of text."""
    member = gzip.compress(b"a\n" * (4 * 2**20), compresslevel=9)
    return member * (megabytes // 8)
