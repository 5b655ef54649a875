"""`python -m ui.server.launch`: the warm-up fills the same caches the first page reads."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
import threading

import pytest
from helpers import REPO, start, step_view

import ui.server.launch
import ui.services.models
from ui.server.warming import ImportTurns
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


def test_the_warm_up_starts_once_the_servers_health_answers_under_its_base_path(monkeypatch):
    """The port opens before the server can answer; PyTorch's import started then held its first answer back. The
    warm-up asks the health check, where the options put it (a classroom's base path)."""
    import http.server

    from streamlit import config
    from streamlit.runtime import Runtime

    asked = []

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            asked.append(self.path)
            self.send_response(200 if self.path == "/classroom/_stcore/health" else 404)
            self.end_headers()

        def log_message(self, *args):
            pass

    answering = http.server.HTTPServer(("127.0.0.1", 0), Health)
    threading.Thread(target=answering.serve_forever, daemon=True).start()
    options = {"server.address": "127.0.0.1", "server.port": answering.server_port, "server.sslCertFile": None}
    monkeypatch.setattr(Runtime, "exists", staticmethod(lambda: True))
    try:
        for base, answers in (("/classroom/", True), ("", False)):
            monkeypatch.setattr(config, "get_option", lambda name: (options | {"server.baseUrlPath": base})[name])
            assert ui.server.launch.serving() is answers
    finally:
        answering.shutdown()
    assert asked == ["/classroom/_stcore/health", "/_stcore/health"]


def test_the_server_starts_before_the_app_is_imported():
    """The launcher imported every module of the app before its server started (5.3 s on a 2-core CPU): it answered
    seconds after a plain `streamlit run` and drew the step view at 1.42x its time. Now the server starts at once,
    the warm-up imports while the browser loads, and the first visitor to come by a page's URL runs app.py, where
    page runs wait for the warm-up's imports (a fresh process: this one has all)."""
    launch = (
        "import sys, threading; import streamlit.web.cli as cli; import ui.server.launch as launch;"
        "from streamlit.runtime.pages_manager import PagesManager;"
        "threading.Thread.start = lambda thread: None;"
        "cli.main = lambda: print(sorted(m for m in ('torch', 'pandas', 'transformer', 'ui.services.models') "
        "if m in sys.modules), PagesManager.uses_pages_directory) or 0;"
        "launch.sys.argv = ['launch'];"
        "\ntry: launch.main()\nexcept SystemExit: pass\n"
    )
    run = subprocess.run([sys.executable, "-c", launch], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip().splitlines()[-1] == "[] False"


def test_app_imports_nothing_of_the_app_before_its_turn():
    """Imported by a page run while the warm-up imported it too, a module could be met half-initialized (a fresh
    server's page failed with "partially initialized module 'pandas'"): app.py's first import is the turns' module,
    which imports the standard library only, and every other line runs in the page run's turn."""
    tree = ast.parse((REPO / "app.py").read_text())
    code = [node for node in tree.body if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant))]
    assert ast.unparse(code[0]) == "from ui.server.warming import IMPORTS"
    assert len(code) == 2 and ast.unparse(code[1].items[0].context_expr) == "IMPORTS.page_run()"
    probe = "import sys, ui.server.warming; print(sorted(m for m in ('streamlit', 'torch', 'transformer') if m in sys.modules))"
    run = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0 and run.stdout.strip() == "[]", run.stderr


def test_a_page_run_waits_while_the_warm_up_imports_and_the_warm_up_for_no_page_run():
    turns = ImportTurns()
    turns.close()
    entered = threading.Event()

    def page() -> None:
        with turns.page_run():
            entered.set()
            leave.wait(10)

    leave = threading.Event()
    run = threading.Thread(target=page)
    run.start()
    assert not entered.wait(0.3)  # the warm-up imports: the page waits
    turns.open()
    assert entered.wait(10)
    imported = threading.Event()

    def rest() -> None:
        with turns.closed_when_idle():
            imported.set()

    warm_up = threading.Thread(target=rest)
    warm_up.start()
    assert not imported.wait(0.3)  # a page runs: the warm-up waits
    leave.set()
    run.join(10)
    assert imported.wait(10)
    warm_up.join(10)
    with turns.page_run():  # its turn given back
        pass


def test_page_runs_get_their_turn_whatever_the_warm_up_meets(monkeypatch):
    """A failing import or load ends the warm-up's turn all the same: pages do the work and say what went wrong."""
    turns = ImportTurns()
    monkeypatch.setattr(ui.server.launch, "IMPORTS", turns)
    monkeypatch.setattr(ui.server.launch, "serving", lambda: True)
    monkeypatch.setattr(ui.server.launch, "QUIET_BEFORE_THE_REST", 0.0)

    def failing(*args):
        raise RuntimeError("it failed")

    for where in ("import_all", "serving"):  # a module's import, or the health check itself
        with monkeypatch.context() as patched:
            patched.setattr(ui.server.launch, where, failing)
            turns.close()
            with pytest.raises(RuntimeError, match="it failed"):
                ui.server.launch.warm_up()
            assert turns.idle()


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
