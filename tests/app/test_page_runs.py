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
