"""Starts the app with its model already on the way: `python -m ui.server.launch [streamlit run options]`.

Under a plain `streamlit run app.py` nothing of the model exists until the first visitor's page
runs: then it imports PyTorch, reads the default checkpoint and decodes the default sentence
(seconds on a 2-core CPU: docs/performance.md), after the browser has loaded the page's code. Here a thread
does that work as soon as the server takes connections, while the browser loads, and the first
page finds the checkpoint and its result in the process's caches (the same ones every page uses). It serves
ui/server/asgi.py: app.py, with pages that name the app's root.
"""

from __future__ import annotations

import ast
import importlib
import os
import socket
import sys
import threading
import time
from pathlib import Path

SERVED = Path(__file__).resolve().parent / "asgi.py"  # app.py, its pages naming the app's root


def serving() -> bool:
    """Whether the server takes connections yet (before that, the warm-up would only slow its start).

    Streamlit's options are read only once its runtime exists: read earlier, from this thread, they were parsed
    before the command line's, and every start printed "An update to the [server] config option section was
    detected... please restart"."""
    from streamlit import config
    from streamlit.runtime import Runtime

    if not Runtime.exists():
        return False
    address = config.get_option("server.address") or "127.0.0.1"
    try:
        socket.create_connection((address, config.get_option("server.port")), timeout=1).close()
        return True
    except OSError:
        return False


def warm_up() -> None:
    """Once the server answers, loads the default checkpoint and decodes the default sentence into the shared
    caches, while the first visitor's browser is still loading the page."""
    while not serving():
        time.sleep(0.05)
    from transformer.decoding.strategies import DecodeSettings
    from ui.services import checkpoints, models
    from ui.state.keys import DEFAULT_SENTENCE

    path = checkpoints.DEFAULT_CHECKPOINT
    try:
        checkpoint = checkpoints.load(path)
        models.decode_cached(checkpoint, checkpoints.checkpoint_key(path), DEFAULT_SENTENCE, DecodeSettings())
    except Exception:  # only a head start: the page does the same work and says what went wrong
        return


CODE = ("pages", "ui", "transformer")  # the folders whose imports are made before serving (ui/server's, not itself)


def import_before_serving(root: Path = Path(__file__).resolve().parents[2]) -> list[str]:
    """Imports every module the app's code imports, inside functions too, before the server takes connections,
    and returns their names. Imported by two page runs at once (or the warm-up thread and a page), a thread could
    meet the other's half-imported module: transformer.model's __init__ and its submodules import each other, and
    on a fresh server a page failed with "partially initialized module 'pandas'"."""
    names: dict[str, None] = {}
    for folder in CODE:
        for path in sorted((root / folder).rglob("*.py")):
            if path.name != "__main__.py" and folder != "pages" and not path.is_relative_to(SERVED.parent):
                names[".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")] = None
            for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
                if isinstance(node, ast.Import):
                    names |= dict.fromkeys(alias.name for alias in node.names)
                elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                    names[node.module] = None
    for name in names:
        try:
            importlib.import_module(name)
        except ImportError:  # an optional library this machine lacks: the code that uses it says so
            continue
    return list(names)


def trust_no_forwarded_headers() -> None:
    """Makes the server's uvicorn take no X-Forwarded-For as a connection's address: by default it trusts the header
    from loopback, so any program on this machine (an SSH tunnel, another user) was seen at any address it claimed.
    The classroom's proxy vouches for the address it forwards with its token instead (uploads.client_address)."""
    os.environ["FORWARDED_ALLOW_IPS"] = ""


def main() -> None:
    from ui.server.wiring import wire

    trust_no_forwarded_headers()
    import_before_serving()
    wire()
    threading.Thread(target=warm_up, name="warm-up", daemon=True).start()
    from streamlit.web import cli

    sys.argv = ["streamlit", "run", str(SERVED), *sys.argv[1:]]
    sys.exit(cli.main())


if __name__ == "__main__":
    main()
