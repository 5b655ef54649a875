"""Which sessions behind scripts/serve.sh are visitors moved from a replica that stopped."""

import pytest

from ui.replica import moved_from_another


@pytest.mark.parametrize(
    ("cookie", "moved"),
    [
        (None, False),  # a first visit, or no proxy in front
        ("", False),
        ("127.0.0.1:8501", False),  # this replica held the session before: a reload, not a move
        ("127.0.0.1:8502", True),  # another replica held it
        ("127.0.0.1:8502, 127.0.0.1:8501", False),  # nginx retried: the last one (this) took it
        ("127.0.0.1:8501, 127.0.0.1:8503", True),
    ],
)
def test_a_visitor_is_moved_when_the_cookie_names_another_replica(cookie, moved):
    assert moved_from_another(cookie, 8501) is moved
