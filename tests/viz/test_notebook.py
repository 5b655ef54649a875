"""A notebook's figures survive its export to HTML (nbclient runs it in a real kernel, nbconvert exports it)."""

from __future__ import annotations

import re

import nbformat
import pytest
from nbclient import NotebookClient
from nbconvert import HTMLExporter

FIGURES = """
import numpy as np
from transformer.viz import attention_heatmap
weights = np.full((2, 3), 1 / 3)
"""


def _exported(renderer_cell: str, tmp_path) -> str:
    cells = [renderer_cell, FIGURES, *['attention_heatmap(weights, ["a", "b"], ["x", "y", "z"]).show()'] * 2]
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code) for code in cells])
    NotebookClient(
        notebook, timeout=120, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
    ).execute()
    html, _ = HTMLExporter().from_notebook_node(notebook)
    return html


def test_exportable_figures_are_drawn_by_the_exported_html_offline(tmp_path):
    html = _exported("from transformer.viz import exportable_figures\nexportable_figures()", tmp_path)
    assert html.count("Plotly.newPlot(") == 2  # both figures are drawn by the file itself
    assert html.count("* plotly.js v") == 1  # the library inlined once, not per figure
    assert not re.search(r"<script[^>]+src=[\"'][^\"']*plot", html)  # nothing fetched (the bundle names a URL for maps)


@pytest.mark.filterwarnings("ignore:Your element with mimetype")  # nbconvert's own word for the loss
def test_the_default_renderer_leaves_nothing_an_export_draws(tmp_path):
    html = _exported("import plotly.io as pio\npio.renderers.default = 'plotly_mimetype'", tmp_path)
    assert "Plotly.newPlot(" not in html  # what the issue saw: the figures vanish from the export
