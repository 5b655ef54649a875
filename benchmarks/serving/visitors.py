"""A classroom of simulated visitors that speak Streamlit's own websocket protocol, no browser.

python -m benchmarks.serving.visitors [--visitors 100] [--replicas 1 2 4]: for each replica count,
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
import os
import signal
import statistics
import threading
import time
from dataclasses import dataclass

from tests.fixtures.browser import ARTIFACTS, HealthProbe, percentile, proxy_server
from tests.fixtures.visitors import Visit, classroom


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
        prog="python -m benchmarks.serving.visitors",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
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
