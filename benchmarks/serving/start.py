"""A server's cold start in its parts, each timed in a fresh process the way the launcher's warm-up meets them: the
imports of each room of the code, the checkpoints' listing, the default model's load and decode, the landing page's
first run, then the rest of the app's imports. The browser's part (the server's answer, the sidebar, the step view
drawn, launcher against plain `streamlit run`) is benchmarks/app_speed.py's."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys

from benchmarks.model_speed import Row
from tests.fixtures.browser import REPO

# In the order a cold start meets them; each room's figure is what importing it adds to the rooms before it.
ROOMS = (
    "streamlit",
    "plotly.graph_objects",
    "transformer.model",
    "transformer.text",
    "transformer.decoding",
    "transformer.analysis",
    "transformer.io",
    "ui.state",
    "ui.services",
    "ui.widgets",
    "ui.players",
)

PARTS = """
import importlib, json, sys, time
from pathlib import Path
marks = {}
def timed(name, work):
    started = time.perf_counter()
    work()
    marks[name] = (time.perf_counter() - started) * 1000
def room(name):
    importlib.import_module(name)
    folder = Path(*name.split("."))
    for path in sorted(folder.glob("*.py")) if folder.is_dir() else ():
        importlib.import_module(".".join(path.with_suffix("").parts).removesuffix(".__init__"))
for name in ROOMS:
    timed(f"import {name}", lambda: room(name))
from ui.server import launch
from ui.services import checkpoints
timed("import the rest of the landing page's first run", lambda: launch.import_all(launch.first_run_modules()))
timed("list the checkpoints (labels)", lambda: [checkpoints.describe_checkpoint(p) for p in checkpoints.checkpoint_files().values()])
timed("load the default checkpoint and decode the default sentence", launch.decode_default)
from helpers import start
timed("the landing page's first run (AppTest, the decode cached)", start)
timed("import the rest of the app's code", lambda: launch.import_all(launch.every_module()))
print(json.dumps(marks))
"""


def start_part_rows(runs: int = 3) -> list[Row]:
    """Each part's median over `runs` fresh processes."""
    environment = os.environ | {"PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}"}
    script = f"ROOMS = {ROOMS!r}\n{PARTS}"
    measured = []
    for _ in range(runs):
        run = subprocess.run(
            [sys.executable, "-c", script], cwd=REPO, env=environment, capture_output=True, text=True, check=True
        )
        measured.append(json.loads(run.stdout.strip().splitlines()[-1]))
    note = f"median of {runs} fresh processes, each part after the ones above; the same code launched or plain"
    return [
        Row(f"cold start, part: {part}", "—", None, statistics.median(m[part] for m in measured), "report", note)
        for part in measured[0]
    ]
