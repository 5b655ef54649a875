"""A real `streamlit run app.py` server (or scripts/serve.sh's replicas behind nginx) on loopback, and Debian's
Chromium driven by Playwright."""

from __future__ import annotations

import contextlib
import os
import random
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from playwright.sync_api import Browser, Page, sync_playwright

REPO = Path(__file__).resolve().parent.parent
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking"]
ARTIFACTS = REPO / "tests" / "artifacts"  # screenshots and server logs, ignored by git


@dataclass(frozen=True)
class Server:
    url: str
    process: subprocess.Popen

    def peak_memory_mb(self) -> float:
        """The server process's peak resident memory (VmHWM), Linux only."""
        return _peak_mb(self.process.pid)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def free_port_block(count: int) -> int:
    """The first of `count` consecutive free ports, below Linux's ephemeral range (where outgoing
    connections would take the ports next to a free one)."""
    for first in random.Random().sample(range(20_000, 32_000, 16), 50):
        try:
            with contextlib.ExitStack() as held:
                for port in range(first, first + count):
                    sock = held.enter_context(socket.socket())
                    sock.bind(("127.0.0.1", port))
            return first
        except OSError:
            continue
    raise RuntimeError(f"no {count} consecutive free ports")


def streamlit_run(script: Path) -> list[str]:
    return [sys.executable, "-m", "streamlit", "run", str(script)]


LAUNCH = [sys.executable, "-m", "ui.launch"]  # how scripts/start.sh starts the app: the model loads at once
PLAIN_RUN = streamlit_run(REPO / "app.py")  # the model loads at the first visit
TRIVIAL_RUN = streamlit_run(REPO / "benchmarks" / "apps" / "trivial_page.py")  # no model


@contextlib.contextmanager
def app_server(log_path: Path, timeout: float = 60.0, launcher: list[str] = LAUNCH) -> Iterator[Server]:
    """Starts the app as the README does and yields it once it answers; the log is kept for assertions."""
    port = free_port()
    command = [*launcher, "--server.port", str(port), "--server.address", "127.0.0.1"]
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "w") as log:
        server = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + timeout
            while True:
                try:
                    urllib.request.urlopen(f"{url}/_stcore/health", timeout=2)
                    break
                except OSError:
                    if server.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"the app did not start; see {log_path}") from None
                    time.sleep(0.05)
            yield Server(url, server)
        finally:
            server.terminate()
            server.wait(timeout=20)


@dataclass(frozen=True)
class Proxy:
    """scripts/serve.sh running: nginx's URL and the replicas' loopback ports."""

    url: str
    replica_ports: list[int]

    def replica_pid(self, port: int) -> int | None:
        """The process of the replica on `port`, found by its command line (None once it has stopped)."""
        for status in Path("/proc").glob("[0-9]*/cmdline"):
            try:
                words = status.read_bytes().split(b"\0")
            except OSError:
                continue
            if f"{port}".encode() in words and b"--server.port" in words:
                return int(status.parent.name)
        return None

    def peak_memory_mb(self) -> list[float]:
        """Each replica's peak resident memory (VmHWM), Linux only."""
        return [_peak_mb(pid) for port in self.replica_ports if (pid := self.replica_pid(port))]


def _peak_mb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmHWM in /proc status")


@contextlib.contextmanager
def proxy_server(replicas: int, run_dir: Path, timeout: float = 240.0) -> Iterator[Proxy]:
    """`bash scripts/serve.sh --replicas N` on loopback, as docs/classroom.md starts a classroom; stopped after."""
    port = free_port_block(replicas + 1)
    command = [
        "bash",
        str(REPO / "scripts" / "serve.sh"),
        "--replicas",
        str(replicas),
        "--port",
        str(port),
        "--address",
        "127.0.0.1",
        "--run-dir",
        str(run_dir),
    ]
    run_dir.mkdir(parents=True, exist_ok=True)
    with open(run_dir / "serve.log", "w") as log:
        serve = subprocess.Popen(command, cwd=REPO, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            deadline = time.monotonic() + timeout
            while "Serving" not in (run_dir / "serve.log").read_text():
                if serve.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError(f"serve.sh did not start; see {run_dir / 'serve.log'}")
                time.sleep(0.3)
            yield Proxy(f"http://127.0.0.1:{port}", [port + k for k in range(1, replicas + 1)])
        finally:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(serve.pid, signal.SIGTERM)
            serve.wait(timeout=30)


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        raise RuntimeError(f"{CHROMIUM} is missing: install it with `apt-get install -y chromium`")
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def wait_for_heatmaps(page: Page, count: int, timeout: float = 60_000) -> None:
    """Waits until `count` heatmaps are drawn (Plotly paints each as an image in a heatmap layer)."""
    page.wait_for_function(
        f"document.querySelectorAll('.js-plotly-plot .heatmaplayer image').length >= {count}", timeout=timeout
    )


# The HTML report's figures within the viewport are drawn (Plotly made the holder a plot with its SVG).
REPORT_SCREEN_DRAWN = """() => [...document.querySelectorAll('.figure')]
  .filter((holder) => holder.getBoundingClientRect().top < innerHeight)
  .every((holder) => holder.querySelector('.main-svg'))"""
REPORT_ALL_DRAWN = (
    "() => [...document.querySelectorAll('.figure')].every((holder) => holder.querySelector('.main-svg'))"
)


def wait_idle(page: Page, timeout: float = 60_000) -> None:
    """Waits until Streamlit has finished the current run (its status widget gone)."""
    page.wait_for_timeout(150)
    page.wait_for_function("!document.querySelector('[data-testid=\"stStatusWidget\"]')", timeout=timeout)


# The explorer's step view (ui/step_player.js), drawn inside its own shadow root.
PLAYER = "document.querySelector('[data-testid=\"stBidiComponentIsolated\"]')?.shadowRoot"

# Clicks a button (of the page or of the step view, by a part of its text) and resolves, in the page's own clock,
# once `text` is on the page, the step view's two maps are those of `step`, Streamlit's run (if any) is over,
# and the browser has painted the frame that shows them.
CLICK_UNTIL_DRAWN = f"""
async ([label, text, step]) => {{
  const player = () => {PLAYER};
  const buttons = [...document.querySelectorAll('button'), ...(player()?.querySelectorAll('button') ?? [])];
  const button = buttons.find(b => b.textContent.includes(label));
  const before = player()?.querySelector('.player');
  const rerun = !player()?.contains(button);  // a button of the page: the step view is drawn anew with new data
  const drawn = () => {{
    const root = player();
    if (!root || (rerun && root.querySelector('.player') === before)) return false;
    const titles = [...root.querySelectorAll('.map-title')].map(t => t.textContent);
    return (document.body.innerText.includes(text) || root.textContent.includes(text))
      && titles.filter(t => t.includes(`of step ${{step}} over`)).length >= 2
      && !document.querySelector('[data-testid="stStatusWidget"]');
  }};
  const start = performance.now();
  button.click();
  await new Promise(resolve => {{ const check = () => drawn() ? resolve() : requestAnimationFrame(check); check(); }});
  await new Promise(painted => requestAnimationFrame(() => setTimeout(painted, 0)));  // the frame that shows it
  return performance.now() - start;
}}
"""


def step_view_drawn(step: int | None = None) -> str:
    """A JavaScript test of whether the explorer's step view has drawn its two maps (those of `step`, 1-based,
    when given), for Playwright's wait_for_function, sync or async."""
    title = f"of step {step} over" if step else "of step "
    return (
        f"[...({PLAYER})?.querySelectorAll('.map-title') ?? []]"
        f".filter(t => t.textContent.includes('{title}')).length >= 2"
    )


def wait_for_step_view(page: Page, step: int | None = None, timeout: float = 60_000) -> None:
    """Waits until step_view_drawn(step) holds."""
    page.wait_for_function(step_view_drawn(step), timeout=timeout)


def step_view_position(page: Page) -> tuple[int, int]:
    """The step the step view shows and how many it has (1-based), as its slider holds them."""
    shown, steps = page.evaluate(f"(slider => [slider.value, slider.max])({PLAYER}.querySelector('.slider'))")
    return int(shown), int(steps)


def count_frames_sent(page: Page) -> list[str]:
    """A list that grows with every websocket frame the page sends to the server from now on."""
    sent: list[str] = []
    page.on("websocket", lambda socket: socket.on("framesent", lambda payload: sent.append(payload)))
    return sent
