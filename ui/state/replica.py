"""Behind scripts/serve.sh: whether this visitor's session was on another replica that has stopped.

serve.sh names each replica (TRANSFORMER_EXPLORER_REPLICA, "replica-1", ...) and nginx writes the name of
the replica holding a visitor's websocket into the te_replica cookie (HttpOnly; no internal address in it);
a session that starts here while the cookie names another replica is a visitor moved after that one stopped.
"""

from __future__ import annotations

import os

import streamlit as st

REPLICA_COOKIE = "te_replica"
REPLICA_NAME = os.environ.get("TRANSFORMER_EXPLORER_REPLICA", "")


def moved_from_another(previous: str | None, own_name: str) -> bool:
    """Whether the cookie names another replica than this one (never without a proxy naming replicas)."""
    return bool(previous and own_name and previous != own_name)


def moved_here() -> bool:
    """Whether this session's visitor came from a replica that stopped."""
    return moved_from_another(st.context.cookies.get(REPLICA_COOKIE), REPLICA_NAME)
