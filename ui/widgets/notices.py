"""What a page says of the server's side: a checkpoint that cannot be opened, a visitor moved from a replica that
stopped. The services only raise or answer; these draw."""

from __future__ import annotations

import streamlit as st
import torch

from transformer.io.checkpoint import CheckpointError
from ui.services.checkpoints import KeyedCheckpoint, open_checkpoint
from ui.state.replica import moved_here
from ui.widgets.text import literal

MOVED = (
    "The server that held your session stopped, so you are now on another one: your view was reset to "
    "what the page's link holds (sentence, settings and view), and uploads made before must be made again."
)


def open_or_explain(name: str) -> KeyedCheckpoint | None:
    """open_checkpoint behind a spinner (a first load takes seconds); None, with the reason on the page,
    when the file cannot be used (corrupt, refused, removed, or no memory left for it)."""
    try:
        with st.spinner(f"Loading {name} ..."):
            return open_checkpoint(name)
    except (CheckpointError, OSError, MemoryError, torch.OutOfMemoryError) as error:
        reason = (str(error) or "the server is out of memory").removeprefix(f"{name}: ")  # a reader's own naming
        st.error(literal(f"Checkpoint {name} cannot be used: {reason}"))
        return None


def say_if_moved() -> None:
    """On a session's first run: a note when the visitor came from a replica that stopped."""
    if moved_here():
        st.toast(MOVED, icon=":material/sync_problem:", duration="infinite")
