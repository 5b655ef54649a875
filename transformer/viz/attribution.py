"""Figures of attribution beside attention: several measures of one output step over the same tokens."""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import plotly.graph_objects as go
from plotly.colors import sequential

from transformer.viz.matrices import diverging_scale
from transformer.viz.style import axis_labels, fit_labels

UNSIGNED = "Greens"  # beside the signed rows' red and blue: attention's usual blue would read as "lowered" here
# A measure's line in its maps' colour: the signed maps' red (raised) and the shares' green; Plotly's first, blue,
# means "lowered" on the page
MEASURE_COLOURS = {"integrated gradients": sequential.Reds[6], "ALTI+": sequential.Greens[6]}


def measures_over_tokens(
    measures: dict[str, np.ndarray], pieces: list[str], title: str, signed: Collection[str] = ()
) -> go.Figure:
    """One row per measure over the same tokens, each row as shares of its total |value| so that rows compare.

    Rows named in `signed` (gradients: a token raised or lowered the output's probability) keep their sign
    and take a diverging scale centred on 0, red raising, blue lowering, as the page's signed matrices do;
    the others (attention, contributions: never negative) take a sequential scale of another hue (UNSIGNED), so
    that blue means one thing in the figure: lowered. Each colour bar's title says what its colours mean.
    """
    names = list(measures)
    values = np.stack([np.asarray(measures[name], dtype=np.float64) for name in names])
    shares = values / np.maximum(np.abs(values).sum(axis=1, keepdims=True), 1e-12)
    is_signed = np.array([name in signed for name in names])
    x = axis_labels(pieces)
    fig = go.Figure()
    titles = ((False, "share<br>(never negative)"), (True, "signed share:<br>red raised, blue lowered"))
    scales = [(rows, name) for rows, name in titles if (is_signed == rows).any()]
    for signed_rows, scale in scales:
        z = np.where((is_signed == signed_rows)[:, None], shares, np.nan)
        bound = max(float(np.nanmax(np.abs(z))), 1e-6)
        colours = diverging_scale(bound) if signed_rows else dict(colorscale=UNSIGNED, zmin=0, zmax=bound)
        hover = f"%{{y}}<br>token %{{x}}<br>{scale} %{{z:.3f}}<br>value %{{customdata:.4g}}<extra></extra>"
        # Above the map, side by side: beside it, the bars and their titles took half a projector's width from the
        # map (181 px of 864), and a one-row map's bar was too short for its numbers.
        place = dict(len=1.0, x=0.0) if len(scales) == 1 else dict(len=0.48, x=0.52 * len(fig.data))
        colorbar = dict(
            orientation="h",
            thickness=10,
            title=dict(text=scale, side="top"),
            xanchor="left",
            y=1.0,
            yanchor="bottom",
            ypad=8,
            **place,
        )
        fig.add_trace(
            go.Heatmap(
                z=z,
                x=x,
                y=names,
                customdata=values,
                xgap=1,
                ygap=2,
                hoverongaps=False,
                name=scale,
                hovertemplate=hover,
                colorbar=colorbar,
                **colours,
            )
        )
    fig.update_layout(
        title=dict(text=title, yref="paper", y=1.0, yanchor="bottom", pad=dict(b=70)),  # above the colour bars
        height=230 + 46 * len(names),
        margin=dict(l=10, r=10, t=150, b=10),
    )
    fig.update_xaxes(type="category", showgrid=False, tickangle=-90)  # upright labels take a column's width alone
    fig.update_yaxes(type="category", showgrid=False, autorange="reversed", categoryorder="array", categoryarray=names)
    return fit_labels(fig)
