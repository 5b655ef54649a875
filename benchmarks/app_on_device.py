"""python -m benchmarks.app_on_device [--threads N]: the app's own work for a visit, on each device
this machine has (the GPU when there is one, and the CPU held to N cores), run through Streamlit's AppTest so that a
machine with no browser (a lent GPU machine) measures it too. Each visit is a fresh process: a link to the step view
(the model opened, then a decode of 20 words), then a Translate of another 20 words to the step view's data; the
device the sidebar names is read back. With the shipped default; `python -m benchmarks.hf_families --app-on-device`
gives the same rows with NLLB-200's shapes.

What the browser adds (drawing, and a step click, which never asks the server) is the same whichever device the server
decodes on: benchmarks.app_at_size measures it in Chromium.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import torch

from transformer.io.checkpoint import CHECKPOINT_DIR

from .model_speed import Row, machine, table

REPO = Path(__file__).resolve().parent.parent
TWENTY_WORDS = [
    "A young boy in a blue jacket is throwing a red ball to his small brown dog in the park today.",
    "Two women are sitting on a wooden bench near the river and talking about the old city and its people.",
    "A man with a black hat plays the guitar on the street while a crowd of tourists watches him closely.",
    "Three children are running across the green field towards their mother who is holding a large white kite.",
    "An old woman in a long red coat is buying fresh bread and vegetables at the busy morning market.",
]


@contextmanager
def linked_checkpoint(path: Path, name: str) -> Iterator[str]:
    """A model directory or checkpoint file listed in the app's checkpoints as `benchmark-<name>` while the block
    runs; yields the name the app lists it by."""
    link = CHECKPOINT_DIR / f"benchmark-{name}{'' if path.is_dir() else path.suffix}"
    link.unlink(missing_ok=True)
    link.symlink_to(path.resolve(), target_is_directory=path.is_dir())
    try:
        yield link.stem if path.is_file() else link.name
    finally:
        link.unlink(missing_ok=True)


def visit(checkpoint: str | None, first: str, second: str) -> dict:
    """In this process: the app opened by a link with `first`, then `second` translated; times in ms, the sidebar's
    device line, and whether each run ended with a step view and no error."""
    from streamlit.testing.v1 import AppTest

    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=1800)
    at.query_params.update({"text": first, "max_new_tokens": "40"} | ({"ckpt": checkpoint} if checkpoint else {}))
    started = time.perf_counter()
    at.run()
    opened = time.perf_counter()
    drawn = [not at.exception and step_view_drawn(at)]
    at.text_area(key="widget_text").input(second)
    at.button(key="translate").click().run()
    translated = time.perf_counter()
    drawn.append(not at.exception and step_view_drawn(at))
    device = next((c.value for c in at.caption if c.value.startswith("Running on")), "no device line")
    errors = [e.value for e in at.exception]
    return {
        "first_ms": (opened - started) * 1000,
        "translate_ms": (translated - opened) * 1000,
        "device": device,
        "drawn": all(drawn),
        "errors": errors,
    }


def step_view_drawn(at) -> bool:
    """Whether the page drew the explorer's step view (not the figures' SVG buttons, a component on every page)."""
    return any(c.proto.component_name == "step_player" for c in at.get("bidi_component"))


def visit_in_fresh_process(checkpoint: str | None, first: str, second: str, device: str, threads: int) -> dict:
    """`visit` in a process of its own (a cold start: the model opened once), on `device`; on the CPU, held to
    `threads` cores, as a small server would have them."""
    environment = dict(os.environ, PYTHONPATH=f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    if device == "cpu":
        environment |= {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": str(threads)}
    visit = json.dumps([checkpoint, first, second, threads if device == "cpu" else None])
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.app_on_device", "--visit", visit],
        capture_output=True,
        text=True,
        env=environment,
        cwd=REPO,
    )
    if out.returncode != 0:
        raise RuntimeError(f"the visit on {device} failed:\n{out.stderr[-3000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def hold_to_cores(threads: int) -> None:
    """This process on its first `threads` cores, torch's threads as many."""
    os.sched_setaffinity(0, sorted(os.sched_getaffinity(0))[:threads])
    torch.set_num_threads(threads)


def device_rows(label: str, checkpoint: str | None, first: str, second: str, threads: int) -> list[Row]:
    """The visit on the CPU (`threads` cores) and, where there is one, on the GPU: a row for the link and one for the
    Translate, the GPU's time against the CPU's."""
    devices = ["cpu", "cuda"] if torch.cuda.is_available() else ["cpu"]
    found = {device: visit_in_fresh_process(checkpoint, first, second, device, threads) for device in devices}
    for device, figures in found.items():
        if not figures["drawn"]:
            raise RuntimeError(f"{label} on {device}: no step view drawn: {figures['errors']}")
    ours = found[devices[-1]]
    notes = "; ".join(f"{device}: the sidebar says “{figures['device']}”" for device, figures in found.items())
    baseline = f"the same on the CPU, {threads} cores" if len(devices) == 2 else ""
    return [
        Row(
            f"{label}: a link to the step view's data (the model opened, cold), on {devices[-1]}",
            baseline,
            found["cpu"]["first_ms"] if len(devices) == 2 else None,
            ours["first_ms"],
            "report",
            notes,
        ),
        Row(
            f"{label}: a Translate of 20 words to the step view's data, on {devices[-1]}",
            baseline,
            found["cpu"]["translate_ms"] if len(devices) == 2 else None,
            ours["translate_ms"],
            "report",
            "server side",
        ),
    ]


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.app_on_device", description=__doc__)
    parser.add_argument("--threads", type=int, default=2, help="CPU cores the CPU's visits are held to")
    parser.add_argument("--visit", help=argparse.SUPPRESS)  # a child process's: [checkpoint, first, second, threads]
    args = parser.parse_args()
    if args.visit:
        checkpoint, first, second, threads = json.loads(args.visit)
        if threads:
            hold_to_cores(threads)
        print(json.dumps(visit(checkpoint, first, second)), flush=True)
        return
    gpu = torch.cuda.get_device_name() if torch.cuda.is_available() else "no GPU"
    print(f"machine: {machine()}; {gpu}\n", flush=True)
    default = " ".join(TWENTY_WORDS[0].split()[:19])
    print(table(device_rows("the shipped default", None, default, TWENTY_WORDS[1], args.threads)), flush=True)


if __name__ == "__main__":
    main()
