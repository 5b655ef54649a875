"""Long work on a page: a progress bar whose time left counts computing only, and a Stop button above it."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import accumulate

import streamlit as st

from ui.services.work import TIMINGS, computing_clock


def duration(seconds: float) -> str:
    """A time left as a reader says it: "about 40 s", "about 3 min"."""
    return f"about {max(1, round(seconds))} s" if seconds < 90 else f"about {round(seconds / 60)} min"


def pace(work: str, checkpoint_key: str, unit: str, units: int) -> str:
    """What to expect before the click: the time `units` items of the work should take at the pace measured on
    this server with this model, or, never run here, that the bar will say once it starts."""
    seconds = TIMINGS.expected(work, checkpoint_key, 1)
    if seconds is None:
        return "Not yet timed on this server with this model: the bar says the time left once the first is done."
    return (
        f"At the pace measured on this server with this model: {duration(seconds)} a {unit}, "
        f"{duration(seconds * units)} for {units:,}."
    )


class ProgressBar:
    """A bar for work of more than a second: what is done, and how long is left at the pace so far.

    Items may differ in cost (a long sentence takes longer than a short one): `costs`, in the order the work
    does them, weigh each item's share of the estimate. The pace counts computing time only: time spent in line
    for a heavy-job slot (another visitor's turn) made the estimate jump after each turn (measured:
    docs/performance.md). Each update is a Streamlit call, so a visitor who presses Stop, or leaves, ends the work
    there.
    """

    def __init__(
        self,
        what: str,
        total: int,
        unit: str,
        costs: Sequence[float] | None = None,
        stop_key: str | None = None,
        timed: tuple[str, str, float] | None = None,
        after: float | None = None,
        expected: float | None = None,
    ) -> None:
        """`stop_key`: a Stop button above the bar, under that key, gone with the bar when the work is done.
        `timed`: (work, checkpoint key, units of cost): the time the whole work took is recorded in TIMINGS, which
        the bar states from the start where this work was timed here before. `after`: the seconds the parts of a run
        still to come should take, at paces measured here: said with this part's. `expected`: the seconds this work
        should take at the pace measured here, the time left said until a first share of the work is done (the
        bar's own pace from then on)."""
        self.what, self.total, self.unit, self.timed, self.after = what, total, unit, timed, after
        self.expected = expected
        self.done_costs = None if costs is None else [c / max(sum(costs), 1e-9) for c in accumulate(costs, initial=0)]
        self.started = computing_clock()
        self.frame = st.empty()
        before = expected if timed is None else TIMINGS.expected(*timed)
        with self.frame.container():
            if stop_key is not None:
                stop_button(stop_key)  # pressed: the page runs again, without the form's submit, so stops there
            text = f"{what} ..." if before is None else f"{what} ... expect {duration(before)}"
            self.bar = st.progress(0.0, text=text)

    def __call__(self, done: int, total: int | None = None, share: float | None = None) -> None:
        """`done` items of `total` (the work's own count when it reports one) are finished; `share`: the share of the
        work done where the work weighs its items itself (rows of the shortest sentences first, counted alike, said
        "about 1 s left" with 113 s to go)."""
        total = total or self.total
        if share is None:
            share = done / total if self.done_costs is None else self.done_costs[min(done, len(self.done_costs) - 1)]
        elapsed = computing_clock() - self.started
        left, seconds = "", None
        if 0 < share < 1:
            seconds = elapsed / share * (1 - share)
        elif share < 1 and self.expected is not None:
            seconds = max(self.expected - elapsed, 1.0)
        if seconds is not None:
            left = f" · {duration(seconds)} left"
            left += "" if self.after is None else f" in this part, {duration(seconds + self.after)} in all"
        self.bar.progress(min(share, 1.0), text=f"{self.what}: {done:,} of {total:,} {self.unit}{left}")
        if done >= total and self.timed is not None:
            TIMINGS.record(*self.timed, elapsed)
            self.timed = None  # once

    def close(self) -> None:
        self.frame.empty()


def stop_button(key: str, container=st) -> bool:
    """A Stop button drawn before long work: pressing it reruns the page, which ends the work at its next
    progress update; True on that run, so the page can say it stopped rather than start again."""
    return container.button("Stop", key=key, help="Stops the computation; nothing else is lost.")
