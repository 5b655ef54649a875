"""Plotly builders for the teaching pages: any real matrix, mask matrices, curves and bars.

Like `figures`, pure functions with no Streamlit; token labels go through the same escaping.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from transformer.viz.style import LEGEND_ABOVE, MASKED_COLOR, axis_labels, fit_labels

DIVERGING = "RdBu_r"  # negative blue, zero white, positive red


def diverging_scale(bound: float) -> dict:
    """Heatmap colour arguments for signed values within ±bound: white at 0, whatever the values' balance."""
    return dict(colorscale=DIVERGING, zmid=0, zmin=-bound, zmax=bound)


def _labels(pieces: list[str] | None) -> list[str] | None:
    """Token labels, or None: Plotly numbers the rows or dimensions itself, and thins those numbers as it likes."""
    return axis_labels(pieces) if pieces is not None else None


OUTLINE = dict(color="#e4572e", width=3)  # the row of the step on screen


def matrix_heatmap(
    matrix: np.ndarray,
    title: str,
    row_pieces: list[str] | None = None,
    column_pieces: list[str] | None = None,
    highlight_row: int | None = None,
    x_title: str | None = None,
    y_title: str | None = None,
    probabilities: bool = False,
    value_range: tuple[float, float] | None = None,
    cell_text: np.ndarray | None = None,
    signed_bound: float | None = None,
    sequential: str = "Blues",
    upright_columns: bool = False,
) -> go.Figure:
    """A real matrix with its shape in the title; -inf cells (masked) grey; one row outlined if asked; `cell_text`,
    a few words written in each cell (a head's roles on a grid of heads); `upright_columns`: column labels upright,
    each in its column's width alone (a projector's). Probabilities (0..1), or values of a given non-negative
    range, get a sequential scale (`sequential`: another hue where blue means "lowered" beside it); anything else a
    diverging one centred on 0, within ±signed_bound where given (figures that share a scale), else holding all."""
    z = np.asarray(matrix, dtype=np.float32)
    rows, columns = z.shape
    z = np.where(np.isneginf(z), np.float32("nan"), z)
    scale = _colour_scale(z, (0.0, 1.0) if probabilities else value_range, signed_bound, sequential)
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=_labels(column_pieces),
            y=_labels(row_pieces),
            hoverongaps=False,
            hovertemplate="row %{y}<br>column %{x}<br>%{z:.4f}"
            + ("<br>%{text}" if cell_text is not None else "")
            + "<extra></extra>",
            colorbar=dict(thickness=10),
            **scale,
            **({} if cell_text is None else dict(text=cell_text, texttemplate="%{text}")),
        )
    )
    fig.update_layout(
        title=f"{title} · {rows}×{columns}",
        height=max(260, min(900, 120 + 18 * rows)),
        margin=dict(l=10, r=10, t=50, b=10),
        plot_bgcolor=MASKED_COLOR,
    )
    # An axis without tokens is numbered from 0 (positions or dimensions)
    fig.update_xaxes(
        type="category" if column_pieces else "linear",
        title=x_title,
        showgrid=False,
        range=[-0.5, columns - 0.5],
        tickangle=-90 if upright_columns else None,
    )
    fig.update_yaxes(
        type="category" if row_pieces else "linear", title=y_title, showgrid=False, range=[rows - 0.5, -0.5]
    )
    if highlight_row is not None:
        fig.add_shape(
            type="rect", x0=-0.5, x1=columns - 0.5, y0=highlight_row - 0.5, y1=highlight_row + 0.5, line=OUTLINE
        )
    return fit_labels(fig)


def _colour_scale(
    z: np.ndarray, value_range: tuple[float, float] | None, signed_bound: float | None = None, sequential: str = "Blues"
) -> dict:
    """A given range on the attention's sequential scale; without one, a diverging scale around 0 within
    ±signed_bound, or holding every value."""
    if signed_bound is not None:
        return diverging_scale(signed_bound)
    if value_range is not None:
        return dict(colorscale=sequential, zmin=value_range[0], zmax=value_range[1])
    finite = np.abs(z[np.isfinite(z)])
    return diverging_scale(float(finite.max()) if finite.size else 1.0)


KEEP_COLOR = "#1f4e9c"


def mask_heatmap(keep: np.ndarray, query_pieces: list[str], key_pieces: list[str], title: str) -> go.Figure:
    """A boolean mask: dark where the query may look at the key, grey where it may not, with a legend that says so."""
    keep = np.asarray(keep, dtype=bool)
    fig = go.Figure(
        go.Heatmap(
            z=keep.astype(np.float32),
            x=axis_labels(key_pieces),
            y=axis_labels(query_pieces),
            text=np.where(keep, "may look", "masked"),
            hovertemplate="query %{y}<br>key %{x}<br>%{text}<extra></extra>",
            colorscale=[[0, MASKED_COLOR], [1, KEEP_COLOR]],
            zmin=0,
            zmax=1,
            showscale=False,
            xgap=1,
            ygap=1,
        )
    )
    for name, colour in (("may look", KEEP_COLOR), ("masked (−∞ before the softmax)", MASKED_COLOR)):
        fig.add_trace(
            go.Scatter(
                x=[None],
                y=[None],
                mode="markers",
                name=name,
                hoverinfo="skip",
                marker=dict(symbol="square", size=12, color=colour),
            )
        )
    rows, columns = keep.shape
    fig.update_layout(
        title=title,
        height=max(260, min(820, 130 + 20 * rows)),
        margin=dict(l=10, r=10, t=80, b=10),
        legend=LEGEND_ABOVE,
        showlegend=True,
    )
    fig.update_xaxes(type="category", title="key", tickangle=-60, range=[-0.5, columns - 0.5], showgrid=False)
    fig.update_yaxes(type="category", title="query", range=[rows - 0.5, -0.5], showgrid=False)
    return fit_labels(fig)
