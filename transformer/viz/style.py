"""The shared look of every figure: colours, the Plotly toolbar, token labels that fit and never run script."""

from __future__ import annotations

import plotly.graph_objects as go
from plotly.colors import sequential

from transformer.text.pieces import readable_label

COLORSCALE = "Blues"


MASKED_COLOR = "#b9b9b9"  # the plot background shows through masked (NaN) cells


# A horizontal legend between the title and the plot: below it, it sat on the x axis's title.
LEGEND_ABOVE = dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0)


FIGURE_CONFIG = {"displaylogo": False, "toImageButtonOptions": {"format": "png", "scale": 2}}


LABELS_AT_FULL_SIZE = 40  # token labels on one axis before their font shrinks to keep them apart
SMALLEST_LABEL = 7  # points


def fit_labels(fig: go.Figure) -> go.Figure:
    """Margins that grow to fit the tick labels (tokens can be long), and every token labelled.

    Plotly thins crowded category labels by itself, so a label would vanish with no word; here each
    token axis gets a tick per category, with a smaller font where there are many.
    """
    # A standoff given, Plotly places an axis title that far from the tick labels' far edge (without one it
    # placed "query" by the axis, over a long row label in presentation mode) and widens the margin to fit.
    fig.update_xaxes(automargin=True, title_standoff=6)
    fig.update_yaxes(automargin=True, title_standoff=6)
    for trace in fig.data:
        for letter in ("x", "y"):
            values = getattr(trace, letter, None)
            if values is None or not len(values) or not isinstance(values[0], str):
                continue
            name = (getattr(trace, f"{letter}axis", None) or letter).replace(letter, f"{letter}axis", 1)
            fig.layout[name].update(tickmode="linear", tick0=0, dtick=1)
            if len(values) > LABELS_AT_FULL_SIZE:
                fig.layout[name].tickfont.size = max(SMALLEST_LABEL, round(12 * LABELS_AT_FULL_SIZE / len(values)))
    return fig


def plotly_text(text: str) -> str:
    """Text for Plotly's labels and titles: its pseudo-HTML tags made inert, and nothing else escaped.

    Plotly decodes &amp; &lt; &gt; and numeric entities but shows &quot; as typed, so quotes stay quotes.
    """
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def axis_labels(pieces: list[str]) -> list[str]:
    """Pieces as readers read them ("▁chiens" as "chiens"), escaped, and made distinct by invisible zero-width
    spaces so repeats keep their own cell."""
    seen: dict[str, int] = {}
    labels = []
    for piece in pieces:
        label = readable_label(piece)
        count = seen.get(label, 0)
        seen[label] = count + 1
        labels.append(plotly_text(label) + "\u200b" * count)
    return labels


def colorscale_stops() -> list[list[int]]:
    """The attention colour scale as evenly spaced RGB stops, for maps drawn outside Plotly (the app's step view)."""
    return [[int(part) for part in color.strip("rgb()").split(",")] for color in getattr(sequential, COLORSCALE)]
