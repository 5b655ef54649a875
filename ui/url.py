"""The URL names the view on screen, so that a copied link opens the same view."""

from __future__ import annotations

import streamlit as st

from transformer.model.kinds import AttentionKind
from ui.keys import MAX_CHARACTERS


def read_url_once(checkpoints: dict) -> None:
    """On a visitor's first run, take the view named in the URL (a shared link)."""
    if st.session_state.get("url_read"):
        return
    st.session_state.url_read = True
    params = st.query_params
    if params.get("ckpt") in checkpoints:
        st.session_state.checkpoint = params["ckpt"]
    if params.get("text", "").strip():
        st.session_state.text = params["text"][:MAX_CHARACTERS]
    for name in ("step", "layer", "head"):
        value = params.get(name, "")
        if value.isdigit() and int(value) >= 1:
            st.session_state[f"url_{name}"] = int(value) - 1  # applied once the result says what is in range
    if params.get("kind") in [kind.value for kind in AttentionKind]:
        st.session_state.kind = params["kind"]


def write_url() -> None:
    """The URL names the view on screen: checkpoint, sentence, step, layer, head, kind (all 1-based)."""
    state = st.session_state
    params = {"ckpt": state.get("checkpoint"), "text": state.get("applied_text", "")[:500]}
    for name in ("step", "layer", "head"):
        if isinstance(state.get(name), int):
            params[name] = str(state[name] + 1)
    if state.get("kind"):
        params["kind"] = state.kind
    st.query_params.from_dict({k: v for k, v in params.items() if v})
