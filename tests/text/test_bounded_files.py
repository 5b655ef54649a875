"""Every file the app and the command line read goes through one bounded reader: regular files only (a link to
/dev/zero, a named pipe or a directory is refused unread), at most what is used, and no line longer than a
paragraph. A hostile checkpoints/ folder must not break the landing page for everyone."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers import REPO, measured, run_cli

from transformer.analysis.tuned_lens import TunedLensError
from transformer.io.checkpoint import CheckpointError, describe, load_checkpoint
from transformer.io.header import read_file_header
from transformer.io.timeline_file import TimelineError, load_timeline
from transformer.io.tuned_lens_file import load_tuned_lens
from transformer.text.files import FileRefused, read_lines, read_regular


def hostile(tmp_path: Path, kind: str, name: str) -> Path:
    """A file named `name` that is a link to /dev/zero, a named pipe, or a 3 GB sparse file (costs no disk)."""
    path = tmp_path / name
    if kind == "dev-zero":
        path.symlink_to("/dev/zero")
    elif kind == "pipe":
        os.mkfifo(path)
    else:
        with open(path, "wb") as file:
            file.truncate(3 * 2**30)
    return path


def finishes(call, seconds: float = 30):
    """call() in a thread: what it returned or raised, and whether it finished (a pipe read would hang it)."""
    outcome = {}

    def run():
        try:
            outcome["value"] = call()
        except BaseException as error:
            outcome["error"] = error

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), "the reader hung"
    return outcome


KINDS = ["dev-zero", "pipe", "sparse"]


@pytest.mark.parametrize("kind", KINDS)
def test_a_model_card_that_is_no_regular_file_or_is_huge_costs_nothing(kind, tmp_path, monkeypatch):
    import ui.widgets.welcome

    (tmp_path / "cards").mkdir()
    hostile(tmp_path / "cards", kind, "m.md")
    monkeypatch.setattr(ui.widgets.welcome, "CHECKPOINT_DIR", tmp_path)
    with measured() as cost:
        outcome = finishes(lambda: ui.widgets.welcome.model_card("m"))
    assert "error" not in outcome, outcome  # a MemoryError at 6.5 GB from /dev/zero before
    assert cost.peak_growth_mb < 50, cost  # the sparse file was read whole: 3 GB
    if kind == "sparse":  # its first 4 KB (zeros) are shown, the rest never read
        assert len(outcome["value"]) <= 4096
    else:
        assert outcome["value"] is None


@pytest.mark.parametrize("kind", KINDS)
def test_checkpoints_timelines_and_lenses_that_are_no_regular_files_are_refused_unread(kind, tmp_path, model):
    path = hostile(tmp_path, kind, "x.safetensors")
    with measured() as cost:
        readers = {
            "checkpoint": lambda: load_checkpoint(path),
            "header": lambda: read_file_header(path),
            "timeline": lambda: load_timeline(path),
            "lens": lambda: load_tuned_lens(path, model, "0" * 64),
        }
        for what, read in readers.items():
            outcome = finishes(read)
            error = outcome.get("error")
            assert isinstance(error, CheckpointError | TimelineError | TunedLensError), (what, outcome)
            wanted = "over the limit" if kind == "sparse" and what != "header" else "not a regular file"
            assert wanted in str(error) or kind == "sparse", (what, error)
        assert finishes(lambda: describe(path))["value"].endswith("unreadable")
    assert cost.peak_growth_mb < 100, cost


def test_the_bounded_reader_refuses_past_its_limit_without_reading(tmp_path):
    path = hostile(tmp_path, "sparse", "big.bin")
    with measured() as cost, pytest.raises(FileRefused, match=r"is 3,221,225,472 bytes, over the limit of 1,024"):
        read_regular(path, 1024)
    assert cost.peak_growth_mb < 20, cost
    (tmp_path / "small.bin").write_bytes(b"x" * 1024)
    assert read_regular(tmp_path / "small.bin", 1024) == b"x" * 1024


@pytest.mark.parametrize("command", ["translate", "evaluate", "align", "timeline"])
def test_command_line_inputs_that_are_no_regular_files_are_one_line(command, tmp_path, checkpoint_path):
    zero = hostile(tmp_path, "dev-zero", "zero.txt")
    (tmp_path / "ok.txt").write_text("a dog\n")
    arguments = {
        "translate": ["--checkpoint", checkpoint_path, "--input", zero],
        "evaluate": ["--checkpoint", checkpoint_path, "--src", zero, "--ref", tmp_path / "ok.txt"],
        "align": [
            "--checkpoint",
            checkpoint_path,
            "--src",
            tmp_path / "ok.txt",
            "--tgt",
            tmp_path / "ok.txt",
            "--gold",
            zero,
        ],
        "timeline": [checkpoint_path, "--src", zero, "--ref", tmp_path / "ok.txt"],
    }[command]
    with measured() as cost:
        done = finishes(lambda: run_cli(command, *arguments))["value"]
    assert done.returncode == 2 and "zero.txt is not a regular file" in done.stderr, done
    assert done.stderr.count("\n") == 1 and cost.peak_growth_mb < 200, (done.stderr, cost)


def test_a_line_longer_than_a_paragraph_is_refused_naming_it_without_being_held(tmp_path):
    path = tmp_path / "long.txt"
    path.write_bytes(b"a short line\n" + b"x" * 50_000_000 + b"\nanother\n")
    with measured() as cost, pytest.raises(ValueError, match="line 2 is longer than 20,000 bytes"):
        read_lines(path)
    assert cost.peak_growth_mb < 30, cost  # the 50 MB line was read whole before


def test_translate_leaves_a_line_longer_than_a_paragraph_empty_and_names_it(tmp_path, checkpoint_path):
    path = tmp_path / "long.txt"
    path.write_bytes(b"a dog runs\n" + b"x" * 5_000_000 + b"\nthe cat sits\n")
    with measured() as cost:
        done = run_cli("translate", "--checkpoint", checkpoint_path, "--input", path)
    assert done.returncode == 1 and "line 2 is longer than 20,000 bytes" in done.stderr, done.stderr
    lines = done.stdout.split("\n")
    assert len(lines) == 4 and lines[0] and lines[1] == "" and lines[2], lines  # one output line per input line
    assert cost.peak_growth_mb < 100, cost


def test_a_timeline_of_two_runs_is_refused_before_any_probe_is_read(tmp_path, checkpoint_path):
    from helpers import tiny_config

    from transformer.io.checkpoint import save_checkpoint
    from transformer.model.encoder_decoder import Transformer
    from transformer.training.snapshots import timeline_of_run

    first = load_checkpoint(checkpoint_path)
    other = tmp_path / "other.safetensors"
    save_checkpoint(other, Transformer(tiny_config(first.tokenizer, d_ff=48)).eval(), first.tokenizer, {})
    heard = []
    with pytest.raises(ValueError, match="other.safetensors is not of the same run"):
        timeline_of_run([checkpoint_path, other], [("a dog runs", "un chien court")], progress=heard.append)
    assert heard == []  # refused up front: the probes were read with the first checkpoint before


CAPPED = """
import resource, sys
from pathlib import Path
from transformer.text.files import read_regular
status = Path("/proc/self/status").read_text()
mapped = int(status.split("VmSize:")[1].split()[0]) * 1024
resource.setrlimit(resource.RLIMIT_AS, (mapped + 256 * 2**20, resource.RLIM_INFINITY))
print(len(read_regular(sys.argv[1], 64 * 2**30)))
"""


def test_a_file_is_read_under_an_address_space_cap_whatever_its_limit(tmp_path):
    """The reader asked for a buffer of its limit (half the free memory, 9.9 GB here): under any address-space cap
    every checkpoint failed to open, "the server is out of memory" for a 17 MB file."""
    path = tmp_path / "small.bin"
    path.write_bytes(b"x" * 2**20)
    done = subprocess.run([sys.executable, "-c", CAPPED, str(path)], capture_output=True, text=True, cwd=REPO)
    assert done.returncode == 0 and done.stdout.strip() == str(2**20), done.stderr[-500:]


def test_translate_opens_its_checkpoint_under_an_8_gb_address_space_cap(checkpoint_path):
    """`ulimit -v 8000000` ended `translate` in a MemoryError traceback, on any machine with over 17 GB free."""

    def capped() -> None:
        resource.setrlimit(resource.RLIMIT_AS, (8 * 10**9, resource.RLIM_INFINITY))

    done = subprocess.run(
        [sys.executable, "-m", "transformer", "translate", "--checkpoint", str(checkpoint_path)],
        input="a dog\n",
        capture_output=True,
        text=True,
        cwd=REPO,
        preexec_fn=capped,
    )
    assert done.returncode == 0 and done.stdout.strip(), done.stderr[-500:]
