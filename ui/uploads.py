"""What visitors upload: checkpoints kept in their own session only, and text files; every upload bounded."""

from __future__ import annotations

import hashlib
import os
import warnings
from pathlib import Path

import streamlit as st
import torch
from streamlit.runtime.uploaded_file_manager import UploadedFile

from transformer.io.checkpoint import (
    CheckpointError,
    CheckpointTooLarge,
    CheckpointWarning,
    load_checkpoint_bytes,
)
from transformer.text.files import text_lines
from ui.models import KeyedCheckpoint, device

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
    held = sum(kept.checkpoint.config.element_count() for other, kept in uploads.items() if other != name)
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CheckpointWarning)  # kept as checkpoint.problems, shown with it
            checkpoint = load_checkpoint_bytes(data, device(), max_elements=UPLOAD_LIMIT_ELEMENTS - held)
    except CheckpointTooLarge as error:
        others = f"; your other uploads hold {held:,} of the {UPLOAD_LIMIT_ELEMENTS:,}" if held else ""
        raise CheckpointTooLarge(f"{error} for uploads in one session{others}") from None
    except (MemoryError, torch.OutOfMemoryError):
        raise CheckpointError("the server has no memory to spare for this model now; try a smaller one") from None
    uploads[name] = KeyedCheckpoint(checkpoint, f"upload:{digest}")
    return name
