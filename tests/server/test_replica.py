"""Which sessions behind scripts/serve.sh are visitors moved from a replica that stopped, and what a saturated
replica answers."""

import time

import pytest

from ui.state.replica import moved_from_another


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


def answer(app, path: str) -> int:
    """The status the ASGI app answers a GET of `path` with."""
    import asyncio

    sent = []

    async def receive():
        return {"type": "http.request", "body": b""}

    async def send(message):
        sent.append(message)

    scope = {"type": "http", "method": "GET", "path": path, "headers": []}
    asyncio.run(app(scope, receive, send))
    return sent[0]["status"]


def test_a_saturated_replica_says_so_and_sends_arriving_visitors_on(monkeypatch):
    """Two tabs held both page slots for minutes while health stayed green, so nginx kept sending arriving visitors
    to the stuck replica (20 of 30 timed out): saturated, its health and, behind the proxy, its page loads answer
    503, which nginx takes as "try the next replica"."""
    import ui.server.asgi as asgi
    import ui.services.work as work

    async def inner(scope, receive, send):
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    app = asgi.SaturatedReplica(inner)
    line = work.Slots(0)
    monkeypatch.setattr(work, "PAGE_SLOTS", line)
    monkeypatch.setattr(work, "SATURATED_SECONDS", 0.05)
    assert [answer(app, path) for path in ("/_stcore/health", "/attention")] == [200, 200]
    ticket = line.ask()  # a page run waits for a slot
    time.sleep(0.1)
    monkeypatch.setattr(asgi, "REPLICA_NAME", "")
    assert [answer(app, path) for path in ("/_stcore/health", "/attention", "/static/app.js")] == [503, 200, 200]
    monkeypatch.setattr(asgi, "REPLICA_NAME", "replica-1")
    assert [answer(app, path) for path in ("/_stcore/health", "/attention", "/static/app.js")] == [503, 503, 200]
    line.leave(ticket)
    assert line.longest_wait() == 0 and answer(app, "/_stcore/health") == 200
