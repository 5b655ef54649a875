"""Pickers several pages share, bound to the visitor's shared choice of kind, layer, head and step."""

from __future__ import annotations

import streamlit as st

from transformer.analysis.views import KINDS
from transformer.decoding.result import DecodeResult

from . import state


def kind_layer_head(result: DecodeResult, columns: list | None = None) -> tuple[str, int, int]:
    """Attention kind, layer and head (0-based) as radio + two selects, in the given columns or side by side."""
    kind_column, layer_column, head_column = columns or st.columns([3, 1, 1])
    st.session_state.setdefault("kind", "cross")
    kind = kind_column.radio("Attention", list(KINDS), format_func=KINDS.get, **state.shared("kind"))
    layers = (result.encoder_self if kind == "encoder" else result.cross).shape[0]
    heads = result.cross.shape[1]
    state.clamp_index("layer", layers)
    state.clamp_index("head", heads)
    layer = layer_column.selectbox("Layer", range(layers), format_func=lambda i: str(i + 1), **state.shared("layer"))
    head = head_column.selectbox("Head", range(heads), format_func=lambda i: str(i + 1), **state.shared("head"))
    return kind, layer, head


def step(result: DecodeResult, label: str = "Decoding step", label_visibility: str = "visible") -> int | None:
    """The shared decoding step (0-based) as a slider; None when the output has a single step."""
    if result.steps < 2:
        return None
    state.clamp_index("step", result.steps)
    options = list(range(result.steps))
    return st.select_slider(label, options, format_func=lambda i: f"{i + 1}", label_visibility=label_visibility,
                            **state.shared("step"))  # fmt: skip
