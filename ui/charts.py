"""Drawing a figure builder's output on a page, the same way everywhere."""

from __future__ import annotations

import plotly.graph_objects as go
import streamlit as st

from transformer.figures import FIGURE_CONFIG


def show(figure: go.Figure, key: str) -> None:
    """Our own styling (theme=None: Streamlit's theme pads heatmaps), and Plotly's toolbar with its PNG download."""
    st.plotly_chart(figure, theme=None, config=FIGURE_CONFIG, key=key)
