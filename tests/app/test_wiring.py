"""The app changes its libraries and caches once, explicitly, at start (ui.server.wiring): importing a module
changes nothing (importing models set the result cache's guard, importing step_player replaced Streamlit's reading
of a component's trigger)."""

from __future__ import annotations

import subprocess
import sys

from helpers import REPO

PROBE = """
import contextlib
from streamlit.components.v2.bidi_component import serialization
original = serialization.handle_deserialize
import ui.services.models, ui.players.step_player, ui.widgets.sidebar
from ui.services.cache import RESULTS
from ui.server.wiring import wire
print(serialization.handle_deserialize is original, isinstance(RESULTS.guard("upload:x"), contextlib.nullcontext))
wire()
patched = serialization.handle_deserialize
from ui.services.work import in_slot_if_uploaded
print(patched is not original, RESULTS.guard is in_slot_if_uploaded, patched("[" * 200000) is None)
wire()
print(serialization.handle_deserialize is patched)
"""


def test_importing_changes_nothing_and_wire_changes_it_once():
    done = subprocess.run([sys.executable, "-c", PROBE], capture_output=True, text=True, cwd=REPO, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:3] == ["True True", "True True True", "True"], done.stdout
