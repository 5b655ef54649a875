"""`python -m ui.launch`: the warm-up fills the same caches the first page reads."""

from __future__ import annotations

from helpers import start, step_view

import ui.launch
import ui.models
from ui.keys import DEFAULT_SENTENCE


def test_the_first_page_finds_the_warm_ups_decode(monkeypatch):
    monkeypatch.setattr(ui.launch, "serving", lambda: True)
    ui.launch.warm_up()

    def no_decode(*args, **kwargs):
        raise AssertionError("the first page decoded again: the warm-up missed the page's cache key")

    monkeypatch.setattr(ui.models, "decode_text", no_decode)
    at = start()
    assert not at.exception and at.session_state["applied_text"] == DEFAULT_SENTENCE
    assert step_view(at)["steps"] == at.session_state["result"].steps
