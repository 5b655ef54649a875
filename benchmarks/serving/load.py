"""A classroom at once: concurrent Chromium sessions against one `streamlit run app.py` (loopback only).

python -m benchmarks.serving.load [--sessions 10]: each session types its own sentence, translates and
steps; every one must end with its own correct translation and attention, the server log clean.
Prints p50/p95 latencies of translate and step, and the server's peak memory.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics

from tests.fixtures.browser import ARTIFACTS, app_server, percentile, proxy_server
from tests.fixtures.sessions import SessionReport, run_sessions


def load_test(sessions: int = 10, replicas: int | None = None) -> tuple[list[SessionReport], str, list[float]]:
    """Runs the sessions against a fresh server, or `replicas` behind nginx (scripts/serve.sh); returns their
    reports, the servers' logs and each one's peak memory (MiB)."""
    if replicas is None:
        log_path = ARTIFACTS / "load-server.log"
        with app_server(log_path) as server:
            reports = asyncio.run(run_sessions(server.url, sessions))
            memory = [server.peak_memory_mb()]
        return reports, log_path.read_text(), memory
    run_dir = ARTIFACTS / f"load-proxy-{replicas}"
    with proxy_server(replicas, run_dir) as proxy:
        reports = asyncio.run(run_sessions(proxy.url, sessions))
        memory = proxy.peak_memory_mb()
    logs = "\n".join(path.read_text() for path in sorted(run_dir.glob("replica-*.log")))
    return reports, logs, memory


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.serving.load", description=__doc__)
    parser.add_argument("--sessions", type=int, default=10)
    parser.add_argument("--replicas", type=int, help="through nginx to this many replicas (scripts/serve.sh)")
    args = parser.parse_args()
    reports, log, memory = load_test(args.sessions, args.replicas)
    translate = [r.translate_ms for r in reports]
    steps = [ms for r in reports for ms in r.step_ms]
    print(
        f"sessions: {len(reports)}, correct translations: {sum(r.correct for r in reports)}, "
        f"own attention: {sum(r.own_attention for r in reports)}, server errors: {log.count('Traceback')}"
    )
    print(f"translate ms: p50 {statistics.median(translate):.0f}, p95 {percentile(translate, 0.95):.0f}")
    print(f"step ms: p50 {statistics.median(steps):.0f}, p95 {percentile(steps, 0.95):.0f} ({len(steps)} clicks)")
    print(f"peak memory per server: {', '.join(f'{mb:.0f}' for mb in memory)} MiB")


if __name__ == "__main__":
    main()
