"""One self-contained HTML file of a decoded sentence: every figure, plotly.js inlined, works offline."""

from __future__ import annotations

import html

import plotly.graph_objects as go
from plotly.offline import get_plotlyjs

from transformer.analysis.rollout import rollout
from transformer.analysis.views import attention_view
from transformer.decoding.result import DecodeResult
from transformer.model.kinds import AttentionKind
from transformer.text.pieces import readable
from transformer.viz.attention import attention_heatmap, heads_or_means
from transformer.viz.charts import token_probabilities


def report_figures(result: DecodeResult) -> list[tuple[str, go.Figure]]:
    """The figures of the report: output probabilities, each kind's heads by layer, and the encoder rollout."""
    figures = [
        (
            "Output",
            token_probabilities(result.tgt_pieces, result.token_probs.numpy(), "probability of each output token"),
        )
    ]
    for kind in AttentionKind:
        name = kind.title
        view = attention_view(result, kind)
        rows = [f"layer {i + 1}" for i in range(view.maps.shape[0])]
        figure, _ = heads_or_means(view.maps, view.query_pieces, view.key_pieces, rows, name, view.mask)
        figures.append((name, figure))
    encoder = result.encoder_self.numpy()
    figures.append(
        (
            "Encoder rollout",
            attention_heatmap(rollout(encoder), result.src_pieces, result.src_pieces, "attention rollout"),
        )
    )
    return figures


def html_report(result: DecodeResult, source_text: str, checkpoint_name: str) -> str:
    """The page as a string; every piece of user text is escaped."""
    sections = "\n".join(
        f"<h2>{html.escape(title)}</h2>\n{figure.to_html(full_html=False, include_plotlyjs=False)}"
        for title, figure in report_figures(result)
    )
    rows = "\n".join(
        f"<tr><td>{t + 1}</td><td>{html.escape(readable(piece))}</td><td>{float(p):.3f}</td></tr>"
        for t, (piece, p) in enumerate(zip(result.tgt_pieces, result.token_probs.tolist()))
    )
    return f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Attention report</title>
<script type="text/javascript">{get_plotlyjs()}</script>
<style>body{{font-family:sans-serif;max-width:1200px;margin:auto}} td{{padding:0 1em}}</style></head>
<body>
<h1>Attention report</h1>
<p><b>Checkpoint:</b> {html.escape(checkpoint_name)} · <b>decoding:</b> {html.escape(result.strategy)}</p>
<p><b>Source:</b> {html.escape(source_text)}{" (cut to the model's maximum length)" if result.truncated else ""}</p>
<p><b>Output:</b> {html.escape(result.text)}</p>
<table><tr><th>step</th><th>token</th><th>probability</th></tr>
{rows}
</table>
{sections}
</body></html>
"""
