"""The shared look of every figure: colours, the Plotly toolbar, token labels that fit and never run script."""

from __future__ import annotations

import plotly.graph_objects as go

COLORSCALE = "Blues"


MASKED_COLOR = "#b9b9b9"  # the plot background shows through masked (NaN) cells


# A horizontal legend between the title and the plot: below it, it sat on the x axis's title.
LEGEND_ABOVE = dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0)


FIGURE_CONFIG = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "scale": 2}}


def fit_labels(fig: go.Figure) -> go.Figure:
    """Margins that grow to fit the tick labels (tokens can be long), whatever the font size."""
    fig.update_xaxes(automargin=True)
    fig.update_yaxes(automargin=True)
    return fig


def plotly_text(text: str) -> str:
    """Text for Plotly's labels and titles: its pseudo-HTML tags made inert, and nothing else escaped.

    Plotly decodes &amp; &lt; &gt; and numeric entities but shows &quot; as typed, so quotes stay quotes.
    """
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def axis_labels(pieces: list[str]) -> list[str]:
    """Escaped token labels, made distinct by invisible zero-width spaces so repeats keep their own cell."""
    seen: dict[str, int] = {}
    labels = []
    for piece in pieces:
        count = seen.get(piece, 0)
        seen[piece] = count + 1
        labels.append(plotly_text(piece) + "\u200b" * count)
    return labels
