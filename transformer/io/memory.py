"""The memory this process can still take: what the machine has free, and no more than the process's own limits
allow (an address-space cap, `ulimit -v`, or its container's cgroup limit), which a server is often run under and
which the machine's free memory does not see."""

from __future__ import annotations

import resource
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")


def memory_available() -> int | None:
    """The bytes this process can allocate without swapping or being stopped, the least of the machine's free
    memory (Linux's MemAvailable), its address-space cap's room and its cgroup's room; None where none is known."""
    known = [room for room in (_machine_free(), _address_space_room(), _cgroup_room()) if room is not None]
    return min(known) if known else None


def _machine_free() -> int | None:
    return _field("/proc/meminfo", "MemAvailable:")


def _address_space_room() -> int | None:
    """The address space left under RLIMIT_AS: an allocation past it fails however much memory is free."""
    limit, _ = resource.getrlimit(resource.RLIMIT_AS)
    used = _field("/proc/self/status", "VmSize:")
    if limit == resource.RLIM_INFINITY or used is None:
        return None
    return max(0, limit - used)


def _cgroup_room() -> int | None:
    """The room left under this process's memory cgroup's limit (cgroup v2's memory.max, else v1's
    memory.limit_in_bytes as a container sees it), less what the cgroup uses beyond reclaimable page cache."""
    group = _cgroup_v2_path()
    for folder, limit_name, usage_name, cache_name in (
        (group, "memory.max", "memory.current", "inactive_file"),
        (CGROUP_ROOT / "memory", "memory.limit_in_bytes", "memory.usage_in_bytes", "total_inactive_file"),
    ):
        limit, usage = _number(folder / limit_name), _number(folder / usage_name)
        if limit is not None and usage is not None and limit < 2**60:  # v1 writes "no limit" as about 2^63
            cache = _stat(folder / "memory.stat", cache_name) or 0
            return max(0, limit - max(0, usage - cache))
    return None


def _cgroup_v2_path() -> Path:
    try:
        for line in Path("/proc/self/cgroup").read_text().splitlines():
            if line.startswith("0::"):
                return CGROUP_ROOT / line[3:].lstrip("/")
    except OSError:
        pass
    return CGROUP_ROOT


def _number(path: Path) -> int | None:
    """A cgroup file's one number; None where it is absent, unreadable or "max" (no limit)."""
    try:
        return int(path.read_text().strip())
    except (OSError, ValueError):
        return None


def _stat(path: Path, name: str) -> int | None:
    try:
        for line in path.read_text().splitlines():
            key, _, value = line.partition(" ")
            if key == name:
                return int(value)
    except (OSError, ValueError):
        pass
    return None


def _field(path: str, name: str) -> int | None:
    """A /proc file's field given in kB, in bytes."""
    try:
        with open(path) as lines:
            for line in lines:
                if line.startswith(name):
                    return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        pass
    return None
