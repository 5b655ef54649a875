"""Heavy work a page does for its visitor (integrated gradients): a few jobs at a time per server process,
queued, and abandoned when the visitor leaves.

A request for attribution of a long decode computed for minutes, and kept computing after its visitor had
gone (measured: docs/performance.md); a room of visitors asking at once would each take a core's worth. Here each job
waits for a slot, shows that it waits, and stops between steps once Streamlit asks the script run
to stop or rerun (a closed tab, another page).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import os
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import streamlit as st
from streamlit.runtime.scriptrunner_utils.exceptions import StopException
from streamlit.runtime.scriptrunner_utils.script_requests import ScriptRequestType
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

TRANSLATE_BATCH = 16  # sentences a batch under a progress bar: a larger one holds the bar still (docs/performance.md)


HEAVY_JOBS = int(os.environ.get("TRANSFORMER_EXPLORER_HEAVY_JOBS", "1"))  # at once per process (one per core)


# How long a job computes while others wait before it gives its slot to the first of them and queues again: an
# alignment of 2,000 pairs with integrated gradients (hours) kept another visitor's attribution waiting throughout.
TURN_SECONDS = float(os.environ.get("TRANSFORMER_EXPLORER_TURN_SECONDS", "20"))


class Slots:
    """A few slots for heavy jobs, given in the order they were asked for (a semaphore lets any waiter in)."""

    def __init__(self, count: int) -> None:
        self._changed = threading.Condition()
        self._free = count
        self._line: list[object] = []  # tickets of the jobs waiting, first come first
        self._asked: dict[object, float] = {}  # when each waiting ticket was asked for

    def ask(self) -> object:
        """A ticket in the line, for take() and position()."""
        ticket = object()
        with self._changed:
            self._line.append(ticket)
            self._asked[ticket] = time.monotonic()
        return ticket

    def longest_wait(self) -> float:
        """Seconds the first in line has waited; 0 with nobody waiting."""
        with self._changed:
            return time.monotonic() - self._asked[self._line[0]] if self._line else 0.0

    def take(self, ticket: object, timeout: float) -> bool:
        """Whether the ticket got a slot within `timeout` seconds (a free slot goes to the first in line)."""
        with self._changed:
            served = self._changed.wait_for(lambda: self._free > 0 and self._line[0] is ticket, timeout)
            if served:
                self._asked.pop(self._line.pop(0), None)
                self._free -= 1
                self._changed.notify_all()
            return served

    def leave(self, ticket: object) -> None:
        """The ticket's job no longer waits (its visitor left)."""
        with self._changed:
            if ticket in self._line:
                self._line.remove(ticket)
                self._asked.pop(ticket, None)
                self._changed.notify_all()

    def release(self) -> None:
        with self._changed:
            self._free += 1
            self._changed.notify_all()

    def position(self, ticket: object) -> int:
        """1 for the first in line; 0 when the ticket is not waiting."""
        with self._changed:
            return self._line.index(ticket) + 1 if ticket in self._line else 0

    def waiting(self) -> int:
        with self._changed:
            return len(self._line)


SLOTS = Slots(HEAVY_JOBS)


_THIS_THREAD = threading.local()  # whether this thread's script run holds a slot already, and its seconds in line


# Page runs computing at once in this process; the others wait in line on a lock, without the interpreter. Every
# page run is Python work holding the interpreter's lock, which goes to whichever waiting thread the system wakes:
# with dozens of runs at once, the server's own thread (it answers /_stcore/health and every websocket) waited its
# turn among dozens (docs/classroom.md has the figures).
PAGE_RUNS = int(os.environ.get("TRANSFORMER_EXPLORER_PAGE_RUNS", str(os.cpu_count() or 2)))


PAGE_SLOTS = Slots(PAGE_RUNS)


# A page run waiting this long for a slot means every core is computing for someone: the server says it is saturated.
SATURATED_SECONDS = float(os.environ.get("TRANSFORMER_EXPLORER_SATURATED_SECONDS", "5"))


def saturated() -> bool:
    """Whether page runs are waiting past SATURATED_SECONDS for a slot (ui.server.asgi answers 503 meanwhile)."""
    return PAGE_SLOTS.longest_wait() > SATURATED_SECONDS


@contextmanager
def page_run() -> Iterator[None]:
    """Holds one of the PAGE_RUNS slots while the page draws, waiting in line for it first."""
    _take_page_slot()
    try:
        yield
    finally:
        if getattr(_THIS_THREAD, "page_slot", False):
            _THIS_THREAD.page_slot = False
            PAGE_SLOTS.release()


def _served(slots: Slots, ticket: object, between: Callable[[], None]) -> None:
    """Waits until the ticket gets one of the slots, calling between() every quarter second (it says the place in
    line, or raises StopException for a visitor who left); a ticket that stops waiting leaves the line."""
    try:
        while not slots.take(ticket, timeout=0.25):
            between()
    except BaseException:
        slots.leave(ticket)
        raise


def _stop_if_left() -> None:
    if visitor_left():
        raise StopException()


def _take_page_slot(between: Callable[[], None] = _stop_if_left) -> None:
    _served(PAGE_SLOTS, PAGE_SLOTS.ask(), between)
    _THIS_THREAD.page_slot = True


@contextmanager
def page_slot_given_up() -> Iterator[None]:
    """While the block waits (a heavy job in line for its own slot), this run's page slot serves the next page run
    in line; it is taken back after, whether or not the visitor is still there: the block may hold a heavy slot by
    then, which only the caller's `finally` gives back."""
    if not getattr(_THIS_THREAD, "page_slot", False):
        yield
        return
    _THIS_THREAD.page_slot = False
    PAGE_SLOTS.release()
    try:
        yield
    finally:
        _take_page_slot(between=lambda: None)


# Token-steps of integrated gradients one request may ask (output steps x interpolation steps x tokens):
# its time on a 2-core CPU is in docs/performance.md. A 20-token output of a 25-token sentence takes 32 steps, 29,000.
ATTRIBUTION_BUDGET = int(os.environ.get("TRANSFORMER_EXPLORER_ATTRIBUTION_BUDGET", "100000"))


def visitor_left() -> bool:
    """Whether Streamlit asked this script run to stop or to start again: its result would not be shown."""
    context = get_script_run_ctx()
    requests = getattr(context, "script_requests", None)
    return requests is not None and requests._state != ScriptRequestType.CONTINUE  # no public reading of it


@contextmanager
def heavy_job(what: str) -> Iterator[Callable[[], bool]]:
    """Holds one of the process's slots while the block runs (waiting in line for one, and saying where); yields the
    check the work asks between its parts, which also takes turns: after TURN_SECONDS with others waiting, the slot
    goes to the first of them and the work goes on when its turn comes again. A visitor who leaves, waiting or
    computing, ends the script run quietly."""
    if getattr(_THIS_THREAD, "holds_slot", False):  # work inside work (a decode inside an attribution): one slot
        yield visitor_left
        return
    # Imported here: the server's ASGI app imports this module before it answers, PyTorch comes with the pages
    from transformer.analysis.attribution.gradients import AttributionStopped

    notice = st.empty()
    _wait_for_slot(what, notice)
    holding, turn_started, _THIS_THREAD.holds_slot = True, time.monotonic(), True
    # From here the slot is held: every page call below (each may raise StopException once the visitor has left)
    # stands inside the try whose `finally` gives it back.

    def should_stop() -> bool:
        nonlocal holding, turn_started
        if not visitor_left() and SLOTS.waiting() and time.monotonic() - turn_started > TURN_SECONDS:
            SLOTS.release()
            holding = False
            try:
                _wait_for_slot(what, notice, paused=True)
            except StopException:
                return True
            holding, turn_started = True, time.monotonic()
            notice.empty()
        return visitor_left()

    try:
        notice.empty()
        yield should_stop
    except AttributionStopped:
        raise StopException() from None
    finally:
        _THIS_THREAD.holds_slot = False
        if holding:
            SLOTS.release()
        return_memory()
        notice.empty()  # last: for a visitor who left, it raises


UPLOAD_KEY = "upload:"  # how an uploaded checkpoint's key in the caches begins


@contextmanager
def in_slot_if_uploaded(checkpoint_key: str) -> Iterator[None]:
    """Runs a model call in one of the heavy-job slots, in turn with the rest, if the model was uploaded: its cost
    is bounded by the upload budgets, but it is a stranger's model, and a room of such tabs shares the cores."""
    if not checkpoint_key.startswith(UPLOAD_KEY):
        yield
        return
    with heavy_job("computations on uploaded models"):
        yield


def _wait_for_slot(what: str, notice, paused: bool = False) -> None:
    """Waits in line for a slot, showing the place in line; StopException if the visitor leaves meanwhile. The
    caller, holding the slot on return, clears the notice (a page call) where it gives the slot back on failure."""
    ticket, began = SLOTS.ask(), time.monotonic()
    state = "Paused for another visitor's turn" if paused else f"Waiting for other visitors' {what} to finish"

    def say_place() -> None:
        notice.info(
            f"{state}: this server computes {HEAVY_JOBS} at a time, in turns of {TURN_SECONDS:g} s; "
            f"you are number {SLOTS.position(ticket)} in line."
        )
        _stop_if_left()

    try:
        if not SLOTS.take(ticket, timeout=0):
            with page_slot_given_up():  # a job in line computes nothing: its page slot serves other pages meanwhile
                _served(SLOTS, ticket, say_place)
    finally:
        _THIS_THREAD.waited = getattr(_THIS_THREAD, "waited", 0.0) + time.monotonic() - began


def computing_clock() -> float:
    """A monotonic clock that stands still while this thread waits in line for a slot (a progress bar's pace)."""
    return time.monotonic() - getattr(_THIS_THREAD, "waited", 0.0)


class Timings:
    """How long each kind of work took on this server, in computing seconds per unit of its cost, per checkpoint:
    what a page says to expect before the work starts (in a classroom, the first run times it for the room)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._totals: dict[tuple[str, str], tuple[float, float]] = {}  # (seconds, units) summed over runs

    def record(self, work: str, checkpoint_key: str, units: float, seconds: float) -> None:
        if units <= 0 or seconds <= 0:
            return
        with self._lock:
            done, counted = self._totals.get((work, checkpoint_key), (0.0, 0.0))
            self._totals[(work, checkpoint_key)] = (done + seconds, counted + units)

    def expected(self, work: str, checkpoint_key: str, units: float) -> float | None:
        """Seconds that `units` of this work should take, at the pace measured here so far; None if never run."""
        with self._lock:
            found = self._totals.get((work, checkpoint_key))
        return None if found is None else found[0] / found[1] * units


TIMINGS = Timings()


@functools.cache
def _malloc_trim() -> Callable[[int], int] | None:
    """glibc's malloc_trim, looked up once (find_library runs ldconfig); None on other C libraries."""
    name = ctypes.util.find_library("c")
    return getattr(ctypes.CDLL(name), "malloc_trim", None) if name else None


def return_memory() -> None:
    """Gives freed memory back to the system (glibc keeps freed arenas otherwise; measured: docs/performance.md)."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
