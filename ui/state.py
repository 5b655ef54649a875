"""What one visitor is looking at, kept in st.session_state, and the shared read-only models.

The model is loaded once per process (st.cache_resource) and only read. A decode runs
when the sentence, checkpoint or decoding choice changes; stepping, switching pages or
choosing a layer only reads the result kept in the visitor's session.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from dataclasses import fields
from pathlib import Path

import streamlit as st
import torch
from streamlit.runtime.uploaded_file_manager import UploadedFile

from transformer.decoding.forcing import teacher_force
from transformer.decoding.result import DecodeResult
from transformer.decoding.settings import DecodeSettings, decode_text
from transformer.io.checkpoint import (
    CHECKPOINT_DIR,
    DEFAULT_CHECKPOINT,
    Checkpoint,
    CheckpointError,
    CheckpointTooLarge,
    CheckpointWarning,
    load_checkpoint,
    load_checkpoint_bytes,
)
from transformer.model.kinds import AttentionKind
from transformer.text.files import text_lines

DEFAULT_SENTENCE = "A man in a red shirt is riding a bicycle down the street."
MAX_CHARACTERS = 2000  # longer text is cut before tokenizing (the model reads at most max_len tokens anyway)
MAX_TYPED_CHARACTERS = 20_000  # what the text box takes; past MAX_CHARACTERS the page says it cut the text
SETTINGS = tuple(field.name for field in fields(DecodeSettings))  # each has a sidebar widget of that name


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def checkpoint_files() -> dict[str, Path]:
    """Shipped checkpoints by name (file stem), the default first."""
    files = sorted(CHECKPOINT_DIR.glob("*.safetensors"), key=lambda p: (p != DEFAULT_CHECKPOINT, p.name))
    return {path.stem: path for path in files}


@st.cache_resource(show_spinner=False, max_entries=8)
def _load_shared(path: str, modified_ns: int, device_name: str) -> Checkpoint:
    """One copy per process of each checkpoint file version (a replaced file has a new mtime and reloads)."""
    return load_checkpoint(path, device_name)


def load(path: Path) -> Checkpoint:
    return _load_shared(str(path), path.stat().st_mtime_ns, str(device()))


@st.cache_resource(show_spinner=False, max_entries=512)
def decode_cached(_checkpoint: Checkpoint, checkpoint_key: str, text: str, settings: DecodeSettings) -> DecodeResult:
    """Results are immutable, so visitors decoding the same sentence the same way share one."""
    return decode_text(_checkpoint.model, _checkpoint.tokenizer, text, settings)


@st.cache_resource(show_spinner=False, max_entries=512)
def teacher_force_cached(_checkpoint: Checkpoint, checkpoint_key: str, text: str, target: str) -> DecodeResult:
    return teacher_force(_checkpoint.model, _checkpoint.tokenizer, text, target)


UPLOAD_LIMIT_MB = int(os.environ.get("TRANSFORMER_EXPLORER_UPLOAD_MB", "200"))  # also server.maxUploadSize
UPLOADS_PER_SESSION = 4
# What one session's uploaded models may hold together (parameters and position tables): about four times
# the shipped en-fr model, so that a few visitors' uploads cannot exhaust the server's memory.
UPLOAD_LIMIT_ELEMENTS = int(os.environ.get("TRANSFORMER_EXPLORER_UPLOAD_PARAMETERS", "32000000"))


def uploaded_lines(uploaded: UploadedFile) -> list[str]:
    """The lines of an uploaded text file, plain or gzipped, refused past the upload limit once decompressed."""
    return text_lines(uploaded.getvalue(), max_bytes=UPLOAD_LIMIT_MB * 2**20)


def add_upload(filename: str, data: bytes) -> str:
    """Validates an uploaded checkpoint and keeps it in this visitor's session only; returns its name.

    Raises CheckpointError (with the reason) for anything that is not a usable checkpoint.
    """
    limit = UPLOAD_LIMIT_MB * 1024 * 1024
    if len(data) > limit:
        raise CheckpointError(
            f"{filename} is {len(data) / 2**20:.1f} MB, over the upload limit of {UPLOAD_LIMIT_MB} MB"
        )
    uploads = st.session_state.setdefault("uploads", {})
    digest = hashlib.sha256(data).hexdigest()[:16]
    name = f"{Path(filename).stem} (uploaded)"
    if name not in uploads and len(uploads) >= UPLOADS_PER_SESSION:
        raise CheckpointError(f"at most {UPLOADS_PER_SESSION} uploads per session; reload the page to start afresh")
    held = sum(kept.config.element_count() for other, (kept, _) in uploads.items() if other != name)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", CheckpointWarning)
        try:
            checkpoint = load_checkpoint_bytes(data, device(), max_elements=UPLOAD_LIMIT_ELEMENTS - held)
        except CheckpointTooLarge as error:
            others = f"; your other uploads hold {held:,} of the {UPLOAD_LIMIT_ELEMENTS:,}" if held else ""
            raise CheckpointTooLarge(f"{error} for uploads in one session{others}") from None
    uploads[name] = (checkpoint, f"upload:{digest}")
    st.session_state.upload_warnings = [str(w.message) for w in caught if issubclass(w.category, CheckpointWarning)]
    return name


def checkpoint_key(path: Path) -> str:
    return f"{path}:{path.stat().st_mtime_ns}"


def shared(name: str, in_form: bool = False) -> dict:
    """Keyword arguments binding a widget to the shared value `name`.

    Streamlit gives a widget a new identity on each page (and forgets its value there),
    so the value lives under its own key: the widget starts from it and writes back to
    it on change, or, inside a form, when the form's submit button calls store().
    """
    widget_key = f"widget_{name}"
    if name in st.session_state:
        st.session_state[widget_key] = st.session_state[name]
    return {"key": widget_key} if in_form else {"key": widget_key, "on_change": store, "args": (name,)}


def store(*names: str) -> None:
    for name in names:
        st.session_state[name] = st.session_state[f"widget_{name}"]


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


def clamp_index(name: str, size: int, default: int = 0) -> int:
    """A 0-based index widget value kept inside range(size) (a new result may be shorter); a URL value first."""
    pending = st.session_state.pop(f"url_{name}", None)
    value = pending if pending is not None else st.session_state.get(name, default)
    st.session_state[name] = max(0, min(int(value), size - 1))
    return st.session_state[name]
