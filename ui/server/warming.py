"""What keeps a page run and ui.server.launch's warm-up from importing the app's code at the same time.

Two threads importing the same modules at once can meet each other's half-initialized module (a fresh server's
page failed with "partially initialized module 'pandas'"). Under the launcher the warm-up imports only while no
page runs, and a page run waits while it does: app.py imports nothing of the app before it has its turn. Under a
plain `streamlit run app.py` the warm-up never imports and nothing waits. The standard library only: app.py
imports this first.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


class ImportTurns:
    """Page runs, any number at once, or the warm-up's imports, alone; page runs go first (a long page run never
    waits behind the warm-up, which waits for a moment with none)."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._runs = 0
        self._waiting = 0  # page runs waiting for their turn
        self._importing = False
        self._quiet_since = time.monotonic()  # when the last page run ended

    @contextmanager
    def page_run(self) -> Iterator[None]:
        """A page run's turn: entered once the warm-up is not importing, held to the run's end."""
        with self._changed:
            self._waiting += 1
            self._changed.wait_for(lambda: not self._importing)
            self._waiting -= 1
            self._runs += 1
        try:
            yield
        finally:
            with self._changed:
                self._runs -= 1
                self._quiet_since = time.monotonic()
                self._changed.notify_all()

    def close(self) -> None:
        """The warm-up's turn from now, before any page has run (the launcher, before its server starts)."""
        with self._changed:
            self._importing = True

    def open(self) -> None:
        """Page runs' turn again."""
        with self._changed:
            self._importing = False
            self._changed.notify_all()

    def idle(self) -> bool:
        return not (self._runs or self._waiting or self._importing)

    def wait_quiet(self, seconds: float) -> None:
        """Returns once no page has run or waited to for `seconds` in a row: a browser that was just sent a page
        fetches that page's code from this process meanwhile."""
        with self._changed:
            while True:
                self._changed.wait_for(self.idle)
                left = self._quiet_since + seconds - time.monotonic()
                if left <= 0:
                    return
                self._changed.wait(left)

    @contextmanager
    def closed_when_idle(self) -> Iterator[None]:
        """The warm-up's turn, taken at a moment no page runs or waits to."""
        with self._changed:
            self._changed.wait_for(self.idle)
            self._importing = True
        try:
            yield
        finally:
            self.open()


IMPORTS = ImportTurns()
