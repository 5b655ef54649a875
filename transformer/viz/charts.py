"""Bars and curves: next-token probabilities, vector norms, training curves, positional sinusoids."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from transformer.viz.style import LEGEND_ABOVE, axis_labels, fit_labels


def token_probabilities(
    pieces: list[str], probabilities: np.ndarray, title: str | None = None, forced: int = 0
) -> go.Figure:
    """The probability the model gave each token of an output, in order (a column per token); the first `forced`
    tokens (a target language's code, set whatever the model gives it) grey and said to be forced."""
    chosen = ["" if t < forced else "chosen" for t in range(len(pieces))]
    fig = go.Figure(
        go.Bar(
            x=axis_labels(pieces),
            y=np.asarray(probabilities, dtype=np.float32),
            marker_color=["#a3a8b8" if t < forced else "#3a6fbf" for t in range(len(pieces))],
            customdata=["forced: every output starts with it" if not how else "" for how in chosen],
            hovertemplate="%{x}: %{y:.3f} %{customdata}<extra></extra>",
        )
    )
    fig.update_layout(title=title, height=300, margin=dict(l=10, r=10, t=50 if title else 20, b=10))
    fig.update_yaxes(range=[0, 1], title="probability")
    fig.update_xaxes(type="category", tickangle=-60)
    return fit_labels(fig)


def curves(table: np.ndarray, columns: list[int], title: str, x_title: str = "position") -> go.Figure:
    """Chosen columns of a (rows, columns) table as lines over the rows (e.g. PE dimensions over positions)."""
    fig = go.Figure(
        [go.Scatter(y=np.asarray(table[:, c], dtype=np.float32), mode="lines", name=f"dimension {c}") for c in columns]
    )
    fig.update_layout(title=title, height=380, margin=dict(l=10, r=10, t=80, b=10), legend=LEGEND_ABOVE)
    fig.update_xaxes(title=x_title)
    return fit_labels(fig)


def grouped_bars(pieces: list[str], series: dict[str, np.ndarray], title: str, y_title: str) -> go.Figure:
    """One group of bars per token, one bar per named series."""
    labels = axis_labels(pieces)
    fig = go.Figure(
        [go.Bar(x=labels, y=np.asarray(values, dtype=np.float32), name=name) for name, values in series.items()]
    )
    fig.update_layout(
        title=title, barmode="group", height=380, margin=dict(l=10, r=10, t=80, b=10), legend=LEGEND_ABOVE
    )
    fig.update_xaxes(type="category", tickangle=-60)
    fig.update_yaxes(title=y_title)
    return fit_labels(fig)


def lines(
    series: dict[str, tuple[list[float], list[float]]],
    title: str,
    x_title: str,
    y_title: str,
    colours: dict[str, str] | None = None,
) -> go.Figure:
    """Named (x, y) series as lines with markers (training curves); `colours` gives a series the colour its measure
    has elsewhere on the page (Plotly's own otherwise)."""
    colours = colours or {}
    fig = go.Figure(
        [
            go.Scatter(x=x, y=np.asarray(y, dtype=np.float32), mode="lines", name=name, line_color=colours.get(name))
            for name, (x, y) in series.items()
        ]
    )
    fig.update_layout(title=title, height=320, margin=dict(l=10, r=10, t=80, b=10), legend=LEGEND_ABOVE)
    fig.update_xaxes(title=x_title)
    fig.update_yaxes(title=y_title)
    return fit_labels(fig)
