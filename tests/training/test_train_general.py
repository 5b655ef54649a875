"""scripts/train_general.sh: the general model's recipe."""

from __future__ import annotations

import subprocess

from helpers import REPO


def test_help_prints_the_whole_header_and_starts_nothing():
    script = REPO / "scripts" / "train_general.sh"
    header = []
    for line in script.read_text().splitlines()[1:]:
        if not line.startswith("#"):
            break
        header.append(line)
    done = subprocess.run(["bash", str(script), "--help"], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == header  # before: the last lines of the --gpu paragraph were cut off
    assert header[-1].endswith("instructions.")
