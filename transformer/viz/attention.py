"""Plotly figure builders for attention: pure functions from arrays and tokens to a Figure.

They need Plotly but not Streamlit, so the app, the HTML report and a notebook draw the
same pictures. Token text is escaped (Plotly reads a subset of HTML in labels), and
repeated tokens stay separate rows and columns.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.subplots import make_subplots

from transformer.model.heads import head_name, head_names, layer_names
from transformer.text.pieces import PRODUCES
from transformer.viz.style import COLORSCALE, MASKED_COLOR, axis_labels, fit_labels

HOVER = "query %{y}<br>key %{x}<br>weight %{z:.3f}<extra>%{fullData.name}</extra>"
CELL_BUDGET = 120_000  # cells in one figure beyond which pages draw a cheaper view
GRID_WIDTH = 1000  # px: a grid's width on a laptop's page (1440 px wide, sidebar open), what it is laid out for
KEY_LABEL_SLOT = 13  # px a key's label needs beside the next one (a 10-11 px font, slanted)


def _masked(weights: np.ndarray, mask: np.ndarray | None) -> np.ndarray:
    z = np.asarray(weights, dtype=np.float32)
    if mask is None:
        return z
    return np.where(mask, np.float32("nan"), z)


def _heatmap_trace(
    weights: np.ndarray, query_labels: list[str], key_labels: list[str], mask: np.ndarray | None, name: str
) -> go.Heatmap:
    return go.Heatmap(
        z=_masked(weights, mask),
        x=key_labels,
        y=query_labels,
        coloraxis="coloraxis",
        hovertemplate=HOVER,
        hoverongaps=False,
        name=name,
    )


def _attention_layout(fig: go.Figure, height: int, title: str | None) -> go.Figure:
    fig.update_layout(
        title=title,
        height=height,
        margin=dict(l=10, r=10, t=60 if title else 30, b=10),
        plot_bgcolor=MASKED_COLOR,
        coloraxis=dict(colorscale=COLORSCALE, cmin=0.0, cmax=1.0, colorbar=dict(title="weight", thickness=12)),
    )
    rows, columns = np.shape(fig.data[0].z)  # every map of a figure has one shape
    fig.update_xaxes(type="category", tickangle=-60, range=[-0.5, columns - 0.5], showgrid=False)  # cells fill the plot
    fig.update_yaxes(type="category", range=[rows - 0.5, -0.5], showgrid=False)
    return fit_labels(fig)


def attention_heatmap(
    weights: np.ndarray,
    query_pieces: list[str],
    key_pieces: list[str],
    title: str | None = None,
    mask: np.ndarray | None = None,
) -> go.Figure:
    """One attention map (Q, K): rows are queries, columns keys; cells where mask is True are masked (grey)."""
    fig = go.Figure(_heatmap_trace(weights, axis_labels(query_pieces), axis_labels(key_pieces), mask, "attention"))
    fig.update_xaxes(title="key")
    # A decoder row reads one token and writes the next: say which its label names first, so that a row is not read
    # by the word it is fed as if it were the word it writes (Bahdanau's figure reads rows by the word written).
    written = any(PRODUCES in piece for piece in query_pieces)
    fig.update_yaxes(title="query: token fed → token written" if written else "query")
    return _attention_layout(fig, height=max(320, 140 + 22 * len(query_pieces)), title=title)


def grid_columns(maps_in_a_row: int, keys: int) -> int:
    """How many maps side by side leave each key's label its slot: a divisor of the row's maps (8 heads: 8, 4,
    2 or 1), so that a row of the grid (a layer) wraps onto whole lines of the same length."""
    fit = max(1, GRID_WIDTH // (KEY_LABEL_SLOT * keys + 20))
    return max(c for c in range(1, maps_in_a_row + 1) if maps_in_a_row % c == 0 and c <= fit)


def attention_grid(
    maps: np.ndarray,
    query_pieces: list[str],
    key_pieces: list[str],
    row_titles: list[str],
    column_titles: list[str],
    title: str | None = None,
    mask: np.ndarray | None = None,
) -> go.Figure:
    """A grid of maps (R, C, Q, K) in one figure with one colour scale: all heads of a layer, or the whole model.

    A row of C maps too narrow for its key labels wraps onto several lines (8 heads of 15 keys: two lines
    of 4), each map titled with its column's name; labels overlapping unreadably said nothing. Token labels
    stand on the grid's outer edges (queries left, keys below), except that maps one a line each get their keys.
    """
    grid_rows, per_row = maps.shape[:2]
    columns = grid_columns(per_row, len(key_pieces))
    lines = per_row // columns  # lines per row of the grid
    rows = grid_rows * lines
    map_height = max(120, 18 * len(query_pieces) + 60)
    # One map a line (each layer's mean): the keys are labelled under every map, in a gap that holds the rotated
    # labels and the next map's title; several maps a line label them under the last line only.
    labelled_gap = min(150, 50 + 6 * max(map(len, key_pieces), default=1)) if columns == 1 else 0
    height = 80 + rows * map_height + (rows - 1) * labelled_gap
    fig = make_subplots(
        rows=rows,
        cols=columns,
        row_titles=[row_titles[r // lines] for r in range(rows)],
        subplot_titles=[column_titles[c] for _ in range(grid_rows) for c in range(per_row)],
        horizontal_spacing=0.015,
        vertical_spacing=labelled_gap / (height - 70) if labelled_gap else (0.04 if lines == 1 else 0.1) / rows,
    )
    query_labels, key_labels = axis_labels(query_pieces), axis_labels(key_pieces)
    for r in range(grid_rows):
        for c in range(per_row):
            name = f"{row_titles[r]} {column_titles[c]}".strip()
            trace = _heatmap_trace(maps[r, c], query_labels, key_labels, mask, name)
            fig.add_trace(trace, row=r * lines + c // columns + 1, col=c % columns + 1)
    # Labels between maps side by side covered the neighbouring map, or were cut by the next row.
    for r in range(rows):
        fig.update_xaxes(showticklabels=bool(labelled_gap) or r == rows - 1, row=r + 1)
    for c in range(columns):
        fig.update_yaxes(showticklabels=c == 0, col=c + 1)
    return _attention_layout(fig, height=height, title=title)


def heads_or_means(
    maps: np.ndarray,
    query_pieces: list[str],
    key_pieces: list[str],
    row_titles: list[str],
    title: str | None = None,
    mask: np.ndarray | None = None,
) -> tuple[go.Figure, bool]:
    """Every head of the given layers (L, H, Q, K) in one grid, or, past CELL_BUDGET cells, each layer's mean.

    Returns the figure and whether it fell back to the means (pages say so).
    """
    layers, heads = maps.shape[:2]
    if maps[0, 0].size * layers * heads <= CELL_BUDGET:
        columns = head_names(heads)
        return attention_grid(maps, query_pieces, key_pieces, row_titles, columns, title, mask), False
    means = maps.mean(axis=1, keepdims=True)
    return attention_grid(means, query_pieces, key_pieces, row_titles, ["mean over heads"], title, mask), True


def fit_colour_scale(fig: go.Figure) -> tuple[float, float]:
    """Stretches the figure's one colour scale from 0-1 to the range of the weights it draws, and returns that range.

    Near-uniform attention (every weight near 1/n) is one pale colour on the fixed scale; fitted, its small
    differences show. The range must then be read off the colour bar (and pages say it).
    """
    values = np.concatenate([np.ravel(trace.z) for trace in fig.data]).astype(np.float64)
    values = values[np.isfinite(values)]
    low, high = (float(values.min()), float(values.max())) if values.size else (0.0, 1.0)
    if high - low < 1e-9:  # one value everywhere: a scale around it
        low, high = max(0.0, low - 0.5e-3), high + 0.5e-3
    fig.update_layout(coloraxis=dict(cmin=low, cmax=high))
    return low, high


def with_layer_means(rows: np.ndarray) -> np.ndarray:
    """(L, H, ...) -> (L, H + 1, ...): each layer's heads and then their mean, the rows a step view draws."""
    return np.concatenate([rows, rows.mean(axis=1, keepdims=True)], axis=1)


def head_row_labels(layers: int, heads: int, names: list[str] | None = None) -> list[str]:
    """The names of `with_layer_means`' rows, layer by layer: "layer 1 · head 1" ... "layer 1 · mean" (`names`: the
    layers', where they are not the model's first)."""
    names = names or layer_names(layers)
    return [
        f"{names[layer]} · {head_name(h) if h < heads else 'mean'}" for layer in range(layers) for h in range(heads + 1)
    ]


def step_attention(
    rows: np.ndarray, key_pieces: list[str], title: str | None = None, names: list[str] | None = None
) -> go.Figure:
    """What one decoding step attended to: rows (L, H, K) drawn as one row per layer and head, plus each layer's mean."""
    layers, heads = rows.shape[:2]
    block = with_layer_means(rows)  # (L, H+1, K)
    labels = head_row_labels(layers, heads, names)
    fig = go.Figure(
        go.Heatmap(
            z=block.reshape(layers * (heads + 1), -1).astype(np.float32),
            x=axis_labels(key_pieces),
            y=labels,
            coloraxis="coloraxis",
            hovertemplate="%{y}<br>key %{x}<br>weight %{z:.3f}<extra></extra>",
        )
    )
    fig.update_xaxes(title="key")
    return _attention_layout(fig, height=110 + 20 * len(labels), title=title)
