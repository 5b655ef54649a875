"""The app as an ASGI application (Streamlit's st.App), so that its page names the app's root.

Opened by a page's own URL (/attention), Streamlit's page does not know where the app's root is: it first
asks /attention/_stcore/health and /attention/_stcore/host-config, which the server answers 404, before
trying /_stcore/ (streamlit/streamlit#7074; Streamlit reads the root from window.__streamlit when a page
names it). Here every HTML page the server sends names it, as nginx's sub_filter did for a classroom.

    streamlit run ui/server/asgi.py [options]      (ui.server.launch does, with the model loading at once)
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st
from starlette.middleware import Middleware
from starlette.types import ASGIApp, Message, Receive, Scope, Send
from streamlit import config

from ui.services.work import saturated
from ui.state.replica import REPLICA_NAME

APP = Path(__file__).resolve().parents[2] / "app.py"


def root_script() -> bytes:
    """The script that names the app's root (the origin, under server.baseUrlPath when one is set)."""
    base = config.get_option("server.baseUrlPath").strip("/")
    root = f'location.origin+"/{base + "/" if base else ""}"'
    return f"<script>window.__streamlit={{BACKEND_BASE_URL:{root},MAIN_PAGE_BASE_URL:{root}}}</script>".encode()


def is_page_request(scope: Scope) -> bool:
    """A GET of a page ("/", "/attention"): Streamlit answers it with its index.html. Files have a dot in their
    last segment and Streamlit's own routes start with /_stcore; those keep their compression."""
    path = scope.get("path", "")
    return (
        scope["type"] == "http"
        and scope.get("method") == "GET"
        and "." not in path.rsplit("/", 1)[-1]
        and "/_stcore/" not in path
    )


class RootInPage:
    """ASGI middleware: the root script right after <head> in every HTML page (asked uncompressed)."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not is_page_request(scope):
            await self.app(scope, receive, send)
            return
        scope = dict(scope, headers=[(k, v) for k, v in scope["headers"] if k != b"accept-encoding"])
        start: Message = {}
        body = b""

        async def named(message: Message) -> None:
            nonlocal start, body
            if message["type"] == "http.response.start":
                start = message
                return
            body += message.get("body", b"")
            if message.get("more_body"):
                return
            headers = dict(start.get("headers", []))
            if headers.get(b"content-type", b"").startswith(b"text/html"):
                body = body.replace(b"<head>", b"<head>" + root_script(), 1)
            start["headers"] = [(k, v) for k, v in start.get("headers", []) if k != b"content-length"]
            start["headers"].append((b"content-length", str(len(body)).encode()))
            await send(start)
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, named)


BUSY = b"This server is busy: every core is computing for other visitors. Please reload the page in a minute.\n"


class SaturatedReplica:
    """ASGI middleware: while the server is saturated (work.saturated), its health answers 503 and, behind the
    classroom's proxy (a named replica), so does a new page load, which nginx then sends to another replica
    (proxy_next_upstream http_503). A green health kept sending arriving visitors to a stuck replica: 20 of 30
    timed out. Served alone, a page load is never refused: its visitor waits in line instead."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        health = scope["type"] == "http" and scope.get("path", "").endswith("/_stcore/health")
        if (health or (REPLICA_NAME and is_page_request(scope))) and saturated():
            headers = [(b"content-type", b"text/plain; charset=utf-8"), (b"retry-after", b"30")]
            await send({"type": "http.response.start", "status": 503, "headers": headers})
            await send({"type": "http.response.body", "body": BUSY})
            return
        await self.app(scope, receive, send)


app = st.App(APP, middleware=[Middleware(SaturatedReplica), Middleware(RootInPage)])
