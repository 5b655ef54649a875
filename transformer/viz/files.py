"""Figures written as files for papers and slides: SVG and PDF with text as text (a vector editor opens them, a
paper's LaTeX includes them) and PNG at twice the size, the app's own figures in its own style, by kaleido with the
Chromium this machine has (nothing is downloaded)."""

from __future__ import annotations

import re
from collections.abc import Iterable
from pathlib import Path

import plotly.graph_objects as go
import plotly.io as pio

FORMATS = ("svg", "pdf", "png")
WIDTH = 1100  # px: the app's main column on a laptop; each figure keeps the height its layout gives it
PNG_SCALE = 2


class FigureExportError(RuntimeError):
    """No figure could be written: kaleido or a Chromium it can drive is missing, or it failed."""


def file_name(number: int, title: str, file_format: str) -> str:
    """`03-cross-attention.svg`: the figure's place, then its title in lower case, words joined by hyphens."""
    slug = re.sub(r"[^a-z0-9]+", "-", title.lower()).strip("-")[:60] or "figure"
    return f"{number:02d}-{slug}.{file_format}"


def write_figures(figures: Iterable[tuple[str, go.Figure]], out: Path, file_format: str) -> list[Path]:
    """Each (title, figure) written into `out` (made where missing) as `file_format`, all in one Chromium; the paths,
    in order. FigureExportError, in one line, where the exporter cannot run."""
    if file_format not in FORMATS:
        raise ValueError(f"format must be one of {', '.join(FORMATS)}, got {file_format!r}")
    out.mkdir(parents=True, exist_ok=True)
    named = [(out / file_name(number, title, file_format), figure) for number, (title, figure) in enumerate(figures, 1)]
    options = dict(format=file_format, width=WIDTH, scale=PNG_SCALE if file_format == "png" else 1)
    try:
        pio.write_images([figure for _, figure in named], [path for path, _ in named], **options)
        # A render that failed (a tab timed out on busy cores) is returned by kaleido, not raised, and plotly drops
        # it: each figure left unwritten is written again on its own, where a failure raises.
        for path, figure in named:
            if not path.is_file() or not path.stat().st_size:
                pio.write_image(figure, path, **options)
    except (ImportError, RuntimeError, ValueError, OSError) as error:
        raise FigureExportError(f"the figures could not be written: {' '.join(str(error).split())[:200]}") from None
    return [path for path, _ in named]
