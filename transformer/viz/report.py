"""One self-contained HTML file of a decoded sentence: every figure, plotly.js inlined, works offline.

A sentence's report holds over a hundred heatmaps (three kinds x layers x heads); drawn all at once on
opening, even a short sentence's took seconds before anything could be read (measured:
docs/performance.md). Each figure travels as JSON and is drawn when it comes near the screen (an
IntersectionObserver), so the first screen is drawn at once. The plotly.js inlined is its cartesian bundle
(heatmaps and bars, all the report draws: a third of the whole library, whose parsing alone held up the first
screen). It is plotly.js's own build, from npm's plotly.js-cartesian-dist-min, of the version the Python package
draws for (a test holds them equal).
"""

from __future__ import annotations

import functools
import gzip
import html
from collections.abc import Callable, Iterator
from pathlib import Path

import plotly.graph_objects as go

from transformer.analysis.interventions.sites import Patching
from transformer.analysis.rollout import rollout
from transformer.analysis.views import attention_view
from transformer.analysis.words import merge_words, probabilities_over_words, word_labels, word_spans
from transformer.decoding.result import DecodeResult
from transformer.model.heads import layer_names
from transformer.model.kinds import AttentionKind
from transformer.text.pieces import readable
from transformer.viz.attention import attention_heatmap, heads_or_means
from transformer.viz.charts import token_probabilities
from transformer.viz.patching import patching_grids

REPORT_FIGURES = 2 + len(AttentionKind)
WORDS_NOTE = "<p>Maps over words: each word's pieces merged; a word's probability is the product of its pieces'.</p>"
CARTESIAN_BUNDLE = Path(__file__).parent / "vendor" / "plotly-cartesian.min.js.gz"  # gzipped: 0.5 MB, not 1.5


@functools.cache
def plotly_js() -> str:
    """The cartesian bundle of plotly.js, read once."""
    return gzip.decompress(CARTESIAN_BUNDLE.read_bytes()).decode("utf-8")


def report_figures(result: DecodeResult, words: bool = False) -> Iterator[tuple[str, go.Figure]]:
    """The REPORT_FIGURES figures of the report, one at a time (each takes a while): output probabilities, each
    kind's heads by layer, and the encoder rollout; the maps over words where asked, as the page shows them."""
    probabilities, labels, spans = probabilities_over_words(result.token_probs.numpy(), result.tgt_pieces, words)
    forced = sum(end <= result.forced for _, end in spans)
    title = "probability of each output word" if words else "probability of each output token"
    yield "Output", token_probabilities(labels, probabilities, title, forced)
    for kind in AttentionKind:
        view = attention_view(result, kind, words=words)
        rows = layer_names(view.maps.shape[0])
        figure, _ = heads_or_means(view.maps, view.query_pieces, view.key_pieces, rows, kind.title, view.mask)
        yield kind.title, figure
    flow, labels = rollout(result.encoder_self.numpy()), list(result.src_pieces)
    if words:
        spans = word_spans(labels)
        flow, labels = merge_words(flow, spans, spans), word_labels(labels, spans)
    yield "Encoder rollout", attention_heatmap(flow, labels, labels, "attention rollout")


# Draws a figure (its JSON in the script element after it) when it comes within 200 px of the viewport.
DRAW_NEAR_SCREEN = """<script>
const observer = new IntersectionObserver((entries) => {
  for (const entry of entries.filter((e) => e.isIntersecting)) {
    observer.unobserve(entry.target);
    const spec = JSON.parse(entry.target.nextElementSibling.textContent);
    Plotly.newPlot(entry.target, spec.data, spec.layout, {responsive: true});
  }
}, {rootMargin: "0px 0px 200px 0px"});
document.querySelectorAll(".figure").forEach((holder) => observer.observe(holder));
</script>"""


def figure_section(title: str, figure: go.Figure) -> str:
    """A heading, a holder of the figure's height, and the figure as JSON in a script element (every "<"
    escaped, so no text inside can end the element)."""
    spec = figure.to_json().replace("<", "\\u003c")
    height = figure.layout.height or 450
    return (
        f'<h2>{html.escape(title)}</h2>\n<div class="figure" style="height:{height}px"></div>'
        f'<script type="application/json">{spec}</script>'
    )


def html_report(
    result: DecodeResult,
    source_text: str,
    checkpoint_name: str,
    progress: Callable[[int], None] | None = None,
    words: bool = False,
) -> str:
    """The page as a string; every piece of user text is escaped. `progress` hears the figures done so far; `words`:
    the maps over words (each word's pieces merged), as the page that built it showed them."""
    drawn = []
    for title, figure in report_figures(result, words):
        drawn.append(figure_section(title, figure))
        if progress:
            progress(len(drawn))
    probabilities, labels, spans = probabilities_over_words(result.token_probs.numpy(), result.tgt_pieces, words)
    rows = "\n".join(
        f"<tr><td>{start + 1 if end == start + 1 else f'{start + 1}–{end}'}</td>"
        f"<td>{html.escape(readable(label))}</td><td>{float(p):.3f}</td></tr>"
        for (start, end), label, p in zip(spans, labels, probabilities)
    )
    header = f"""<p><b>Checkpoint:</b> {html.escape(checkpoint_name)} · <b>decoding:</b> {html.escape(result.strategy)}</p>
<p><b>Source:</b> {html.escape(source_text)}{" (cut to the model's maximum length)" if result.truncated else ""}</p>
<p><b>Output:</b> {html.escape(result.text)}</p>{WORDS_NOTE if words else ""}
<table><tr><th>step</th><th>{"word" if words else "token"}</th><th>probability</th></tr>
{rows}
</table>"""
    return standalone_page("Attention report", header, drawn)


def standalone_page(title: str, header: str, sections: list[str]) -> str:
    """One HTML file: plotly.js inlined, the header (HTML, its user text escaped by the caller), then the figures'
    sections, each drawn when it comes near the screen."""
    joined = "\n".join(sections)
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>
<script type="text/javascript">{plotly_js()}</script>
<style>body{{font-family:sans-serif;max-width:1200px;margin:auto}} td{{padding:0 1em}}</style></head>
<body>
<h1>{html.escape(title)}</h1>
{header}
{joined}
{DRAW_NEAR_SCREEN}
</body></html>
"""


def patching_report(
    found: Patching, source_labels: list[str], checkpoint_name: str, lines: dict[str, str], said: str
) -> str:
    """An activation patching run as one offline HTML file: what was compared (`lines`, each a label and its text),
    the sentence that says what the grids show, and every grid, the encoder's heads of every layer."""
    grids = patching_grids(found, source_labels)
    named = [("Checkpoint", checkpoint_name), *lines.items()]
    header = "\n".join(f"<p><b>{html.escape(name)}:</b> {html.escape(text)}</p>" for name, text in named)
    header += f"\n<p>{html.escape(said)}</p>"
    sections = [figure_section(figure.layout.title.text or "", figure) for figure in grids.all()]
    return standalone_page("Activation patching report", header, sections)
