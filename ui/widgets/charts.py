"""Drawing a figure builder's output on a page, the same way everywhere."""

from __future__ import annotations

import textwrap

import plotly.graph_objects as go
import streamlit as st

from transformer.viz.style import FIGURE_CONFIG

PRESENTATION_FONT = 18  # points, for a projector
PRESENTATION_TITLE_CHARACTERS = 60  # a line of title at that size on a 1024-pixel projector


def show(figure: go.Figure, key: str) -> None:
    """Our own styling (theme=None: Streamlit's theme pads heatmaps), and Plotly's toolbar with its PNG download."""
    if st.session_state.get("presentation"):
        _enlarge(figure)
    st.plotly_chart(figure, theme=None, config=FIGURE_CONFIG, key=key)


def _enlarge(figure: go.Figure) -> None:
    """Bigger text and figures; a title too long for one line is wrapped (Plotly cuts it at the figure's edge);
    subplot titles (annotations, sized on their own) enlarged too; a legend above the plot moved beside it (at
    this size its lines grew up over the title)."""
    lines = textwrap.wrap(figure.layout.title.text or "", PRESENTATION_TITLE_CHARACTERS, break_long_words=False)
    top = figure.layout.margin.t if figure.layout.margin.t is not None else 80
    figure.update_layout(font_size=PRESENTATION_FONT, height=int((figure.layout.height or 450) * 1.3))
    figure.update_annotations(font_size=PRESENTATION_FONT)
    if figure.layout.legend.orientation == "h":
        figure.update_layout(legend=dict(orientation="v", x=1.02, xanchor="left", y=1, yanchor="top"))
    if len(lines) > 1:
        figure.update_layout(title_text="<br>".join(lines), margin_t=top + 26 * (len(lines) - 1))
        if figure.layout.title.yanchor == "bottom" and figure.layout.title.pad.b:  # above colour bars: kept clear
            figure.update_layout(title_pad_b=figure.layout.title.pad.b + 26 * (len(lines) - 1))


def table(data, **dataframe_options) -> None:
    """A table: interactive (sortable) as a rule; in presentation mode plain HTML, whose text the presentation
    style sheet enlarges (the interactive table draws on a canvas, at its own small size)."""
    if st.session_state.get("presentation"):
        st.table(data)
    else:
        st.dataframe(data, **dataframe_options)
