"""The sidebar every page shares: checkpoint, device, the sentence and how to decode it."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import streamlit as st
import torch
from streamlit.delta_generator import DeltaGenerator
from streamlit.runtime.pages_manager import PagesManager

from transformer.decoding.degenerate import UNSURE_BELOW, decode_notes
from transformer.decoding.forcing import branch
from transformer.decoding.result import DecodeInputError, DecodeResult, truncation_note
from transformer.decoding.settings import STRATEGIES, DecodeSettings
from transformer.io.checkpoint import Checkpoint
from transformer.io.metadata import read_metadata
from ui.services import checkpoints, models
from ui.services.uploads import SERVER_UPLOADS
from ui.state import keys, url
from ui.state.identity import ResultIdentity
from ui.widgets.notices import open_or_explain, say_if_moved
from ui.widgets.presentation import close_sidebar_if_presenting, presentation_style, sidebar_state
from ui.widgets.text import literal
from ui.widgets.welcome import first_steps


@dataclass(frozen=True)
class Explored:
    """What the pages draw: the loaded checkpoint and the visitor's current result."""

    checkpoint: Checkpoint
    checkpoint_name: str
    checkpoint_key: str
    text: str  # the sentence as decoded (after any cut to MAX_CHARACTERS)
    result: DecodeResult  # the what-if branch when one is being explored, else the decode
    original: DecodeResult
    notes: tuple[str, ...]  # what the visitor should know about their input

    @property
    def identity(self) -> ResultIdentity:
        """The result's identity, for the caches of what is computed from it and for the players."""
        return ResultIdentity.of(self.checkpoint_key, self.result)


FORM_KEYS = ("text", *keys.SETTINGS)
LANGUAGE_KEYS = ("source_language", "target_language")
ICON = str(Path(__file__).parents[1] / "static" / "icon.png")  # served by the app: an emoji or :material: icon is not


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


def _input_notes(checkpoint: Checkpoint, text: str, result: DecodeResult, shipped: str | None) -> tuple[str, ...]:
    """`shipped`: the name of the shipped file in use (None for an upload), whose own unsure threshold may be known."""
    notes = []
    if len(st.session_state.get("text", "")) > keys.MAX_CHARACTERS:
        notes.append(f"The text is longer than {keys.MAX_CHARACTERS:,} characters; only its beginning was read.")
    if result.truncated:
        notes.append(truncation_note(checkpoint.config.max_len, len(result.src_ids) - 1))
    measured = UNSURE_BELOW.get(shipped)
    unsure_below = UNSURE_BELOW[checkpoints.DEFAULT_CHECKPOINT.stem] if measured is None else measured
    eos = checkpoint.tokenizer.id_to_piece(checkpoint.config.eos_id)
    source = checkpoints.language_display(read_metadata(checkpoint.metadata).src_lang)
    notes += decode_notes(result, eos, unsure_below, calibrated=measured is not None, source_language=source)
    unknown = checkpoint.tokenizer.unknown_parts(text)
    if unknown:
        shown = " ".join(repr(c) for c in unknown[:20])
        notes.append(f"Not in this model's vocabulary, read as the unknown token <unk>: {shown}")
    return tuple(notes)


def render() -> Explored | None:
    """Draws the sidebar; decodes when the sentence, setting or checkpoint changed. None when nothing can be shown."""
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
    close_sidebar_if_presenting(submitted)
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
    text, settings = session.applied_text, session.applied_settings
    if not _decoded(checkpoint, key, text, settings):
        return None
    result = session.result
    if session.get("url_branch"):
        take_branch(checkpoint, session.pop("url_branch"))
    active = session.get("branch") if session.get("show_branch") and session.get("branch") else result
    notes = _input_notes(checkpoint, text, result, name if name in files else None)
    return Explored(checkpoint, name, key, text, active, result, notes)


def _decoded(checkpoint: Checkpoint, key: str, text: str, settings: DecodeSettings) -> bool:
    """The session's result is this request's, decoded now if it changed (which ends a what-if branch); False, with
    the reason on the page, where the sentence cannot be decoded."""
    session = st.session_state
    request = keys.DecodeRequest(key, text, settings)
    if session.get("result_request") == request:
        return True
    try:
        with st.spinner("Decoding ..."):
            result = models.decode_cached(checkpoint, key, text, settings)
    except DecodeInputError as error:
        st.warning(f"Nothing to show: {literal(str(error))}.")
        return False
    except torch.OutOfMemoryError:
        st.error("Out of memory while decoding this sentence; the server is fine. Try a shorter sentence.")
        return False
    session.result_request = request
    session.result = result
    session.pop("branch", None)
    session.pop("branch_from", None)
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


def take_branch(checkpoint: Checkpoint, chain: tuple[tuple[int, int], ...]) -> bool:
    """Shows the what-if branch reached from the session's result by `chain`, (step, token id) pairs each
    taking one of its output's candidates; False, changing nothing, where a pair (a link's) is no candidate."""
    output = st.session_state.result
    with st.spinner("Decoding the branch ..."):
        for step, token in chain:
            output = _branched(checkpoint, output, step, token)
            if output is None:
                return False
    _show_branch(output, chain)
    return True


def take_prefix(checkpoint: Checkpoint, prefix: list[int]) -> bool:
    """Shows the output that starts with `prefix` (a beam hypothesis) and goes on greedily, as the chain of what-if
    branches from the session's result that forces it (one where the output so far first differs), so that its
    link opens it as any branch's does; False, changing nothing, where a token is no candidate."""
    output, chain = st.session_state.result, []
    with st.spinner("Decoding the branch ..."):
        for step, token in enumerate(prefix):
            if step < output.steps and output.tgt_ids[step] == token:
                continue
            output = _branched(checkpoint, output, step, token)
            if output is None:
                return False
            chain.append((step, token))
    _show_branch(output, tuple(chain))
    return True


def _branched(checkpoint: Checkpoint, output: DecodeResult, step: int, token: int) -> DecodeResult | None:
    """The what-if branch of `output` taking `token` at `step`; None where it is not one of that step's candidates."""
    if not (0 <= step < output.steps and token in output.topk_ids[step].tolist()):
        return None
    return branch(checkpoint.model, checkpoint.tokenizer, output, step, token)


def _show_branch(output: DecodeResult, chain: tuple[tuple[int, int], ...]) -> None:
    """Shows `output`, reached by `chain` (none: the session's result itself)."""
    session = st.session_state
    if chain:
        session.branch, session.branch_from, session.show_branch = output, chain, True
    else:
        session.show_branch = False


def page_frame(title: str) -> Explored:
    """Called first by every page: the page setup, its title and the shared sidebar; where there is nothing to show
    (an empty sentence, say), the page says why, offers sentences to try and names no sentence in its link, then
    stops.

    Each page draws the frame itself (rather than the navigation script) so that a page
    opened directly by its URL is whole however Streamlit reaches it.
    """
    if PagesManager.uses_pages_directory and not st.session_state.get("url_read"):
        # A server's first visitor opened a page by its URL: Streamlit ran the page alone, as its old
        # pages/-folder apps, with file names for a menu. Run app.py's navigation instead (on a
        # session's first run only, where a rerun loses no click).
        PagesManager.uses_pages_directory = False
        st.rerun()
    st.set_page_config(
        page_title="Transformer Explorer", page_icon=ICON, layout="wide", initial_sidebar_state=sidebar_state()
    )
    st.title(title)
    explored = render()
    presentation_style()
    if explored is None:
        first_steps(st.session_state.get("checkpoint", ""))
        url.write_url()
        st.stop()
    return explored
