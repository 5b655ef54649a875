"""Figures of attribution beside attention: several measures of one output step over the same tokens."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from transformer.viz.style import COLORSCALE, axis_labels, fit_labels


def measures_over_tokens(measures: dict[str, np.ndarray], pieces: list[str], title: str) -> go.Figure:
    """One row per measure over the same tokens, each row as shares of its total |value| so that rows compare.

    The colour is the share (one scale for every row); the hover also gives the signed value, since a
    gradient's sign says whether the token raised or lowered the output's probability.
    """
    names = list(measures)
    values = np.stack([np.asarray(measures[name], dtype=np.float64) for name in names])
    magnitude = np.abs(values)
    shares = magnitude / np.maximum(magnitude.sum(axis=1, keepdims=True), 1e-12)
    fig = go.Figure(
        go.Heatmap(
            z=shares,
            x=axis_labels(pieces),
            y=names,
            customdata=values,
            colorscale=COLORSCALE,
            zmin=0,
            zmax=max(float(shares.max()), 1e-6),
            xgap=1,
            ygap=2,
            hovertemplate="%{y}<br>token %{x}<br>share %{z:.3f}<br>value %{customdata:.4g}<extra></extra>",
            colorbar=dict(thickness=10, title="share"),
        )
    )
    fig.update_layout(title=title, height=140 + 46 * len(names), margin=dict(l=10, r=10, t=50, b=10))
    fig.update_xaxes(type="category", showgrid=False, tickangle=-45)
    fig.update_yaxes(type="category", showgrid=False, autorange="reversed")
    return fit_labels(fig)
