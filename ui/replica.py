"""Behind scripts/serve.sh: whether this visitor's session was on another replica that has stopped.

nginx writes the replica holding a visitor's websocket into the te_replica cookie; a session that
starts here while the cookie names another replica is a visitor moved after that one stopped.
"""

from __future__ import annotations

import streamlit as st

REPLICA_COOKIE = "te_replica"
MOVED = (
    "The server that held your session stopped, so you are now on another one: your view was reset to "
    "what the page's link holds (sentence, settings and view), and uploads made before must be made again."
)


def moved_from_another(previous: str | None, own_port: int) -> bool:
    """Whether the cookie (nginx's $upstream_addr: "127.0.0.1:8501", or "a, b" after a retry) names
    another replica than the one on own_port."""
    if not previous:
        return False
    last = previous.split(",")[-1].strip()
    return last.rpartition(":")[2] != str(own_port)


def say_if_moved() -> None:
    """On a session's first run: a note when the visitor came from a replica that stopped."""
    if moved_from_another(st.context.cookies.get(REPLICA_COOKIE), st.get_option("server.port")):
        st.toast(MOVED, icon=":material/sync_problem:", duration="infinite")
