"""Starts the app with its model already on the way: `python -m ui.server.launch [streamlit run options]`.

Under a plain `streamlit run app.py` nothing of the model exists until the first visitor's page runs: then it
imports PyTorch, reads the default checkpoint and decodes the default sentence (seconds on a 2-core CPU:
docs/performance.md), after the browser has loaded the page's code. Here the server answers at once and a thread
does that work while the browser loads: it imports what the landing page imports, loads and decodes into the
process's caches (the same ones every page uses), lets page runs in (ui/server/warming.py), then imports the rest
of the app's code. It serves ui/server/asgi.py: app.py, with pages that name the app's root.
"""

from __future__ import annotations

import ast
import importlib
import os
import ssl
import sys
import threading
import time
import urllib.request
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path

from ui.server.warming import IMPORTS

ROOT = Path(__file__).resolve().parents[2]
SERVED = Path(__file__).resolve().parent / "asgi.py"  # app.py, its pages naming the app's root
CODE = ("pages", "ui", "transformer")  # the folders of the app's code
QUIET_BEFORE_THE_REST = 3.0  # seconds without a page run before the warm-up imports the rest (wait_quiet)
SWITCH_SECONDS = 0.0001  # the interpreter's switch interval while the warm-up imports (server_kept_answering)
SERVING_WAIT = 30.0  # seconds the warm-up waits for a health check that fails (page runs wait for the warm-up)


def serving() -> bool:
    """Whether the server answers its health check yet: its port opens before it can answer, and PyTorch's import
    started then held the answer back by half a second.

    Streamlit's options are read only once its runtime exists: read earlier, from this thread, they were parsed
    before the command line's, and every start printed "An update to the [server] config option section was
    detected... please restart"."""
    from streamlit import config
    from streamlit.runtime import Runtime

    if not Runtime.exists():
        return False
    address = config.get_option("server.address") or "127.0.0.1"
    host = f"[{address}]" if ":" in address else address  # an IPv6 address, as a URL writes it
    base = config.get_option("server.baseUrlPath").strip("/")
    scheme = "https" if config.get_option("server.sslCertFile") else "http"
    health = f"{scheme}://{host}:{config.get_option('server.port')}/{base + '/' if base else ''}_stcore/health"
    own = ssl.create_default_context()
    own.check_hostname, own.verify_mode = False, ssl.CERT_NONE  # its own certificate, asked by its own address
    try:
        with urllib.request.urlopen(health, timeout=1, context=own) as answer:
            return answer.status == 200
    except (OSError, ValueError):  # not answering yet, or an address no URL can name
        return False


def project_file(name: str, root: Path = ROOT) -> Path | None:
    """The file of one of the project's modules (a package's __init__.py), or None for any other module."""
    path = root.joinpath(*name.split("."))
    for candidate in (path / "__init__.py", path.with_suffix(".py")):
        if name.split(".")[0] in CODE and candidate.is_file():
            return candidate
    return None


def imported_names(path: Path, root: Path = ROOT, inside_functions: bool = True) -> list[str]:
    """The modules a file imports (at its top level only, or inside functions too), with the project's modules
    named in `from X import Y`."""
    names = []
    for node in statements(ast.parse(path.read_text(encoding="utf-8")).body, inside_functions):
        if isinstance(node, ast.Import):
            names += [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.append(node.module)
            names += [f"{node.module}.{a.name}" for a in node.names if project_file(f"{node.module}.{a.name}", root)]
    return names


def statements(body: list, inside_functions: bool) -> Iterator[ast.AST]:
    """Every statement in a body and in those nested in it (an import is one): walking the expressions too, as
    ast.walk does, took three times as long."""
    for node in body:
        yield node
        if inside_functions or not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            for field in ("body", "orelse", "finalbody", "handlers", "cases"):
                yield from statements(getattr(node, field, []), inside_functions)


def every_module(root: Path = ROOT) -> list[str]:
    """Every module the app's code imports, inside functions too."""
    names = dict.fromkeys(
        name for folder in CODE for path in sorted((root / folder).rglob("*.py")) for name in imported_names(path, root)
    )
    return list(names)


def first_run_modules(root: Path = ROOT) -> list[str]:
    """What app.py and the landing page import at their top level: what a first visitor's page run imports."""
    from ui.widgets.frame import LANDING_SCRIPT

    return [name for script in ("app.py", LANDING_SCRIPT) for name in imported_names(root / script, root, False)]


def import_all(names: Iterable[str]) -> None:
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:  # an optional library this machine lacks: the code that uses it says so
            continue


def warm_up(root: Path = ROOT) -> None:
    """Once the server answers, while the first visitor's browser is still loading the page: imports what the first
    page run imports, loads the default checkpoint and decodes the default sentence into the shared caches, then
    lets page runs in (whatever failed: the page does the same work and says what went wrong); at a moment no
    page runs, it imports the rest of the app's code (ui/server/warming.py says why not during a run)."""
    try:  # page runs are let in whatever happens here
        waited = time.monotonic()
        while not serving() and time.monotonic() - waited < SERVING_WAIT:
            time.sleep(0.05)
        with server_kept_answering():
            import_all(first_run_modules(root))
            decode_default()
    finally:
        IMPORTS.open()
    IMPORTS.wait_quiet(QUIET_BEFORE_THE_REST)
    rest = every_module(root)
    with IMPORTS.closed_when_idle(), server_kept_answering():
        import_all(rest)


@contextmanager
def server_kept_answering() -> Iterator[None]:
    """While the block runs, the server's thread gets the interpreter back every SWITCH_SECONDS rather than every
    5 ms (Python's default): a browser loading the page asks for dozens of files, and each answer waited on the
    imports' turns (the cold start: 0.90x plain `streamlit run` with it, 1.01x without; docs/performance.md)."""
    interval = sys.getswitchinterval()
    sys.setswitchinterval(SWITCH_SECONDS)
    try:
        yield
    finally:
        sys.setswitchinterval(interval)


def decode_default() -> None:
    from transformer.decoding.strategies import DecodeSettings
    from ui.server.wiring import wire
    from ui.services import checkpoints, models
    from ui.state.keys import DEFAULT_SENTENCE

    wire()
    path = checkpoints.DEFAULT_CHECKPOINT
    try:
        checkpoint = checkpoints.load(path)
        models.decode_cached(checkpoint, checkpoints.checkpoint_key(path), DEFAULT_SENTENCE, DecodeSettings())
    except Exception:  # only a head start: the page does the same work and says what went wrong
        return


def every_session_through_app() -> None:
    """Makes a server's first visitor who opens a page by its URL run app.py, as every later visitor does, rather
    than the page's script alone (Streamlit's pages/-folder apps): app.py is where a page run waits for the
    warm-up's imports (ui/widgets/frame.py's draw does the same at such a first run, after the page's imports)."""
    from streamlit.runtime.pages_manager import PagesManager

    PagesManager.uses_pages_directory = False


def trust_no_forwarded_headers() -> None:
    """Makes the server's uvicorn take no X-Forwarded-For as a connection's address: by default it trusts the header
    from loopback, so any program on this machine (an SSH tunnel, another user) was seen at any address it claimed.
    The classroom's proxy vouches for the address it forwards with its token instead (uploads.client_address)."""
    os.environ["FORWARDED_ALLOW_IPS"] = ""


def main() -> None:
    from streamlit.web import cli  # before the thread starts: serving() imports from Streamlit too

    trust_no_forwarded_headers()
    every_session_through_app()
    IMPORTS.close()
    threading.Thread(target=warm_up, name="warm-up", daemon=True).start()
    sys.argv = ["streamlit", "run", str(SERVED), *sys.argv[1:]]
    sys.exit(cli.main())


if __name__ == "__main__":
    main()
