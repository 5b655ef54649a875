"""A classroom of simulated visitors that speak Streamlit's own websocket protocol, no browser.

python -m benchmarks.visitors [--visitors 100] [--replicas 1 2 4]: for each replica count,
`scripts/serve.sh` starts the replicas behind nginx on loopback; each visitor opens the app,
types its sentence, translates, checks the step view's data (stepping through it is the
browser's own work, no message), then opens Attention maps at a step, as the page's own
messages (streamlit's BackMsg and ForwardMsg protobufs) ask. A visitor costs a websocket and a few
parsed messages, so a hundred fit beside the servers on one machine. Prints sessions served,
errors (wrong or missing translation, an exception on the page, a dropped connection, a
timeout), p50 and p95 of a translate and of opening a step's maps, each replica's peak memory, and
how fast `/_stcore/health` answered through nginx meanwhile (asked every 0.1 s: p50, p99, the
slowest, and how many failed). `--kill-after S` kills the first replica S seconds into the run,
as a crash would (serve.sh restarts it; its visitors move to another).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import signal
import statistics
import threading
import time
import urllib.request
from dataclasses import dataclass, field

import websockets
from streamlit.proto.BackMsg_pb2 import BackMsg
from streamlit.proto.ForwardMsg_pb2 import ForwardMsg
from streamlit.proto.WidgetStates_pb2 import WidgetState

from transformer.decoding.greedy import decode
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint
from ui.keys import SENTENCE_LABEL
from ui.step_player import sent_step_data

from .browser import ARTIFACTS, proxy_server
from .load import SENTENCES, percentile

OPEN_STEP = 2  # the step (0-based) whose Attention maps each visitor opens
# The widget a component's triggers arrive on: Streamlit's internal key prefix, the component's id, "__events".
TRIGGERS = "$$STREAMLIT_INTERNAL_KEY_{}__events"
RUN_TIMEOUT = 120.0  # seconds for one run of the page before the visitor counts an error
DONE = {ForwardMsg.FINISHED_SUCCESSFULLY, ForwardMsg.FINISHED_FRAGMENT_RUN_SUCCESSFULLY}


@dataclass
class Page:
    """What one run of the page drew, as far as a visitor needs it: widget ids, the text, any exception."""

    widgets: dict[str, tuple[str, str]] = field(default_factory=dict)  # label -> (widget id, fragment id)
    text: list[str] = field(default_factory=list)
    exceptions: list[str] = field(default_factory=list)
    step_view: tuple[str, dict] | None = None  # the explorer's step view: its id and the data it was sent
    charts: int = 0

    def read(self, message: ForwardMsg) -> None:
        if message.WhichOneof("type") != "delta" or message.delta.WhichOneof("type") != "new_element":
            return
        element = message.delta.new_element
        kind = element.WhichOneof("type")
        if kind == "markdown":
            self.text.append(element.markdown.body.replace("\\", ""))
        elif kind == "exception":
            self.exceptions.append(element.exception.message)
        elif kind == "bidi_component":
            self.step_view = (element.bidi_component.id, sent_step_data(element.bidi_component.json))
        elif kind == "plotly_chart":
            self.charts += 1
        elif kind in ("button", "text_area"):
            widget = getattr(element, kind)
            self.widgets[widget.label] = (widget.id, message.delta.fragment_id)


@dataclass
class Visit:
    sentence: str
    translate_ms: float | None = None
    open_ms: float | None = None
    error: str | None = None


class Visitor:
    """One browser tab's side of the conversation: rerun requests out, the page's messages in."""

    def __init__(self, connection) -> None:
        self.connection = connection
        self.page = Page()

    async def run(self, widgets: list[WidgetState], fragment_id: str = "") -> float:
        """Asks for a run (a click, a typed value) and reads until it finishes; returns its milliseconds."""
        message = BackMsg()
        message.rerun_script.widget_states.widgets.extend(widgets)
        message.rerun_script.fragment_id = fragment_id
        started = time.perf_counter()
        await self.connection.send(message.SerializeToString())
        page = Page(widgets=dict(self.page.widgets)) if fragment_id else Page()
        while True:
            reply = ForwardMsg()
            reply.ParseFromString(await asyncio.wait_for(self.connection.recv(), RUN_TIMEOUT))
            page.read(reply)
            if reply.WhichOneof("type") == "script_finished" and reply.script_finished in DONE:
                break
        self.page = page
        if page.exceptions:
            raise RuntimeError(f"the page raised: {page.exceptions[0]}")
        return (time.perf_counter() - started) * 1000

    def widget(self, label: str) -> tuple[str, str]:
        if label not in self.page.widgets:
            raise RuntimeError(f"no {label!r} on the page")
        return self.page.widgets[label]


async def visit(url: str, sentence: str, expected: str, delay: float) -> Visit:
    """Opens the app, types the sentence, translates, opens Attention maps at OPEN_STEP; outcome and timings."""
    await asyncio.sleep(delay)
    result = Visit(sentence)
    try:
        async with websockets.connect(
            f"{url.replace('http', 'ws', 1)}/_stcore/stream",
            subprotocols=["streamlit"],
            max_size=None,
            open_timeout=RUN_TIMEOUT,
        ) as connection:
            visitor = Visitor(connection)
            await visitor.run([])  # the first page, as the browser asks for it on opening
            text_id, _ = visitor.widget(SENTENCE_LABEL)
            translate_id, _ = visitor.widget("Translate")
            typed = WidgetState(id=text_id, string_value=sentence)
            result.translate_ms = await visitor.run([typed, WidgetState(id=translate_id, trigger_value=True)])
            if not any(expected in text for text in visitor.page.text):
                raise RuntimeError("the translation on the page is not the model's")
            if visitor.page.step_view is None or not expected.startswith(visitor.page.step_view[1]["so_far"][-1]):
                raise RuntimeError("the step view did not get this translation's steps")
            view_id, _ = visitor.page.step_view
            action = WidgetState(id=TRIGGERS.format(view_id))
            action.json_trigger_value = json.dumps(
                [{"event": "action", "value": {"name": "attention", "step": OPEN_STEP}}]
            )
            result.open_ms = await visitor.run([action])
            if not visitor.page.charts:
                raise RuntimeError("Attention maps drew no map")
    except Exception as error:  # every failure is a finding to count, not a crash of the generator
        result.error = f"{type(error).__name__}: {error}"
    return result


async def classroom(url: str, visitors: int, ramp_seconds: float, seed: int = 0) -> list[Visit]:
    """`visitors` visits arriving at random over ramp_seconds, each with a sentence and its expected translation."""
    checkpoint = load_checkpoint(DEFAULT_CHECKPOINT)
    chosen = [SENTENCES[i % len(SENTENCES)] for i in range(visitors)]
    expected = {s: decode(checkpoint.model, checkpoint.tokenizer, s).text for s in set(chosen)}
    arrivals = random.Random(seed)
    return await asyncio.gather(*(visit(url, s, expected[s], arrivals.uniform(0, ramp_seconds)) for s in chosen))


class HealthProbe:
    """Asks `/_stcore/health` every `every` seconds in its own thread while the block runs; each answer's time."""

    def __init__(self, url: str, every: float = 0.1, timeout: float = 30.0) -> None:
        self.url, self.every, self.timeout = f"{url}/_stcore/health", every, timeout
        self.seconds: list[float] = []
        self.failures = 0
        self._done = threading.Event()
        self._thread = threading.Thread(target=self._ask, daemon=True)

    def _ask(self) -> None:
        while not self._done.wait(self.every):
            started = time.perf_counter()
            try:
                urllib.request.urlopen(self.url, timeout=self.timeout).read()
                self.seconds.append(time.perf_counter() - started)
            except OSError:
                self.failures += 1

    def __enter__(self) -> HealthProbe:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._done.set()
        self._thread.join()

    def line(self) -> str:
        if not self.seconds:
            return f"health: no answer ({self.failures} failed)"
        ordered = sorted(self.seconds)
        return (
            f"health p50 {statistics.median(ordered):.2f} s, p99 {percentile(ordered, 0.99):.2f} s, slowest "
            f"{ordered[-1]:.2f} s, {self.failures} failed of {len(ordered) + self.failures}"
        )


@dataclass(frozen=True)
class Report:
    replicas: int
    visits: list[Visit]
    memory_mb: list[float]
    seconds: float
    health: str = ""

    def line(self) -> str:
        served = [v for v in self.visits if v.error is None]
        translate = [v.translate_ms for v in served]
        opened = [v.open_ms for v in served]
        figures = (
            f"translate p50 {statistics.median(translate):.0f} ms, p95 {percentile(translate, 0.95):.0f} ms; "
            f"a step's maps p50 {statistics.median(opened):.0f} ms, p95 {percentile(opened, 0.95):.0f} ms"
            if served
            else "nothing served"
        )
        memory = ", ".join(f"{mb:.0f}" for mb in self.memory_mb)
        return (
            f"| {self.replicas} | {len(served)}/{len(self.visits)} | {len(self.visits) - len(served)} | "
            f"{figures} | {memory} | {self.seconds:.0f} s | {self.health} |"
        )


def kill_later(pid: int | None, seconds: float) -> threading.Timer | None:
    """Kills a replica's process after `seconds`, as a crash would (SIGKILL: nothing of it is cleaned up)."""
    if pid is None:
        return None
    timer = threading.Timer(seconds, lambda: os.kill(pid, signal.SIGKILL))
    timer.daemon = True
    timer.start()
    return timer


def run(replicas: int, visitors: int, ramp_seconds: float, kill_after: float | None = None) -> Report:
    with proxy_server(replicas, ARTIFACTS / f"visitors-{replicas}") as proxy:
        started = time.perf_counter()
        killer = None if kill_after is None else kill_later(proxy.replica_pid(proxy.replica_ports[0]), kill_after)
        with HealthProbe(proxy.url) as health:
            visits = asyncio.run(classroom(proxy.url, visitors, ramp_seconds))
        if killer is not None:
            killer.cancel()
        seconds = time.perf_counter() - started
        memory = proxy.peak_memory_mb()
    return Report(replicas, visits, memory, seconds, health.line())


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.visitors", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--visitors", type=int, default=100)
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--ramp", type=float, default=20.0, help="seconds over which the visitors arrive")
    parser.add_argument("--kill-after", type=float, help="kill the first replica this many seconds into each run")
    args = parser.parse_args()
    print("| replicas | sessions served | errors | latency | peak MiB per replica | wall time | health |")
    print("| --- | --- | --- | --- | --- | --- | --- |")
    for replicas in args.replicas:
        report = run(replicas, args.visitors, args.ramp, args.kill_after)
        print(report.line(), flush=True)
        for error in sorted({v.error for v in report.visits if v.error})[:5]:
            print(f"  error: {error}")


if __name__ == "__main__":
    main()
