"""The app with a given model in Chromium: a link to the step view, a Translate of 20 words, step clicks, memory.

The model (a directory or a checkpoint file) is linked into `checkpoints/` for the run (`app_on_device.linked_checkpoint`:
a `benchmark-` name, which git ignores) and the link removed after, so that the app lists and opens it as a visitor's
would be.
"""

from __future__ import annotations

import statistics
import time
from urllib.parse import urlencode

from tests.fixtures.browser import (
    ARTIFACTS,
    CLICK_UNTIL_DRAWN,
    PLAYER,
    app_server,
    chromium,
    percentile,
    step_view_position,
    wait_for_step_view,
    wait_idle,
)

from .model_speed import Row

DRAWN_WITHIN_MS = 600_000  # a 600M model's first page on 2 busy cores takes tens of seconds; a hang fails the run
# Each click's wait ends in an error past this, where CLICK_UNTIL_DRAWN alone would wait forever.
CLICK_WITHIN = CLICK_UNTIL_DRAWN.replace(
    "await new Promise(resolve => {",
    f"await new Promise((resolve, reject) => {{ setTimeout(() => reject(new Error('not drawn')), {DRAWN_WITHIN_MS});",
)


def app_rows(label: str, checkpoint: str | None, first: str, second: str, clicks: int = 15) -> list[Row]:
    """The app serving `checkpoint` (None: the shipped default): a link with `first` (40 tokens at most) to the step
    view, a Translate of `second` (its source must differ from `first`'s: an identical result is not redrawn), then
    Next clicked `clicks` times; the server's peak memory."""
    query = {"text": first, "max_new_tokens": "40"} | ({"ckpt": checkpoint} if checkpoint else {})
    with app_server(ARTIFACTS / "benchmark-app-at-size.log", timeout=300) as server, chromium() as browser:
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        started = time.perf_counter()
        page.goto(f"{server.url}/?{urlencode(query)}")
        wait_for_step_view(page, timeout=DRAWN_WITHIN_MS)
        opened_ms = (time.perf_counter() - started) * 1000
        wait_idle(page, DRAWN_WITHIN_MS)
        page.get_by_label("Sentence").fill(second)
        translate_ms = page.evaluate(CLICK_WITHIN, ["Translate", second.split()[-1], 1])
        wait_idle(page, DRAWN_WITHIN_MS)
        _, last = step_view_position(page)
        step_ms = [
            page.evaluate(CLICK_WITHIN, ["Next", f"Step {i + 2} of", i + 2]) for i in range(min(clicks, last - 1))
        ]
        cells = page.evaluate(f"{PLAYER}.querySelectorAll('.grid .cell').length")
        memory = server.peak_memory_mb()
    return [
        Row(f"{label}: first page by a link to the step view drawn", "—", None, opened_ms, "report", "one visit"),
        Row(f"{label}: Translate of 20 words to the step view drawn", "—", None, translate_ms, "report", "one"),
        Row(
            f"{label}: step click to the step drawn (in the browser)",
            "—",
            None,
            statistics.median(step_ms),
            "≤ 50 ms",
            f"p95 {percentile(step_ms, 0.95):.1f} ms over {len(step_ms)} clicks; {cells:,} cells of maps on screen; "
            f"the server's peak memory {memory:,.0f} MiB",
        ),
    ]
