"""`python -m ui.server.launch`: the warm-up fills the same caches the first page reads."""

from __future__ import annotations

import os
import subprocess
import sys

from helpers import REPO, start, step_view

import ui.server.launch
import ui.services.models
from ui.state.keys import DEFAULT_SENTENCE


def test_the_first_page_finds_the_warm_ups_decode(monkeypatch):
    monkeypatch.setattr(ui.server.launch, "serving", lambda: True)
    ui.server.launch.warm_up()

    def no_decode(*args, **kwargs):
        raise AssertionError("the first page decoded again: the warm-up missed the page's cache key")

    monkeypatch.setattr(ui.services.models, "decode_text", no_decode)
    at = start()
    assert not at.exception and at.session_state["applied_text"] == DEFAULT_SENTENCE
    assert step_view(at)["steps"] == at.session_state["result"].steps


def test_the_first_page_imports_neither_pandas_nor_pyarrow():
    """Together they take 0.5 s to import: a cold start's first page must not wait for them (a fresh process,
    since this one's other tests may have imported them)."""
    first_page = (
        "import sys; from helpers import start; at = start(); assert not at.exception, at.exception;"
        "print(sorted(name for name in ('pandas', 'pyarrow') if name in sys.modules))"
    )
    environment = os.environ | {"PYTHONPATH": f"{REPO}{os.pathsep}{REPO / 'tests'}"}
    run = subprocess.run([sys.executable, "-c", first_page], cwd=REPO, env=environment, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "[]"


def test_a_start_prints_no_config_warning(tmp_path):
    """Every start printed Streamlit's "An update to the [server] config option section was detected... please
    restart": the warm-up thread read the options before the command line's were loaded."""
    import time

    from fixtures.browser import app_server

    log = tmp_path / "server.log"
    with app_server(log):
        time.sleep(1.0)  # the warm-up thread reads the options once the server answers
    text = log.read_text()
    assert "You can now view" in text and "config option section" not in text, text


def test_the_package_is_imported_before_the_warm_up_thread_starts():
    """A warm-up thread importing the package while a first visitor's page imported it too could meet the other's
    half-imported module, an ImportError on that visitor's page (seen with Chromium opening a page at once). So
    the warm-up starts with everything it and the pages import already there, inside functions too (a page failed
    with "partially initialized module 'pandas'" on a fresh server; a fresh process: this one has all)."""
    launch = (
        "import sys, threading; import streamlit.web.cli as cli; import ui.server.launch as launch;"
        "cli.main = lambda: 0; seen = [];"
        "threading.Thread.start = lambda thread: seen.append(sorted(sys.modules));"
        "launch.sys.argv = ['launch'];"
        "\ntry: launch.main()\nexcept SystemExit: pass\n"
        "print(all(name in seen[0] for name in ('ui.services.models', 'transformer.model.encoder_decoder', "
        "'transformer.decoding.strategies', 'pandas', 'conllu', 'captum', 'ui.widgets.head_importance')))"
    )
    run = subprocess.run([sys.executable, "-c", launch], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "True"


def test_the_server_takes_no_forwarded_address_from_loopback(monkeypatch):
    """uvicorn trusted X-Forwarded-For from loopback: any program on the machine was seen at the address it claimed
    (eight such sessions held the server's whole upload budget). The launcher turns that off; the classroom's proxy
    vouches with its token instead."""
    import asyncio

    import uvicorn

    from ui.server import launch

    seen = {}

    async def app(scope, receive, send):
        seen["client"] = scope["client"]

    scope = {"type": "http", "client": ("127.0.0.1", 5000), "headers": [(b"x-forwarded-for", b"198.51.100.7")]}
    monkeypatch.setenv("FORWARDED_ALLOW_IPS", "127.0.0.1,::1")  # uvicorn's default; undone after the test
    trusting = uvicorn.Config(app)
    trusting.load()
    asyncio.run(trusting.loaded_app(dict(scope), None, None))
    assert seen["client"][0] == "198.51.100.7"  # uvicorn's default: what the test must see change
    launch.trust_no_forwarded_headers()
    config = uvicorn.Config(app)
    config.load()
    asyncio.run(config.loaded_app(dict(scope), None, None))
    assert seen["client"] == ("127.0.0.1", 5000)
