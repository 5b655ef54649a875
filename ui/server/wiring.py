"""What the app changes in its libraries and caches, done once, explicitly, when it starts (app.py and
ui.server.launch call wire()): no module changes another by being imported."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from streamlit.components.v2.bidi_component import serialization as bidi_serialization

from ui.services.cache import RESULTS
from ui.services.work import in_slot_if_uploaded


def wire() -> None:
    """Every model call on an upload runs in a heavy-job slot (an upload is a stranger's model), and a hostile
    component trigger is read as none. Idempotent: app.py calls it at every page run."""
    RESULTS.guard = in_slot_if_uploaded
    if not getattr(bidi_serialization.handle_deserialize, "refuses_hostile_triggers", False):
        bidi_serialization.handle_deserialize = hostile_trigger_refused(bidi_serialization.handle_deserialize)


def hostile_trigger_refused(deserialize: Callable[[str | None], Any]) -> Callable[[str | None], Any]:
    """Streamlit's reading of a component's trigger, with what its json.loads raises besides a JSONDecodeError (a
    trigger nested 200,000 deep, a 5,000-digit number) read as no trigger. Streamlit reads triggers before the
    page runs, so a raise there ended the visitor's run with the generic error, out of the page's reach."""

    def guarded(text: str | None) -> Any:
        try:
            return deserialize(text)
        except (RecursionError, ValueError):
            return None

    guarded.refuses_hostile_triggers = True
    return guarded
