"""Word alignments drawn: a method's matrix with the gold links and the links it extracted marked on it."""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go

from transformer.analysis.alignment import GoldAlignment, Link
from transformer.text.pieces import WORD_START
from transformer.viz.matrices import matrix_heatmap
from transformer.viz.style import LEGEND_ABOVE, axis_labels

SURE, POSSIBLE, EXTRACTED = "#e4572e", "#e4572e", "#111111"


def axis_words(words: list[str]) -> list[str]:
    """Words of a text file as the figures' axes show them (each read as a whole word, repeats kept apart)."""
    return axis_labels([WORD_START + word for word in words])


def _links(links: frozenset[Link], src: list[str], tgt: list[str], name: str, marker: dict) -> go.Scatter:
    ordered = sorted(links)
    return go.Scatter(
        x=[src[i] for i, _ in ordered],
        y=[tgt[j] for _, j in ordered],
        mode="markers",
        name=name,
        marker=marker,
        hovertemplate=f"{name}<br>%{{y}} ← %{{x}}<extra></extra>",
    )


def alignment_heatmap(
    matrix: np.ndarray,
    src_words: list[str],
    tgt_words: list[str],
    gold: GoldAlignment,
    extracted: frozenset[Link],
    title: str,
) -> go.Figure:
    """Target words (rows) x source words, the method's weights as colour; gold sure links as squares, possible
    ones as circles, the extracted links as crosses: a cross inside a square is a hit."""
    src, tgt = axis_words(src_words), axis_words(tgt_words)
    fig = matrix_heatmap(
        matrix,
        title,
        [WORD_START + w for w in tgt_words],
        [WORD_START + w for w in src_words],
        x_title="source word",
        y_title="target word",
        probabilities=True,
    )
    size = 18 if max(len(src), len(tgt)) <= 20 else 11
    fig.add_trace(
        _links(gold.sure, src, tgt, "gold: sure", dict(symbol="square-open", size=size, color=SURE, line_width=2.5))
    )
    fig.add_trace(
        _links(
            gold.possible - gold.sure,
            src,
            tgt,
            "gold: possible",
            dict(symbol="circle-open", size=size, color=POSSIBLE, line_width=2),
        )
    )
    fig.add_trace(
        _links(
            extracted, src, tgt, "extracted", dict(symbol="x-thin-open", size=size * 0.6, color=EXTRACTED, line_width=2)
        )
    )
    fig.update_layout(legend=LEGEND_ABOVE, showlegend=True, margin_t=90)
    return fig
