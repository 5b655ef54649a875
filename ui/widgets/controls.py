"""Pickers several pages share, bound to the visitor's shared choice of kind, layer, head and step."""

from __future__ import annotations

import streamlit as st

from transformer.decoding.result import DecodeResult
from transformer.model.heads import Head
from transformer.model.kinds import AttentionKind
from ui.state import keys


def attention_kind(container=st, horizontal: bool = False, page_default: AttentionKind | None = None) -> AttentionKind:
    """The shared choice of attention kind as a radio (cross-attention until the visitor picks another).

    A page may open on its own `page_default` until the visitor (or a link) chooses a kind: shown on that page
    only, the shared choice the other pages read is left as it was.
    """
    st.session_state.setdefault("kind", AttentionKind.CROSS.value)
    binding = keys.shared("kind")
    if page_default is not None and not st.session_state.get("kind_chosen"):
        st.session_state[binding["key"]] = page_default.value
    options = [kind.value for kind in AttentionKind]
    choice = container.radio(
        "Attention", options, format_func=lambda value: AttentionKind(value).title, horizontal=horizontal, **binding
    )
    return AttentionKind(choice)


def words_toggle(container=st) -> bool:
    """The shared choice, on every page that draws attention maps, of pieces merged into words."""
    return container.toggle(
        "Merge pieces into words",
        help="Sum over the pieces of a key word, mean over those of a query word.",
        **keys.shared("words"),
    )


def content_toggle(container=st, note: str = "") -> bool:
    """The shared choice of attention maps without their sink keys (Attention maps and the explorer's step view)."""
    return container.toggle(
        "Content only",
        **keys.shared("attention_content"),
        help="Drops </s>, <s> and punctuation as keys, where heads park weight they do not use (attention sinks), and "
        "renormalises each row over the words left." + note,
    )


def kind_layer_head(
    result: DecodeResult, columns: list | None = None, page_default: AttentionKind | None = None
) -> Head:
    """The shared head: its kind as a radio, its layer and index as two selects, in the given columns or side by
    side."""
    kind_column, layer_column, head_column = columns or st.columns([3, 1, 1])
    kind = attention_kind(kind_column, page_default=page_default)
    return Head(kind, *layer_head(result, kind, layer_column, head_column))


def layer_head(result: DecodeResult, kind: AttentionKind, layer_column, head_column) -> tuple[int, int]:
    """The shared layer and head (0-based) of one attention kind, as two selects kept inside its range."""
    layers, heads = result.maps(kind).shape[:2]
    keys.clamp_index("layer", layers)
    keys.clamp_index("head", heads)
    layer = layer_column.selectbox("Layer", range(layers), format_func=lambda i: str(i + 1), **keys.shared("layer"))
    head = head_column.selectbox("Head", range(heads), format_func=lambda i: str(i + 1), **keys.shared("head"))
    return layer, head


def step(result: DecodeResult, label: str = "Decoding step", last_until_stepped: bool = False) -> int | None:
    """The shared decoding step (0-based) as a slider; None when the output has a single step.

    With last_until_stepped, a page that draws the whole decode until the visitor steps shows the last
    step on the slider meanwhile (the shared step stays unchosen until the slider moves).
    """
    if result.steps < 2:
        return None
    keys.clamp_index("step", result.steps)
    options = list(range(result.steps))
    widget = keys.shared("step")
    if last_until_stepped and not st.session_state.get("stepped"):
        st.session_state[widget["key"]] = result.steps - 1
    return st.select_slider(label, options, format_func=lambda i: f"{i + 1}", **widget)
