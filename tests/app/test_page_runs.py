"""A server's page runs: at most PAGE_RUNS compute at once, a heavy job in line gives its page slot to other pages,
and no full garbage collection after every run (it held the interpreter, and /_stcore/health waited behind it)."""

from __future__ import annotations

import threading
import time
import tomllib

from helpers import REPO

import ui.services.work


def test_at_most_page_runs_compute_at_once_and_the_others_are_served_in_turn(monkeypatch):
    monkeypatch.setattr(ui.services.work, "PAGE_SLOTS", ui.services.work.Slots(2))
    inside, most, served = [0], [0], []
    lock = threading.Lock()

    def page(number: int) -> None:
        with ui.services.work.page_run():
            with lock:
                inside[0] += 1
                most[0] = max(most[0], inside[0])
            time.sleep(0.05)
            with lock:
                inside[0] -= 1
                served.append(number)

    threads = [threading.Thread(target=page, args=(n,)) for n in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert sorted(served) == list(range(8)) and most[0] == 2


def test_a_heavy_job_waiting_in_line_lets_other_pages_run(monkeypatch):
    """Two page runs waiting for the one heavy-job slot would otherwise hold both page slots, and every other
    visitor's ordinary page would wait behind a minute of attribution."""
    monkeypatch.setattr(ui.services.work, "PAGE_SLOTS", ui.services.work.Slots(1))
    with ui.services.work.page_run():
        with ui.services.work.page_slot_given_up():
            other = threading.Thread(target=lambda: ui.services.work.page_run().__enter__())
            other.start()
            other.join(5)
            assert not other.is_alive()  # it got the slot this run gave up
            ui.services.work.PAGE_SLOTS.release()  # and gives it back


def test_streamlit_runs_no_full_garbage_collection_after_each_page():
    config = tomllib.loads((REPO / ".streamlit" / "config.toml").read_text())
    assert config["runner"]["postScriptGC"] is False


def test_a_visitor_who_leaves_while_taking_back_its_page_slot_gives_the_heavy_slot_back(monkeypatch):
    """A heavy job in line lends its page slot; served, it takes the page slot back. A visitor who left meanwhile
    ended the run there, holding a heavy slot that nothing gave back: the server had one slot fewer for good."""
    work = ui.services.work
    monkeypatch.setattr(work, "SLOTS", work.Slots(1))
    monkeypatch.setattr(work, "PAGE_SLOTS", work.Slots(1))
    left: set[str] = set()
    monkeypatch.setattr(work, "visitor_left", lambda: threading.current_thread().name in left)
    computing, finished = threading.Event(), threading.Event()

    def other_job() -> None:  # holds the heavy slot until told
        with work.heavy_job("attributions"):
            computing.set()
            finished.wait(10)

    def leaving_visitor() -> None:
        with work.page_run(), work.heavy_job("attributions") as should_stop:
            assert should_stop()  # the visitor left: the work stops at once

    holder = threading.Thread(target=other_job)
    holder.start()
    assert computing.wait(10)
    visitor = threading.Thread(target=leaving_visitor, name="visitor")
    visitor.start()
    deadline = time.monotonic() + 10
    while work.SLOTS.waiting() == 0 and time.monotonic() < deadline:  # in line, its page slot lent
        time.sleep(0.01)
    page = work.PAGE_SLOTS.ask()
    assert work.PAGE_SLOTS.take(page, timeout=10)  # another page run takes the lent slot
    finished.set()  # the heavy slot goes to the visitor, who now waits for its page slot back ...
    holder.join(10)
    while work.SLOTS.waiting() and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.3)
    left.add("visitor")  # ... and leaves
    time.sleep(0.3)
    work.PAGE_SLOTS.release()
    visitor.join(10)
    assert not visitor.is_alive()
    assert work.SLOTS.take(work.SLOTS.ask(), timeout=2), "the heavy slot was never given back"


def test_every_page_opens_with_a_line_saying_what_it_is_for():
    """Tried as a new user would: Attention maps, Checkpoints and Head statistics opened with no line saying what
    they are for (the explorer says it in its "How to use this page")."""
    from streamlit.testing.v1 import AppTest

    from ui.widgets.frame import PAGES

    def walk(node):
        for child in getattr(node, "children", {}).values():
            yield child
            yield from walk(child)

    for script, _ in [page for section in PAGES.values() for page in section][1:]:
        at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180).switch_page(script).run()
        shown = [element for element in walk(at.main) if type(element).__name__ != "Block"]
        assert [type(element).__name__ for element in shown[:2]] == ["Title", "Markdown"], script
        assert len(shown[1].value) >= 80, script
