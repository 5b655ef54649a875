"""What visitors upload: checkpoints kept in their own session only, and text files; every upload bounded."""

from __future__ import annotations

import hashlib
import os
import threading
import warnings
import weakref
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
# What all sessions' uploads may hold together in this server process: every new tab has its own allowance
# above, so without this a room of tabs could fill the memory. About 0.5 GB of float32 weights by default.
SERVER_UPLOAD_LIMIT_ELEMENTS = int(os.environ.get("TRANSFORMER_EXPLORER_SERVER_UPLOAD_PARAMETERS", "128000000"))


class UploadLedger:
    """The elements of every uploaded model alive in this process, whichever session holds it.

    An entry leaves when its model is freed: when its session replaces it, or when Streamlit drops the session
    (a closed tab, after Streamlit's window for reconnecting).
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[int, int] = {}
        self._next = 0

    def held(self) -> int:
        with self._lock:
            return sum(self._held.values())

    def reserve(self, elements: int, limit: int) -> int | None:
        """A key for `elements` more, or None if they do not fit under `limit` beside what is held."""
        with self._lock:
            if sum(self._held.values()) + elements > limit:
                return None
            self._next += 1
            self._held[self._next] = elements
            return self._next

    def release(self, key: int) -> None:
        with self._lock:
            self._held.pop(key, None)


SERVER_UPLOADS = UploadLedger()


# Of an uploaded text file, the pages read at most the lines they use (no page uses more than 2,000) and refuse a
# line longer than a paragraph: a 20 MB "sentence" took 18 s and 2.6 GB to encode before it was skipped.
UPLOAD_MAX_LINES = 100_000
UPLOAD_MAX_LINE_BYTES = 20_000


def uploaded_lines(uploaded: UploadedFile, max_lines: int = UPLOAD_MAX_LINES) -> list[str]:
    """The first max_lines lines of an uploaded text file, plain or gzipped, read as a stream (the rest is never
    decompressed); refused past the upload limit once decompressed, or for a line longer than a paragraph."""
    return text_lines(uploaded.getvalue(), UPLOAD_LIMIT_MB * 2**20, min(max_lines, UPLOAD_MAX_LINES),
                      UPLOAD_MAX_LINE_BYTES)  # fmt: skip


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
    server_room = SERVER_UPLOAD_LIMIT_ELEMENTS - SERVER_UPLOADS.held()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", CheckpointWarning)  # kept as checkpoint.problems, shown with it
            checkpoint = load_checkpoint_bytes(
                data, device(), max_elements=min(UPLOAD_LIMIT_ELEMENTS - held, max(server_room, 0))
            )
    except CheckpointTooLarge as error:
        if UPLOAD_LIMIT_ELEMENTS - held > server_room:
            raise _server_full(error) from None
        others = f"; your other uploads hold {held:,} of the {UPLOAD_LIMIT_ELEMENTS:,}" if held else ""
        raise CheckpointTooLarge(f"{error} for uploads in one session{others}") from None
    except (MemoryError, torch.OutOfMemoryError):
        raise CheckpointError("the server has no memory to spare for this model now; try a smaller one") from None
    key = SERVER_UPLOADS.reserve(checkpoint.config.element_count(), SERVER_UPLOAD_LIMIT_ELEMENTS)
    if key is None:  # another visitor's upload took the room meanwhile
        raise _server_full(CheckpointTooLarge(f"{filename} does not fit"))
    weakref.finalize(checkpoint.model, SERVER_UPLOADS.release, key)
    uploads[name] = KeyedCheckpoint(checkpoint, f"upload:{digest}")
    return name


def _server_full(error: CheckpointError) -> CheckpointTooLarge:
    return CheckpointTooLarge(
        f"{error}: other visitors' uploads hold {SERVER_UPLOADS.held():,} of the {SERVER_UPLOAD_LIMIT_ELEMENTS:,} "
        "parameters this server keeps for uploads; try again in a few minutes (uploads are freed when their "
        "session ends), or use a smaller model"
    )
