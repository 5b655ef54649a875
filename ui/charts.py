"""Drawing a figure builder's output on a page, the same way everywhere."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from transformer.viz.style import FIGURE_CONFIG

PRESENTATION_FONT = 18  # points, for a projector


def show(figure: go.Figure, key: str) -> None:
    """Our own styling (theme=None: Streamlit's theme pads heatmaps), and Plotly's toolbar with its PNG download."""
    if st.session_state.get("presentation"):
        figure.update_layout(font_size=PRESENTATION_FONT, height=int((figure.layout.height or 450) * 1.3))
    st.plotly_chart(figure, theme=None, config=FIGURE_CONFIG, key=key)


PRESENTATION_CSS = """
<style>
[data-testid="stMarkdownContainer"] p, [data-testid="stMarkdownContainer"] li,
[data-testid="stWidgetLabel"] p, [data-testid="stCaptionContainer"] { font-size: 1.35rem !important; }
header[data-testid="stHeader"], [data-testid="stToolbar"] { display: none; }
</style>
"""  # text sizes only: changing the root font size would resize the layout under already drawn figures


def presentation_style() -> None:
    """Bigger text and less chrome when presentation mode is on (a fixed style sheet, no user text)."""
    if st.session_state.get("presentation"):
        st.html(PRESENTATION_CSS)
