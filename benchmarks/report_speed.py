"""The offline HTML report opened in Chromium: its first screen drawn, against the same figures drawn all at
once on opening (how the report drew before)."""

from __future__ import annotations

import html
import tempfile
from pathlib import Path

from plotly.offline import get_plotlyjs

from transformer.decoding.greedy import decode
from transformer.decoding.result import DecodeResult
from transformer.io.checkpoint import Checkpoint
from transformer.viz.report import html_report, report_figures

from .app_speed import TWENTY_WORDS
from .browser import REPORT_SCREEN_DRAWN, chromium
from .model_speed import Row

EVERY_PLOT_DRAWN = (
    "() => [...document.querySelectorAll('.js-plotly-plot')].every((plot) => plot.querySelector('.main-svg'))"
)
SENTENCES = {10: "Two dogs are playing in the snow.", 120: " ".join(TWENTY_WORDS[:5])}
TARGETS = {10: "≤ 2000 ms", 120: "≤ 5000 ms"}


def drawn_at_once(result: DecodeResult, source_text: str) -> str:
    """The baseline: the same figures, each drawn by its own script as the page opens."""
    sections = "\n".join(
        f"<h2>{html.escape(title)}</h2>{figure.to_html(full_html=False, include_plotlyjs=False)}"
        for title, figure in report_figures(result)
    )
    return (f'<!DOCTYPE html><html><head><meta charset="utf-8"><script>{get_plotlyjs()}</script></head><body>'
            f"<p>{html.escape(source_text)}</p>{sections}</body></html>")  # fmt: skip


def report_rows(checkpoint: Checkpoint) -> list[Row]:
    rows = []
    with chromium() as browser, tempfile.TemporaryDirectory() as folder:
        for tokens, sentence in SENTENCES.items():
            result = decode(checkpoint.model, checkpoint.tokenizer, sentence)
            pages = {"at once": (drawn_at_once(result, sentence), EVERY_PLOT_DRAWN),
                     "near screen": (html_report(result, sentence, "benchmark"), REPORT_SCREEN_DRAWN)}  # fmt: skip
            ms, parsed = {}, 0.0
            for name, (text, drawn) in pages.items():
                path = Path(folder) / f"{name.replace(' ', '-')}.html"
                path.write_text(text, encoding="utf-8")
                page = browser.new_page(viewport={"width": 1440, "height": 900})
                page.goto(path.as_uri())
                page.wait_for_function(drawn, timeout=120_000)
                ms[name] = page.evaluate("performance.now()")  # since the navigation started
                parsed = page.evaluate("performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd")
                page.close()
            rows.append(Row(
                f"HTML report, {len(result.src_ids)} + {result.steps} tokens: opening to its first screen drawn (Chromium)",
                "every figure drawn on opening", ms["at once"], ms["near screen"], TARGETS[tokens],
                f"the rest drawn as they near the screen; the page parsed (plotly.js inlined, before any figure) at "
                f"{parsed:.0f} ms",
            ))  # fmt: skip
    return rows
