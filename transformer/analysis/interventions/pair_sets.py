"""Pair sets: many contrastive pairs of one or several phenomena, one JSON object a line (docs/pair-sets.md), read as
untrusted input through the project's bounded reader; a bad line is refused naming its number and why, and the
others are kept.

    {"id": "it-0", "clean": "...too tired.", "corrupt": "...too wide.", "target": "il", "foil": "elle",
     "phenomenon": "antecedent", "step": 13, "roles": {"differing": [10], "antecedent": [1]}}

`target` and `foil` are tokens as the clean translation writes them (`patch --target/--foil`); `step` (1-based, as
`patch --step`) where the target is not its first occurrence; `roles` names words of the clean sentence (0-based,
split at spaces) by what they are in the template, for effects aggregated by role.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

from transformer.model.config import shown
from transformer.text.files import open_regular, text_lines

BUILT_IN_SETS = Path(__file__).parent / "sets"  # written by scripts/make_pair_sets.py
MAX_SET_BYTES = 16 << 20
MAX_PAIRS = 100_000
MAX_LINE_BYTES = 8192
MAX_FIELD_CHARACTERS = 2000  # a sentence, as the app reads one
MAX_TOKEN_CHARACTERS = 100
ID = re.compile(r"[A-Za-z0-9_.-]{1,80}")  # a file's name in the results' folder: no path, no odd characters
FIELDS = {"id", "clean", "corrupt", "target", "foil", "phenomenon", "step", "roles"}


class PairSetError(ValueError):
    """A pair set that cannot be read at all (not a file, not UTF-8 text, too large)."""


@dataclass(frozen=True)
class Pair:
    """One contrastive pair: the clean and corrupted sources, the token read and the one it is read against."""

    id: str
    clean: str
    corrupt: str
    target: str
    foil: str | None = None  # None: the target's log-probability is read
    phenomenon: str = ""
    step: int | None = None  # 1-based output step, where the target is not its first occurrence
    roles: dict[str, list[int]] = field(default_factory=dict)  # role: word indexes of the clean sentence


@dataclass(frozen=True)
class PairSet:
    """The pairs a file holds, and each line refused with why."""

    pairs: list[Pair]
    refused: list[tuple[int, str]]  # (line number, why)


def read_pair_set(path: str | Path) -> PairSet:
    """The pairs of a JSON-lines file; PairSetError where the file cannot be read at all."""
    try:
        with open_regular(path) as file:
            return pair_set_from(file, Path(path).name)
    except PairSetError:
        raise
    except (OSError, ValueError) as error:  # not a regular file, or one that cannot be opened
        raise PairSetError(f"{Path(path).name}: {str(error)[:200]}") from None


def pair_set_from(data: bytes | BinaryIO, name: str) -> PairSet:
    """read_pair_set of a file's bytes (an upload), `name` the file's name as errors say it."""
    try:
        lines = text_lines(data, MAX_SET_BYTES, MAX_PAIRS + 1, MAX_LINE_BYTES)
    except ValueError as error:
        raise PairSetError(f"{name}: {str(error)[:200]}") from None
    return pair_set_of(lines)


def pair_set_of(lines: list[str]) -> PairSet:
    """read_pair_set of lines already read (blank lines skipped)."""
    if len(lines) > MAX_PAIRS:
        raise PairSetError(f"a set holds at most {MAX_PAIRS:,} pairs")
    pairs, refused, seen = [], [], set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            pair = pair_of(line)
            if pair.id in seen:
                raise ValueError(f"the id {pair.id!r} is an earlier line's")
        except ValueError as error:
            refused.append((number, str(error)))
            continue
        seen.add(pair.id)
        pairs.append(pair)
    return PairSet(pairs, refused)


def pair_of(line: str) -> Pair:
    """One line's pair; ValueError saying what is wrong with it."""
    try:
        value = json.loads(line)
    except (ValueError, RecursionError) as error:
        raise ValueError(f"not JSON: {str(error)[:80]}") from None
    if not isinstance(value, dict):
        raise ValueError("not a JSON object")
    unknown = sorted(set(value) - FIELDS)
    if unknown:
        raise ValueError(f"unknown field {shown(unknown[0], 40)} (the fields: {', '.join(sorted(FIELDS))})")
    identity = value.get("id")
    if not isinstance(identity, str) or not ID.fullmatch(identity):
        raise ValueError(f"id {shown(identity, 40)} is not 1 to 80 letters, digits, '_', '.' or '-'")
    clean, corrupt = (_text(value, name, MAX_FIELD_CHARACTERS) for name in ("clean", "corrupt"))
    target = _text(value, "target", MAX_TOKEN_CHARACTERS)
    foil = _text(value, "foil", MAX_TOKEN_CHARACTERS) if value.get("foil") is not None else None
    phenomenon = _text(value, "phenomenon", 80) if value.get("phenomenon") is not None else ""
    step = value.get("step")
    if step is not None and (type(step) is not int or not 1 <= step <= 4096):
        raise ValueError(f"step {shown(step, 20)} is not an output step from 1")
    return Pair(identity, clean, corrupt, target, foil, phenomenon, step, _roles(value.get("roles"), clean))


def _text(value: dict[str, Any], name: str, limit: int) -> str:
    text = value.get(name)
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"{name} is {'missing' if text is None else 'not a text'}")
    if len(text) > limit:
        raise ValueError(f"{name} is longer than {limit:,} characters")
    return text.strip()


def _roles(value: Any, clean: str) -> dict[str, list[int]]:
    """Role names to word indexes of the clean sentence, each within it."""
    if value is None:
        return {}
    words = len(clean.split())
    if not isinstance(value, dict) or len(value) > 16:
        raise ValueError("roles is not an object of at most 16 roles")
    for name, indexes in value.items():
        if not (isinstance(indexes, list) and len(indexes) <= words and all(type(i) is int for i in indexes)):
            raise ValueError(f"role {shown(name, 30)} is not a list of word indexes")
        if not all(0 <= i < words for i in indexes):
            raise ValueError(f"role {shown(name, 30)} names a word past the clean sentence's {words}")
    return {str(name)[:40]: list(indexes) for name, indexes in value.items()}


def pair_line(pair: Pair) -> str:
    """The line a pair is written as (the generator's, and what read_pair_set reads back)."""
    value: dict[str, Any] = {"id": pair.id, "clean": pair.clean, "corrupt": pair.corrupt, "target": pair.target}
    value |= {"foil": pair.foil} if pair.foil is not None else {}
    value |= {"phenomenon": pair.phenomenon} if pair.phenomenon else {}
    value |= {"step": pair.step} if pair.step is not None else {}
    value |= {"roles": pair.roles} if pair.roles else {}
    return json.dumps(value, ensure_ascii=False)
