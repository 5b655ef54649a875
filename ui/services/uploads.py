"""What visitors upload: checkpoints kept in their own session only, and text files; every upload bounded."""

from __future__ import annotations

import collections
import hashlib
import hmac
import os
import threading
import time
import warnings
import weakref
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import streamlit as st
import torch
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx
from streamlit.runtime.uploaded_file_manager import UploadedFile

from transformer.io.checkpoint import (
    CheckpointError,
    CheckpointTooLarge,
    CheckpointWarning,
    load_checkpoint_bytes,
    load_cost,
)
from transformer.model.config import TransformerConfig
from transformer.text.files import iter_text_lines, text_lines
from ui.services.checkpoints import KeyedCheckpoint, serving_device
from ui.services.work import UPLOAD_KEY, return_memory

UPLOAD_LIMIT_MB = int(os.environ.get("TRANSFORMER_EXPLORER_UPLOAD_MB", "200"))  # also server.maxUploadSize


UPLOADS_PER_SESSION = 4


# What one session's uploaded models may hold together (parameters and position tables): about four times
# the shipped caption model, so that a few visitors' uploads cannot exhaust the server's memory.
UPLOAD_LIMIT_ELEMENTS = int(os.environ.get("TRANSFORMER_EXPLORER_UPLOAD_PARAMETERS", "32000000"))
# What all sessions' uploads may hold together in this server process: every new tab has its own allowance
# above, so without this a room of tabs could fill the memory. About 0.5 GB of float32 weights by default.
SERVER_UPLOAD_LIMIT_ELEMENTS = int(os.environ.get("TRANSFORMER_EXPLORER_SERVER_UPLOAD_PARAMETERS", "128000000"))
# Attention maps an uploaded model draws per step (encoder self, decoder self and cross, every head): a step view
# holds each for every step. NLLB-600M draws 576; a very deep, wide model's step view held hundreds of MB (measured:
# docs/performance.md).
UPLOAD_MAX_ATTENTION_MAPS = 1024


# What one visitor's uploads may hold together, across all their tabs (a visitor is a browser: its XSRF cookie).
# Five tabs of one visitor held 123.8M of the server's 128M, refusing everyone else's uploads while they stayed open.
VISITOR_UPLOAD_LIMIT_ELEMENTS = int(
    os.environ.get("TRANSFORMER_EXPLORER_VISITOR_UPLOAD_PARAMETERS", str(UPLOAD_LIMIT_ELEMENTS))
)
# What the uploads from one address may hold together: fresh cookies make new visitors, and 8 sessions of one
# person held 127.27M of the server's 128M. Twice a visitor's share: a few people behind one address still upload.
ADDRESS_UPLOAD_LIMIT_ELEMENTS = int(
    os.environ.get("TRANSFORMER_EXPLORER_ADDRESS_UPLOAD_PARAMETERS", str(2 * VISITOR_UPLOAD_LIMIT_ELEMENTS))
)
# The token scripts/serve.sh gives its nginx and its replicas: X-Forwarded-For is trusted on a request carrying it,
# and on no other (not from loopback either: any program on the machine connects from there).
PROXY_TOKEN = os.environ.get("TRANSFORMER_EXPLORER_PROXY_TOKEN", "")
# An upload its session has not used for this long gives its place to a visitor whose upload does not fit.
UPLOAD_IDLE_SECONDS = float(os.environ.get("TRANSFORMER_EXPLORER_UPLOAD_IDLE_SECONDS", "900"))


class Uploads(dict):
    """A session's uploaded checkpoints by name (KeyedCheckpoint values), and the names of those the server freed
    after they sat unused while another visitor needed the room (the page says so)."""

    def __init__(self) -> None:
        super().__init__()
        self.expired: list[str] = []


@dataclass(frozen=True)
class Uploader:
    """Who uploads: a browser (visitor_id), the address it connects from (client_address) and its session."""

    visitor: str
    address: str = ""
    session: str = ""


@dataclass
class _Held:
    """One uploaded model alive in this process: what it holds, whose it is, and when its session last used it."""

    elements: int
    uploader: Uploader
    uploads: weakref.ref  # the session's Uploads
    name: str
    used: float


class UploadLedger:
    """The elements of every uploaded model alive in this process, whichever session holds it, by visitor.

    An entry leaves when its model is freed (its session replaces it, or Streamlit drops the session after its
    window for reconnecting), or when it sat unused for UPLOAD_IDLE_SECONDS and another upload needs its room.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._held: dict[int, _Held] = {}
        self._next = 0
        self._freed: collections.deque[int] = collections.deque()  # released keys, taken out under the lock

    @contextmanager
    def _locked(self) -> Iterator[None]:
        """The ledger's lock, its entries freed since the last call taken out first."""
        with self._lock:
            while self._freed:
                self._held.pop(self._freed.popleft(), None)
            yield

    def held(self, visitor: str | None = None) -> int:
        with self._locked():
            return sum(e.elements for e in self._held.values() if visitor in (None, e.uploader.visitor))

    def reserve(self, elements: int, limit: int, uploader: Uploader, uploads: Uploads, name: str) -> int | None:
        """A key for `elements` more of this uploader's, or None if they do not fit under `limit` beside what is held
        (idle uploads and those of closed sessions give way first), or beside the uploader's own under its
        browser's (VISITOR_UPLOAD_LIMIT_ELEMENTS) or its address's (ADDRESS_UPLOAD_LIMIT_ELEMENTS) share."""
        with self._locked():
            gone = [self._held.pop(key) for key, e in list(self._held.items()) if not session_open(e.uploader)]
            idle = None if self._over_a_share(elements, uploader) else self._make_room(elements, limit)
            key = None
            if idle is not None:
                self._next += 1
                self._held[self._next] = _Held(elements, uploader, weakref.ref(uploads), name, time.monotonic())
                key = self._next
        _expire([*gone, *(idle or [])])  # outside the lock: freeing a model releases its entry (already gone)
        return key

    def _over_a_share(self, elements: int, uploader: Uploader) -> bool:
        shares = (("visitor", VISITOR_UPLOAD_LIMIT_ELEMENTS), ("address", ADDRESS_UPLOAD_LIMIT_ELEMENTS))
        return any(
            sum(e.elements for e in self._held.values() if getattr(e.uploader, field) == getattr(uploader, field))
            + elements
            > share
            for field, share in shares
        )

    def _make_room(self, elements: int, limit: int) -> list[_Held] | None:
        """The idle entries, oldest first, that must go for `elements` to fit under limit (removed here), or None
        (nothing removed) if even their going would not make room."""
        total = sum(e.elements for e in self._held.values())
        idle_before = time.monotonic() - UPLOAD_IDLE_SECONDS
        idle = sorted((e.used, key) for key, e in self._held.items() if e.used < idle_before)
        chosen = []
        for _, key in idle:
            if total + elements <= limit:
                break
            total -= self._held[key].elements
            chosen.append(key)
        if total + elements > limit:
            return None
        return [self._held.pop(key) for key in chosen]

    def held_from(self, address: str) -> int:
        with self._locked():
            return sum(e.elements for e in self._held.values() if e.uploader.address == address)

    def touch(self, key: int) -> None:
        """The upload was used now (its session chose it, or read it): not idle."""
        with self._locked():
            if key in self._held:
                self._held[key].used = time.monotonic()

    def release(self, key: int) -> None:
        """The model of `key` was freed. Its finalizer calls this, and the garbage collector runs finalizers in
        whichever thread allocates, inside this ledger's lock too (taking the lock there hung the thread, and every
        upload after it): the key waits in a queue, which takes an append without a lock, until the next call."""
        self._freed.append(key)


def _expire(entries: list[_Held]) -> None:
    """Takes each entry's upload out of its session (its tab says it was freed when next drawn)."""
    for entry in entries:
        session_uploads = entry.uploads()
        if session_uploads is not None and session_uploads.pop(entry.name, None) is not None:
            session_uploads.expired.append(entry.name)


def session_open(uploader: Uploader) -> bool:
    """Whether the uploader's session still has its browser connected: a closed tab's uploads give their share back
    at once, where Streamlit keeps the session for minutes in case it reconnects. True where no server runs."""
    from streamlit.runtime import Runtime

    return not (uploader.session and Runtime.exists()) or Runtime.instance().is_active_session(uploader.session)


def client_address() -> str:
    """The address the visitor connects from: the connection's own; behind the classroom's proxy (a request carrying
    its PROXY_TOKEN) the one nginx appends last to X-Forwarded-For, which a client cannot choose; and for any other
    connection from this machine "local", whatever its headers claim (an SSH tunnel or another user of a shared host
    claimed a new address a session, and eight of them held the whole server's upload budget)."""
    own = st.context.ip_address  # None for a connection from this machine
    if own:
        return own
    headers = st.context.headers
    if not PROXY_TOKEN or not hmac.compare_digest(headers.get("X-Explorer-Proxy") or "", PROXY_TOKEN):
        return "local"
    forwarded = headers.get("X-Forwarded-For") or ""
    return forwarded.rsplit(",", 1)[-1].strip()[:64] or "local"


def visitor_id() -> str:
    """Who is uploading: a hash of the browser's XSRF cookie (the same in all its tabs), else of this session."""
    cookie = st.context.cookies.get("_streamlit_xsrf")
    if isinstance(cookie, str) and cookie:
        return "browser:" + hashlib.sha256(cookie.encode()).hexdigest()[:16]
    context = get_script_run_ctx()
    return "session:" + (context.session_id if context else "")


SERVER_UPLOADS = UploadLedger()


# Of an uploaded text file, the pages read at most the lines they use (no page uses more than 2,000) and refuse a
# line longer than a paragraph, which costs seconds and gigabytes to encode (measured: docs/performance.md).
UPLOAD_MAX_LINES = 100_000
UPLOAD_MAX_LINE_BYTES = 20_000


def uploaded_lines(uploaded: UploadedFile, max_lines: int = UPLOAD_MAX_LINES) -> list[str]:
    """The first max_lines lines of an uploaded text file, plain or gzipped, read as a stream (the rest is never
    decompressed); refused past the upload limit once decompressed, or for a line longer than a paragraph."""
    uploaded.seek(0)  # read in place as a stream: no copy of the file
    return text_lines(uploaded, UPLOAD_LIMIT_MB * 2**20, min(max_lines, UPLOAD_MAX_LINES), UPLOAD_MAX_LINE_BYTES)


def uploaded_line_stream(uploaded: UploadedFile) -> Iterator[str]:
    """uploaded_lines one at a time, for a reader that bounds what it keeps itself (a treebank's sentences)."""
    uploaded.seek(0)
    return iter_text_lines(uploaded, UPLOAD_LIMIT_MB * 2**20, UPLOAD_MAX_LINE_BYTES)


def upload_cost(data: bytes | memoryview) -> tuple[TransformerConfig, int]:
    """An uploaded checkpoint's config and its share of the budgets, in numbers of 4 bytes, from its header alone:
    what its model will hold (load_cost) and the file's own bytes, which Streamlit keeps while the upload is open."""
    config, elements = load_cost(data)
    return config, elements + len(data) // 4


def add_upload(uploaded: UploadedFile) -> str:
    """Validates an uploaded checkpoint and keeps it in this visitor's session only; returns its name.

    What the upload will hold is read from the header and reserved in this session's, this visitor's and the
    server's budgets before the file is copied, hashed or built (a file's parameters alone undercount it: a large
    tokenizer holds many times its bytes; measured: docs/performance.md). Raises CheckpointError (with the reason)
    for anything that is not a usable checkpoint.
    """
    filename, limit = uploaded.name, UPLOAD_LIMIT_MB * 1024 * 1024
    if uploaded.size > limit:
        raise CheckpointError(
            f"{filename} is {uploaded.size / 2**20:.1f} MB, over the upload limit of {UPLOAD_LIMIT_MB} MB"
        )
    uploads = st.session_state.setdefault("uploads", Uploads())
    name = f"{Path(filename).stem} (uploaded)"
    if name not in uploads and len(uploads) >= UPLOADS_PER_SESSION:
        raise CheckpointError(f"at most {UPLOADS_PER_SESSION} uploads per session; reload the page to start afresh")
    with uploaded.getbuffer() as held_bytes:  # the bytes Streamlit holds, read in place
        config, cost = upload_cost(held_bytes)
        held = sum(kept.cost for other, kept in uploads.items() if other != name)  # this session's other uploads
        _check_session_share(config, cost, held)
        key = _reserve(filename, cost, held, uploads, name)
        try:
            digest = hashlib.sha256(held_bytes).hexdigest()[:16]
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", CheckpointWarning)  # kept as checkpoint.problems, shown with it
                checkpoint = load_checkpoint_bytes(bytes(held_bytes), serving_device())
        except (MemoryError, torch.OutOfMemoryError):
            SERVER_UPLOADS.release(key)
            raise CheckpointError("the server has no memory to spare for this model now; try a smaller one") from None
        except BaseException:
            SERVER_UPLOADS.release(key)
            raise
    weakref.finalize(checkpoint.model, _freed, key)
    uploads[name] = KeyedCheckpoint(checkpoint, f"{UPLOAD_KEY}{digest}", cost, key)
    return name


def _check_session_share(config: TransformerConfig, cost: int, held: int) -> None:
    """CheckpointTooLarge for a model that draws too many maps a step or does not fit this session's share."""
    maps = (config.n_encoder_layers + 2 * config.n_decoder_layers) * config.n_heads
    if maps > UPLOAD_MAX_ATTENTION_MAPS:
        raise CheckpointTooLarge(
            f"the model draws {maps:,} attention maps a step (layers x heads, self and cross), "
            f"over the {UPLOAD_MAX_ATTENTION_MAPS:,} an upload may draw here"
        )
    if held + cost > UPLOAD_LIMIT_ELEMENTS:
        others = f"; your other uploads hold {held:,} of the {UPLOAD_LIMIT_ELEMENTS:,}" if held else ""
        raise CheckpointTooLarge(
            f"the model is too large here: it holds {cost:,} numbers (parameters, position "
            f"tables and tokenizer, and the file while it is open), over the limit of {UPLOAD_LIMIT_ELEMENTS - held:,} "
            f"for uploads in one session{others}"
        )


def _reserve(filename: str, cost: int, held: int, uploads: Uploads, name: str) -> int:
    """The upload's entry in the server's ledger; CheckpointTooLarge where this visitor's or the server's share has
    no room (`held`: what this session's other uploads hold)."""
    context = get_script_run_ctx()
    uploader = Uploader(visitor_id(), client_address(), context.session_id if context else "")
    key = SERVER_UPLOADS.reserve(cost, SERVER_UPLOAD_LIMIT_ELEMENTS, uploader, uploads, name)
    if key is None:
        raise _no_room(CheckpointTooLarge(f"{filename} does not fit"), uploader, held)
    return key


def _freed(key: int) -> None:
    """An uploaded model was freed (its session replaced it or ended): its budget, and its memory to the system."""
    SERVER_UPLOADS.release(key)
    return_memory()


def _no_room(error: CheckpointError, uploader: Uploader, held_here: int) -> CheckpointTooLarge:
    """Why an upload did not fit: this visitor's other tabs, or other sessions from its address, hold their share;
    or other visitors hold the server's."""
    from_address = SERVER_UPLOADS.held_from(uploader.address)
    if from_address + held_here >= ADDRESS_UPLOAD_LIMIT_ELEMENTS // 2 and from_address > SERVER_UPLOADS.held(
        uploader.visitor
    ):
        return CheckpointTooLarge(
            f"{error}: uploads from your address hold {from_address:,} of the {ADDRESS_UPLOAD_LIMIT_ELEMENTS:,} "
            "parameters one address may upload; close other tabs or windows (or upload a smaller model) and try again"
        )
    yours = SERVER_UPLOADS.held(uploader.visitor) - held_here
    if yours and yours + held_here >= VISITOR_UPLOAD_LIMIT_ELEMENTS // 2:
        return CheckpointTooLarge(
            f"{error}: your uploads in other tabs hold {yours:,} of the {VISITOR_UPLOAD_LIMIT_ELEMENTS:,} parameters "
            "one visitor may upload; close those tabs (or upload a smaller model) and try again"
        )
    return CheckpointTooLarge(
        f"{error}: other visitors' uploads hold {SERVER_UPLOADS.held():,} of the {SERVER_UPLOAD_LIMIT_ELEMENTS:,} "
        "parameters this server keeps for uploads; try again in a few minutes (uploads are freed when their "
        "session ends, or after sitting unused), or use a smaller model"
    )
