"""One cache for the model calls of every page, bounded by bytes and by age.

Visitors asking the same question share one result (a classroom decodes the teacher's sentence once), but
a result's attention maps grow with the square of the sentence (measured: docs/performance.md). Entries are
therefore counted by the bytes they hold and dropped after a while, whoever made them.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import cachetools
import cachetools.keys
import numpy as np
import torch

CACHE_MB = int(os.environ.get("TRANSFORMER_EXPLORER_CACHE_MB", "512"))
CACHE_SECONDS = int(os.environ.get("TRANSFORMER_EXPLORER_CACHE_SECONDS", "3600"))

Function = TypeVar("Function", bound=Callable[..., Any])


def nbytes(value: Any) -> int:
    """The bytes a result holds: its tensors and arrays (which dominate), through dataclasses and containers."""
    if isinstance(value, torch.Tensor):
        return value.element_size() * value.nelement()
    if isinstance(value, np.ndarray):
        return value.nbytes
    if dataclasses.is_dataclass(value):
        return sum(nbytes(getattr(value, field.name)) for field in dataclasses.fields(value))
    if isinstance(value, list | tuple):
        return sys.getsizeof(value) + sum(nbytes(item) for item in value)
    if isinstance(value, dict):
        return sys.getsizeof(value) + sum(nbytes(k) + nbytes(v) for k, v in value.items())
    return sys.getsizeof(value)


class ResultCache:
    """Least-recently-made results dropped past max_bytes, every result dropped `seconds` after it was made.

    Thread-safe (each visitor's session runs in its own thread); a result being computed is waited for, not
    computed twice.
    """

    def __init__(self, max_bytes: int, seconds: float, timer: Callable[[], float] = time.monotonic) -> None:
        self.entries: cachetools.TTLCache = cachetools.TTLCache(max_bytes, seconds, timer=timer, getsizeof=nbytes)
        self.condition = threading.Condition()
        # What a result's computation runs inside, by its checkpoint's key (the app runs uploads' in a heavy slot)
        self.guard: Callable[[str], contextlib.AbstractContextManager] = lambda checkpoint_key: contextlib.nullcontext()

    def __call__(self, function: Function) -> Function:
        """Caches function(_checkpoint, subject, *args), the subject a checkpoint's key or a result's identity (its
        checkpoint_key names the checkpoint): keyed by its name and every argument but the model and keyword
        arguments named with a leading underscore (values the other arguments determine)."""

        def key(_checkpoint: Any, *args: Any, **kwargs: Any) -> tuple:
            named = {name: value for name, value in kwargs.items() if not name.startswith("_")}
            return cachetools.keys.hashkey(function.__qualname__, *args, **named)

        @functools.wraps(function)
        def computed(_checkpoint: Any, subject: Any, *args: Any, **kwargs: Any) -> Any:
            with self.guard(subject if isinstance(subject, str) else subject.checkpoint_key):
                return function(_checkpoint, subject, *args, **kwargs)

        return cachetools.cached(self.entries, key=key, condition=self.condition)(computed)

    @property
    def held_bytes(self) -> int:
        with self.condition:
            self.entries.expire()
            return int(self.entries.currsize)


RESULTS = ResultCache(CACHE_MB * 2**20, CACHE_SECONDS)
