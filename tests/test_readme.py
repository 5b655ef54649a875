"""The README's notebook example runs as written, with the shipped model, from any directory."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from helpers import REPO


def test_the_notebook_example_runs_outside_the_repository_and_prints_what_it_says(tmp_path):
    readme = (REPO / "README.md").read_text()
    code = re.search(r"## From a notebook.*?```python\n(.*?)```", readme, re.S).group(1)
    report = "\nimport json; print(json.dumps({'text': result.text, 'maps': list(view.maps.shape[:2])}))"
    done = subprocess.run([sys.executable, "-c", code.replace(".show()", "") + report], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)  # fmt: skip  # the installed package, not ./
    assert done.returncode == 0, done.stderr
    promised = re.search(r"result\.text\s+# '(.*)'", code).group(1)
    assert json.loads(done.stdout.splitlines()[-1]) == {"text": promised, "maps": [3, 8]}


def test_the_console_command_is_installed():
    command = Path(sys.executable).parent / "transformer-explorer"
    done = subprocess.run([command, "translate"], input="A dog runs.\n", capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout == "Un chien court.\n", done.stderr
