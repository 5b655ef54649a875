"""A toolkit's PyTorch file (`.pt`, a pickle) read without running anything in it: torch's weights-only
unpickler builds tensors and plain containers only, plus the classes on an allow-list (fairseq's options are an
`argparse.Namespace`); a file that names any other global is refused before any of it is built.

What the unpickler builds is then held to what the file can honestly hold before anything reads it: the unpickler
keeps shared references, so 290 KB can describe a list of 4^16 leaves that printing or joining would expand, and a
tensor's strides may repeat one stored number a billion times (`expanded_size`, `check_storages`)."""

from __future__ import annotations

import argparse
import mmap
import pickle
import pickletools
import re
from pathlib import Path
from typing import Any

import torch

from transformer.io.checkpoint import CheckpointError, CheckpointTooLarge, file_limit
from transformer.io.memory import memory_available
from transformer.text.files import FileRefused, open_regular

ALLOWED_GLOBALS = [argparse.Namespace]
MAX_VALUES = 1 << 24  # the items and characters of a file's plain values, each shared one counted as often as reached
MAX_DEPTH = 100  # nesting of plain values: a toolkit's options are a few levels deep
GLOBAL_OPCODES = {"GLOBAL", "INST"}  # the opcodes that name a global in their argument ("module name")
BUILTIN_MODULES = {"builtins", "__builtin__"}


def read_pickled(path: Path) -> dict[str, Any]:
    """The dict a toolkit saved with torch.save, tensors memory-mapped from the file; CheckpointError for a file
    that names a global off the allow-list, is not a PyTorch file of torch 1.6 or later, holds values that expand
    past MAX_VALUES or tensors larger than their storage, or would not fit in the memory free now."""
    try:
        with open_regular(path) as file:  # a pipe or a device is refused before torch opens it
            start = file.read(4)
            size = file.seek(0, 2)
            if start.startswith(b"\x80"):  # torch.save's format before 1.6: a plain pickle
                raise CheckpointError(_legacy_refusal(path.name, file))
    except (OSError, FileRefused) as error:
        raise CheckpointError(f"{path.name} cannot be read: {str(error)[:200]}") from None
    if start != b"PK\x03\x04":  # torch.save's format since 1.6
        raise CheckpointError(f"{path.name} is not a PyTorch file (neither a zip nor a pickle)")
    limit = file_limit(memory_available())
    if size > limit:
        raise CheckpointTooLarge(f"{path.name} is {size / 1e9:.2f} GB; {limit / 1e9:.2f} GB opens now: not opened")
    try:
        with torch.serialization.safe_globals(ALLOWED_GLOBALS):
            loaded = torch.load(path, map_location="cpu", weights_only=True, mmap=True)
    except pickle.UnpicklingError as error:
        raise CheckpointError(f"{path.name} holds more than weights and options, {refused(str(error))}") from None
    except (RuntimeError, OSError, ValueError, EOFError, AttributeError, TypeError) as error:
        raise CheckpointError(f"{path.name} is not a PyTorch file that can be read: {str(error)[:200]}") from None
    if not isinstance(loaded, dict):
        raise CheckpointError(f"{path.name} holds a {type(loaded).__name__}, not a toolkit's checkpoint (a dict)")
    check_storages(expanded_size(loaded, path.name), path.name)
    return loaded


def refused(told: str) -> str:
    """'refused unread: ' and the global torch's unpickler names (its message, without its advice to unpickle
    anyway; a global of a blocked module, such as posix.system, it names in other words)."""
    said = told.partition("WeightsUnpickler error:")[2].partition("Check the documentation")[0]
    reason = " ".join(said.split()).split(". ")[0]
    named = re.search(r"GLOBAL ([\w.]+)", told)
    if not reason and named:
        reason = f"Unsupported global: GLOBAL {named.group(1)}"
    return f"refused unread: {reason[:200] or 'it is not a weights-only pickle'}"


def _legacy_refusal(name: str, file: Any) -> str:
    """Why a file of torch.save's format before 1.6 is refused unread: the globals it names off the allow-list, found
    by reading its opcodes (nothing built); else the format itself, whose storages torch allocates at the sizes they
    declare before reading them (a 413-byte file declaring 10 GB reserved 10 GB)."""
    with mmap.mmap(file.fileno(), 0, access=mmap.ACCESS_READ) as data:  # reads of any declared length stay in the file
        named = _globals_named(data)
    allowed = {f"{kind.__module__}.{kind.__qualname__}" for kind in ALLOWED_GLOBALS}
    off_the_list = [g for g in named if g not in allowed and not g.startswith(("torch.", "collections.OrderedDict"))]
    if off_the_list:
        shown_global = off_the_list[0].removeprefix("builtins.").removeprefix("__builtin__.")
        return f"{name} holds more than weights and options, refused unread: Unsupported global: GLOBAL {shown_global}"
    return (
        f"{name} is a PyTorch file of the format before torch 1.6 (a plain pickle), which is not read: save it again "
        "with torch 1.6 or later (torch.save(torch.load(F, weights_only=True), F)) where you trust the file"
    )


def _globals_named(data: mmap.mmap) -> list[str]:
    """The globals the file's first four pickles (magic number, protocol, system, the object) name, as "module.name";
    the stack-built names of protocol 4 read from the strings pushed before them."""
    named: list[str] = []
    try:
        for _ in range(4):
            strings: list[str] = []
            for opcode, argument, _ in pickletools.genops(data):
                if opcode.name in GLOBAL_OPCODES:
                    named.append(".".join(str(argument).split(" ", 1)))
                elif opcode.name == "STACK_GLOBAL" and len(strings) >= 2:
                    named.append(".".join(strings[-2:]))
                elif isinstance(argument, str):
                    strings.append(argument)
    except (ValueError, EOFError, pickle.UnpicklingError):
        pass  # the rest is not a pickle: what was named so far is what torch would have met
    return named


def _children(value: Any) -> list[Any] | None:
    """The values a plain container holds (a dict's keys and values, an options object's attributes); None for a
    leaf."""
    if isinstance(value, argparse.Namespace):
        value = vars(value)
    if isinstance(value, dict):
        return [*value.keys(), *value.values()]
    if isinstance(value, (list, tuple, set, frozenset)) and not isinstance(value, torch.Size):
        return list(value)
    return None


def _leaf_size(value: Any) -> int:
    return 1 + len(value) if isinstance(value, (str, bytes)) else 1


def expanded_size(loaded: Any, name: str) -> list[torch.Tensor]:
    """The tensors among `loaded`'s values, once its plain values are known to hold at most MAX_VALUES items and
    characters when each shared container is counted as often as it is reached (what printing, comparing or joining
    them walks), to be nested at most MAX_DEPTH deep and to hold no container inside itself. Each container is
    visited once, without recursion: a 100,000-deep list or 4^16 shared leaves cost what the file holds."""
    sizes: dict[int, int] = {}
    opened: set[int] = set()
    tensors: dict[int, torch.Tensor] = {}
    stack: list[tuple[Any, int, list[Any] | None]] = [(loaded, 0, None)]
    while stack:
        value, depth, children = stack.pop()
        key = id(value)
        if children is not None:  # its children are sized: its own size is theirs and itself
            total = 1 + sum(sizes.get(id(child)) or _leaf_size(child) for child in children)
            if total > MAX_VALUES:
                raise CheckpointError(
                    f"{name} holds values that expand to over {MAX_VALUES:,} items and characters (shared "
                    "references repeated): not a toolkit's checkpoint, refused"
                )
            sizes[key] = total
            continue
        if isinstance(value, torch.Tensor):
            tensors[key] = value
            continue
        inner = _children(value)
        if inner is None or key in sizes:
            continue
        if key in opened:
            raise CheckpointError(f"{name} holds a container inside itself: not a toolkit's checkpoint, refused")
        if depth >= MAX_DEPTH:
            raise CheckpointError(f"{name} holds values nested over {MAX_DEPTH} deep: not a toolkit's checkpoint")
        opened.add(key)
        stack.append((value, depth, inner))
        stack.extend((child, depth + 1, None) for child in inner)
    return list(tensors.values())


def check_storages(tensors: list[torch.Tensor], name: str) -> None:
    """Refuses a tensor whose storage holds fewer bytes than its elements need: strides that repeat a stored number
    (a 60 KB file described a model of 0.47 billion parameters) or overlap."""
    for tensor in tensors:
        needed = tensor.numel() * tensor.element_size()
        stored = tensor.untyped_storage().nbytes()
        if needed > stored:
            raise CheckpointError(
                f"{name} holds a tensor of {tensor.numel():,} elements on {stored:,} stored bytes (its strides repeat "
                "what is stored): refused"
            )


def options_of(value: Any) -> dict[str, Any]:
    """An options object as a dict: an argparse.Namespace's attributes, a dict as it is, anything else empty."""
    if isinstance(value, argparse.Namespace):
        return vars(value)
    return value if isinstance(value, dict) else {}
