"""Figures in a notebook that survive its export to HTML.

Jupyter's default Plotly renderer writes a Plotly data bundle that only a live notebook front end
draws: exported with nbconvert (to share a lesson as one HTML file), every figure is gone. Plotly's
"notebook" renderer writes HTML instead, with plotly.js inlined once, in the first figure's output:
the exported file draws every figure, offline.
"""

from __future__ import annotations

import plotly.io as pio

EXPORTABLE_RENDERER = "notebook"


def exportable_figures() -> None:
    """Makes every later fig.show() in this notebook write HTML that an HTML export keeps (no network needed)."""
    pio.renderers.default = EXPORTABLE_RENDERER
