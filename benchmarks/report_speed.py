"""The offline HTML report opened in Chromium: its first screen drawn, against the same figures drawn all at
once on opening with the whole of plotly.js (how the report drew before); and with the whole of plotly.js near
the screen, to tell the bundle's share from the lazy drawing's."""

from __future__ import annotations

import html
import statistics
import tempfile
from pathlib import Path

from plotly.offline import get_plotlyjs

from tests.fixtures.browser import REPORT_SCREEN_DRAWN, chromium
from transformer.decoding.greedy import decode_with_chooser
from transformer.decoding.result import DecodeResult
from transformer.io.checkpoint import Checkpoint
from transformer.viz.report import html_report, plotly_js, report_figures

from .app_on_device import TWENTY_WORDS
from .model_speed import Row

EVERY_PLOT_DRAWN = (
    "() => [...document.querySelectorAll('.js-plotly-plot')].every((plot) => plot.querySelector('.main-svg'))"
)
SENTENCES = {10: "Two dogs are playing in the snow.", 120: " ".join(TWENTY_WORDS[:5])}
TARGETS = {10: "≤ 2000 ms", 120: "≤ 5000 ms"}
REPEATS = 3
PARSED = "performance.getEntriesByType('navigation')[0].domContentLoadedEventEnd"


def drawn_at_once(result: DecodeResult, source_text: str) -> str:
    """The baseline: the same figures, each drawn by its own script as the page opens."""
    sections = "\n".join(
        f"<h2>{html.escape(title)}</h2>{figure.to_html(full_html=False, include_plotlyjs=False)}"
        for title, figure in report_figures(result)
    )
    return (
        f'<!DOCTYPE html><html><head><meta charset="utf-8"><script>{get_plotlyjs()}</script></head><body>'
        f"<p>{html.escape(source_text)}</p>{sections}</body></html>"
    )


def report_rows(checkpoint: Checkpoint, repeats: int = REPEATS, sizes: int = len(SENTENCES)) -> list[Row]:
    """The report's first screen against drawing every figure at once, for the first `sizes` sentences."""
    rows = []
    with chromium() as browser, tempfile.TemporaryDirectory() as folder:
        for tokens, sentence in list(SENTENCES.items())[:sizes]:
            result = decode_with_chooser(checkpoint.model, checkpoint.tokenizer, sentence)
            report = html_report(result, sentence, "benchmark")
            pages = {
                "at once": (drawn_at_once(result, sentence), EVERY_PLOT_DRAWN),
                "near screen": (report, REPORT_SCREEN_DRAWN),
                "whole plotly.js": (report.replace(plotly_js(), get_plotlyjs()), REPORT_SCREEN_DRAWN),
            }
            times, parsed = {name: [] for name in pages}, []
            for _ in range(repeats):  # interleaved: a noisy machine slows each page alike
                for name, (text, drawn) in pages.items():
                    path = Path(folder) / f"{name.replace(' ', '-')}.html"
                    path.write_text(text, encoding="utf-8")
                    page = browser.new_page(viewport={"width": 1440, "height": 900})
                    page.goto(path.as_uri())
                    page.wait_for_function(drawn, timeout=120_000)
                    times[name].append(page.evaluate("performance.now()"))  # since the navigation started
                    if name == "near screen":
                        parsed.append(page.evaluate(PARSED))
                    page.close()
            ms = {name: statistics.median(values) for name, values in times.items()}
            rows.append(
                Row(
                    f"HTML report, {len(result.src_ids)} + {result.steps} tokens: opening to its first screen drawn (Chromium)",
                    "every figure drawn on opening",
                    ms["at once"],
                    ms["near screen"],
                    TARGETS[tokens],
                    f"the rest drawn as they near the screen; the page parsed (plotly.js's cartesian bundle inlined, before "
                    f"any figure) at {statistics.median(parsed):.0f} ms; with the whole of plotly.js: "
                    f"{ms['whole plotly.js']:.0f} ms; medians of {repeats}",
                )
            )
    return rows
