"""Every session key the app uses is declared once in ui/state/keys.py, with its type and default."""

from __future__ import annotations

import re

from helpers import REPO, start, step_action, translate

from ui.state.keys import KEYS

# How the pages and ui/ name a session key: attribute, item, get/setdefault/pop, a shared widget, a membership test.
ACCESSES = [
    r"session(?:_state)?\.(?!get\b|setdefault\b|pop\b)([a-z_]\w*)",
    r"session(?:_state)?\[\"(\w+)\"\]",
    r"session(?:_state)?\.(?:get|setdefault|pop)\(\"(\w+)\"",
    r"(?:shared|clamp_index)\(\"(\w+)\"",
    r"\"(\w+)\" (?:not )?in (?:st\.)?session(?:_state)?\b",
]


def test_every_session_key_in_the_code_is_declared():
    used = {}
    for path in [*REPO.glob("pages/*.py"), *REPO.glob("ui/**/*.py"), REPO / "app.py"]:
        for pattern in ACCESSES:
            for match in re.finditer(pattern, path.read_text()):
                used.setdefault(match.group(1), path.name)
    assert used, "the patterns found no session key at all"
    undeclared = {name: where for name, where in used.items() if name not in KEYS}
    assert not undeclared, f"session keys used but not declared in ui/state/keys.py: {undeclared}"


def test_defaults_have_their_declared_types_and_a_visit_keeps_to_them():
    for name, key in KEYS.items():
        assert key.default is None or isinstance(key.default, key.type), name
    at = translate(start(), "Two dogs play.")
    at = step_action(at, name="attention", step=1)
    present = [name for name in KEYS if name in at.session_state]
    assert {"text", "result", "result_request", "applied_settings", "step"} <= set(present)
    for name in present:
        assert isinstance(at.session_state[name], KEYS[name].type), (name, type(at.session_state[name]))
