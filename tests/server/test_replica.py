"""Which sessions behind scripts/serve.sh are visitors moved from a replica that stopped."""

import pytest

from ui.server.replica import moved_from_another


@pytest.mark.parametrize(
    ("cookie", "own", "moved"),
    [
        (None, "replica-1", False),  # a first visit
        ("", "replica-1", False),
        ("replica-1", "replica-1", False),  # this replica held the session before: a reload, not a move
        ("replica-2", "replica-1", True),  # another replica held it
        ("replica-2", "", False),  # no proxy naming replicas in front
    ],
)
def test_a_visitor_is_moved_when_the_cookie_names_another_replica(cookie, own, moved):
    assert moved_from_another(cookie, own) is moved
