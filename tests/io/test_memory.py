"""The memory a checkpoint may take is what this process can still allocate, its own limits included."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from tests.fixtures.crafted import write_with_sparse_tensor

REPO_ROOT = Path(__file__).resolve().parents[2]

UNDER_A_CAP = """
import resource, sys
from pathlib import Path
from transformer.io import checkpoint
from transformer.io.memory import memory_available
status = Path("/proc/self/status").read_text()
mapped = int(status.split("VmSize:")[1].split()[0]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (mapped + 3 * 2**30, resource.RLIM_INFINITY))
print(memory_available())
try:
    checkpoint.load_checkpoint(sys.argv[1])
except checkpoint.CheckpointError as error:
    print(error)
"""


def test_under_an_address_space_cap_a_checkpoint_that_does_not_fit_is_refused_before_it_is_read(
    checkpoint_path, tmp_path
):
    """The free-memory check read the machine's free memory only: under `ulimit -v` (or a container's limit) a
    checkpoint whose float32 weights fit the machine but not the process passed, and opening it was killed."""
    path = tmp_path / "half.safetensors"
    elements = 400_000_000  # 0.8 GB in the file, 1.6 GB laid out: with 1 GiB kept for the app, over 3 GiB of room
    write_with_sparse_tensor(checkpoint_path.read_bytes(), path, elements)
    done = subprocess.run(
        [sys.executable, "-c", UNDER_A_CAP, str(path)], capture_output=True, text=True, cwd=REPO_ROOT, timeout=120
    )
    room, refusal = done.stdout.splitlines()[:2] if done.returncode == 0 else ("0", done.stderr[-500:])
    assert 2.5 * 2**30 < int(room) <= 3 * 2**30, done.stdout
    assert "its weights in float32" in refusal and "GB is free now" in refusal, refusal
    assert len(refusal) < 300


def test_a_containers_memory_limit_bounds_what_is_available(tmp_path, monkeypatch):
    """A container's cgroup limit stops the process long before the machine's free memory runs out; its
    reclaimable page cache does not count as used."""
    from transformer.io import memory

    (tmp_path / "memory.max").write_text(f"{4 * 10**9}\n")
    (tmp_path / "memory.current").write_text(f"{3 * 10**9}\n")
    (tmp_path / "memory.stat").write_text(f"anon 2000000000\ninactive_file {10**9}\n")
    monkeypatch.setattr(memory, "CGROUP_ROOT", tmp_path)
    monkeypatch.setattr(memory, "_cgroup_v2_path", lambda: tmp_path)
    # The machine's free memory held still: read twice on a busy machine it differed by a few hundred kB
    monkeypatch.setattr(memory, "_machine_free", lambda: 16 * 10**9)
    monkeypatch.setattr(memory, "_address_space_room", lambda: None)
    assert memory.memory_available() == 2 * 10**9
    (tmp_path / "memory.max").write_text("max\n")  # no limit: the machine's free memory
    assert memory.memory_available() == 16 * 10**9
