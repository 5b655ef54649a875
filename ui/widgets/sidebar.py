"""The sidebar every page shares: checkpoint, device, the sentence and how to decode it (ui/services/explorer.py
keeps what it decodes)."""

from __future__ import annotations

import streamlit as st
import torch
from streamlit.delta_generator import DeltaGenerator

from transformer.decoding.result import DecodeInputError
from transformer.decoding.strategies import STRATEGIES, DecodeSettings
from transformer.io.checkpoint import Checkpoint
from transformer.io.metadata import read_metadata
from ui.services import checkpoints, explorer
from ui.services.uploads import SERVER_UPLOADS
from ui.state import keys, url
from ui.widgets.notices import open_or_explain, say_if_moved
from ui.widgets.presentation import close_sidebar_if_presenting
from ui.widgets.text import literal

FORM_KEYS = ("text", *keys.SETTINGS)
LANGUAGE_KEYS = ("source_language", "target_language")


def _settings_form() -> bool:
    with st.form("sentence_form", border=False):
        # Translate right under the sentence, above the settings: in view at 1440x900 (on a smaller one, the label
        # says how to translate without it).
        st.text_area(
            keys.SENTENCE_LABEL, height=100, max_chars=keys.MAX_TYPED_CHARACTERS, **keys.shared("text", in_form=True)
        )
        translate = st.form_submit_button(
            "Translate", type="primary", width="stretch", on_click=keys.store, args=FORM_KEYS, key="translate"
        )
        with st.expander("Decoding", expanded=False):
            st.radio("Strategy", STRATEGIES, horizontal=True, **keys.shared("strategy", in_form=True))
            ranges = keys.SETTING_RANGES
            st.slider("Beam width", *ranges["beam_width"], **keys.shared("beam_width", in_form=True))
            st.slider(
                "Length penalty (beam, 0 = none)",
                *ranges["length_penalty"],
                step=0.1,
                **keys.shared("length_penalty", in_form=True),
            )
            st.slider(
                "Temperature (sampling)", *ranges["temperature"], step=0.1, **keys.shared("temperature", in_form=True)
            )
            st.number_input("Top-k (sampling, 0 = all)", *ranges["top_k"], **keys.shared("top_k", in_form=True))
            st.number_input("Seed (sampling)", *ranges["seed"], **keys.shared("seed", in_form=True))
            st.number_input(
                "Output tokens at most (0 = twice the source + 10)",
                *ranges["max_new_tokens"],
                **keys.shared("max_new_tokens", in_form=True),
            )
        return translate


def render(navigated: bool = False) -> explorer.Explored | None:
    """Draws the sidebar; decodes when the sentence, setting or checkpoint changed. None when nothing can be shown.
    `navigated`: this run draws another page than the last (presentation mode folds the sidebar then)."""
    files = checkpoints.checkpoint_files()
    session = st.session_state
    uploads = session.get("uploads", {})
    if not session.get("url_read"):  # a session's first run
        say_if_moved()
    url.read_url_once(files)
    keys.set_defaults()
    choices = [*files, *uploads]
    if session.get("checkpoint") not in choices:
        if session.get("checkpoint") in getattr(uploads, "expired", ()):
            freed = f"{session.checkpoint} was freed: it sat unused while another visitor needed the room for uploads."
            st.sidebar.info(literal(f"{freed} Upload it again on the Checkpoints page to go on with it."))
        session.checkpoint = choices[0]

    def label(name: str) -> str:
        return checkpoints.describe_checkpoint(files[name]) if name in files else f"{name} · this session only"

    with st.sidebar:
        name = st.selectbox("Checkpoint", choices, format_func=label, **keys.shared("checkpoint"))
        language_slot = st.container()
        submitted = _settings_form()
        st.toggle("Presentation mode", help="Bigger text and figures for a projector.", **keys.shared("presentation"))
        device = (
            checkpoints.serving_device()
        )  # under the form: the sentence and Translate stay in view on a laptop's screen
        st.caption(f"Running on **{'GPU' if device.type == 'cuda' else 'CPU'}** ({device})")
    close_sidebar_if_presenting(submitted or navigated)
    if submitted or "applied_text" not in session:
        session.applied_text = session.text[: keys.MAX_CHARACTERS]
        session.applied_settings = DecodeSettings(**{name: session[name] for name in keys.SETTINGS})
    opened = open_or_explain(name)
    if opened is None:
        return None
    if opened.ledger_key is not None:  # an upload in use is not idle
        SERVER_UPLOADS.touch(opened.ledger_key)
    checkpoint, key = (opened := _choose_languages(language_slot, opened)).checkpoint, opened.key
    for problem in checkpoint.problems:
        st.sidebar.warning(literal(f"{problem}: its outputs cannot be trusted."))
    trained_on = read_metadata(checkpoint.metadata).trained_on
    if trained_on:
        st.sidebar.caption(literal(f"{trained_on} Sentences far from that data give outputs that mean little."))
    if not _decoded(checkpoint, keys.DecodeRequest(key, session.applied_text, session.applied_settings)):
        return None
    if session.get("url_branch"):
        with st.spinner("Decoding the branch ..."):
            explorer.take_branch(checkpoint, session.pop("url_branch"))
    notes = explorer.input_notes(checkpoint, session.applied_text, session.result, name if name in files else None)
    return explorer.explored(checkpoint, name, key, notes)


def _decoded(checkpoint: Checkpoint, request: keys.DecodeRequest) -> bool:
    """The session's result is this request's, decoded now if it changed; False, with the reason on the page, where
    the sentence cannot be decoded."""
    if explorer.is_kept(request):
        return True
    try:
        with st.spinner("Decoding ..."):
            explorer.keep_decoded(checkpoint, request)
    except DecodeInputError as error:
        st.warning(f"Nothing to show: {literal(str(error))}.")
        return False
    except torch.OutOfMemoryError:
        st.error("Out of memory while decoding this sentence; the server is fine. Try a shorter sentence.")
        return False
    return True


def _choose_languages(slot: DeltaGenerator, opened: checkpoints.KeyedCheckpoint) -> checkpoints.KeyedCheckpoint:
    """A language-pair model (M2M100, mBART-50) translates between the languages chosen in `slot`, from its
    tokenizer's codes; any other model as it is."""
    tokenizer, session = opened.checkpoint.tokenizer, st.session_state
    if tokenizer.target_prefix is None or len(tokenizer.code_ids) < 2:
        for name in LANGUAGE_KEYS:
            session.pop(name, None)
        return opened
    codes = sorted(tokenizer.pieces[i] for i in tokenizer.code_ids)
    for name, own in zip(LANGUAGE_KEYS, (tokenizer.source_prefix, tokenizer.target_prefix)):
        if session.get(name) not in codes:
            session[name] = own  # the model's own pair first, and after a switch to a model without that code
    left, right = slot.columns(2)
    source = left.selectbox("From", codes, format_func=checkpoints.language_label, **keys.shared(LANGUAGE_KEYS[0]))
    target = right.selectbox("Into", codes, format_func=checkpoints.language_label, **keys.shared(LANGUAGE_KEYS[1]))
    return checkpoints.with_languages(opened, source, target)
