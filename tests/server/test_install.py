"""scripts/install.sh, which every script starts with: it installs only when .venv lacks these very requirements."""

from __future__ import annotations

import os
import shutil
import subprocess

from helpers import REPO


def _fake_repo(tmp_path):
    """A copy of the install script beside requirement files, with a python3 and a pip that only log their calls."""
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    shutil.copy(REPO / "scripts" / "install.sh", repo / "scripts" / "install.sh")
    for name in ("requirements.txt", "requirements-dev.txt", "pyproject.toml"):
        (repo / name).write_text(f"{name}\n")
    bin_dir, venv = tmp_path / "bin", repo / ".venv" / "bin"
    bin_dir.mkdir()
    venv.mkdir(parents=True)
    log = tmp_path / "calls.log"
    for path, name in ((bin_dir / "python3", "python3"), (venv / "pip", "pip"), (venv / "python", "python")):
        path.write_text(f'#!/bin/sh\necho "{name} $*" >>{log}\n')
        path.chmod(0o755)
    return repo, bin_dir, log


def test_a_second_start_installs_nothing_and_a_changed_requirement_installs_again(tmp_path):
    repo, bin_dir, log = _fake_repo(tmp_path)
    environment = os.environ | {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}

    def install(*arguments: str) -> list[str]:
        log.write_text("")
        subprocess.run(["bash", "scripts/install.sh", *arguments], cwd=repo, env=environment, check=True)
        return log.read_text().splitlines()

    assert install() == ["python3 -m venv .venv", "pip install -q -r requirements.txt", "pip install -q -e ."]
    assert install() == []  # the same files: nothing to do (every start reinstalled, 12 s)
    assert install("requirements-dev.txt")[1] == "pip install -q -r requirements-dev.txt"  # another set
    (repo / "requirements.txt").write_text("torch==2.13.0\n")
    assert install()[1:] == ["pip install -q -r requirements.txt", "pip install -q -e ."]
    assert install() == []


def test_a_first_install_says_what_it_does_and_how_long_it_takes_before_it_starts(tmp_path):
    """Tried as a new user would (issue 83, item 11): a first start printed nothing for 164 s while it installed."""
    repo, bin_dir, log = _fake_repo(tmp_path)
    environment = os.environ | {"PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    done = subprocess.run(["bash", "scripts/install.sh"], cwd=repo, env=environment, capture_output=True, text=True)
    said = done.stderr.splitlines()
    assert (
        said[0]
        == "Installing the project and requirements.txt into .venv: about 3 minutes the first time; later starts skip it."
    )
    assert said[-1].startswith("Installed in ") and said[-1].endswith(" s.")
    again = subprocess.run(["bash", "scripts/install.sh"], cwd=repo, env=environment, capture_output=True, text=True)
    assert again.stderr == ""  # nothing to install, nothing said
