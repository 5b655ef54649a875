"""Which result a view shows: one identity, used by every cache of a result and by the browser players."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

from transformer.decoding.result import DecodeResult


@dataclass(frozen=True)
class ResultIdentity:
    """A result as the caches key it and the players recognise it: the checkpoint, how it was decoded and its
    tokens in and out. Everything computed from a result is fixed by these, so visitors looking at the same
    result share what was computed from it, and a player redrawn with the same result keeps its step."""

    checkpoint_key: str
    strategy: str
    src_ids: tuple[int, ...]
    tgt_ids: tuple[int, ...]

    @classmethod
    def of(cls, checkpoint_key: str, result: DecodeResult) -> ResultIdentity:
        return cls(checkpoint_key, result.strategy, tuple(result.src_ids), tuple(result.tgt_ids))

    @property
    def token(self) -> str:
        """The identity as a browser keeps it: short, and without the tokens (which the player is sent anyway)."""
        return hashlib.sha1(repr(self).encode()).hexdigest()[:16]
