"""Heavy work a page does for its visitor (integrated gradients): a few jobs at a time per server process,
queued, and abandoned when the visitor leaves.

A request for attribution of a long decode computed for minutes, and kept computing after its visitor had
gone (13 minutes, 4.1 GB); a room of visitors asking at once would each take a core's worth. Here each job
waits for a slot, shows that it waits, and stops between groups of steps once Streamlit asks the script run
to stop or rerun (a closed tab, another page).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import streamlit as st
from streamlit.runtime.scriptrunner_utils.exceptions import StopException
from streamlit.runtime.scriptrunner_utils.script_requests import ScriptRequestType
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

from transformer.analysis.attribution import AttributionStopped

HEAVY_JOBS = int(os.environ.get("TRANSFORMER_EXPLORER_HEAVY_JOBS", "1"))  # at once per process (one per core)
SLOTS = threading.BoundedSemaphore(HEAVY_JOBS)
# Token-steps of integrated gradients one request may ask (output steps x interpolation steps x tokens):
# about 25 s on a 2-core CPU. A 20-token output of a 25-token sentence takes 32 steps, 29,000.
ATTRIBUTION_BUDGET = int(os.environ.get("TRANSFORMER_EXPLORER_ATTRIBUTION_BUDGET", "100000"))


def visitor_left() -> bool:
    """Whether Streamlit asked this script run to stop or to start again: its result would not be shown."""
    context = get_script_run_ctx()
    requests = getattr(context, "script_requests", None)
    return requests is not None and requests._state != ScriptRequestType.CONTINUE  # no public reading of it


@contextmanager
def heavy_job(what: str) -> Iterator[Callable[[], bool]]:
    """Holds one of the process's slots while the block runs (waiting for one, and saying so); yields the check
    the work asks between its parts. A visitor who leaves, waiting or computing, ends the script run quietly."""
    waiting = None
    while not SLOTS.acquire(timeout=0.25):
        if waiting is None:
            waiting = st.empty()
            waiting.info(f"Waiting for other visitors' {what} to finish: this server computes {HEAVY_JOBS} at a time.")
        if visitor_left():
            raise StopException()
    try:
        if waiting is not None:
            waiting.empty()
        yield visitor_left
    except AttributionStopped:
        raise StopException() from None
    finally:
        SLOTS.release()
        _return_memory()


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, looked up once (find_library runs ldconfig); None on other C libraries."""
    name = ctypes.util.find_library("c")
    return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None


def _return_memory() -> None:
    """Gives the freed gradients' memory back to the system (glibc keeps freed arenas otherwise: 3 GB stayed)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
