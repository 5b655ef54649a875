"""A classroom at once: concurrent Chromium sessions against one `streamlit run app.py` (loopback only).

python -m benchmarks.load [--sessions 10]: each session types its own sentence, translates and
steps; every one must end with its own correct translation and attention, the server log clean.
Prints p50/p95 latencies of translate and step, and the server's peak memory.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
from dataclasses import dataclass

from playwright.async_api import async_playwright

from transformer.decoding.greedy import decode
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint
from transformer.text.pieces import readable_label

from .browser import (
    ARTIFACTS,
    CHROMIUM,
    CHROMIUM_ARGS,
    CLICK_UNTIL_DRAWN,
    PLAYER,
    app_server,
    proxy_server,
    step_view_drawn,
)

SENTENCES = [
    "Two dogs are playing in the snow.",
    "A man is riding a bicycle down the street.",
    "A little girl is climbing into a wooden playhouse.",
    "Three women are sitting on a bench in the park.",
    "A boy in a red shirt jumps into the lake.",
    "An old man is reading a newspaper at the cafe.",
    "Two children are building a sandcastle on the beach.",
    "A woman with a blue hat is selling flowers.",
    "A group of people are waiting for the bus.",
    "A black cat is sleeping on the sofa.",
    "A chef is cooking vegetables in a large pan.",
    "Four men are playing football on the grass.",
]
STEPS = 3
SOURCE_LABELS = (
    f"[...({PLAYER}).querySelector('.map').querySelectorAll('.key-label.bottom')].map(label => label.textContent)"
)


@dataclass
class SessionReport:
    sentence: str
    expected: str
    translate_ms: float
    step_ms: list[float]
    correct: bool
    own_attention: bool


async def one_session(browser, url: str, sentence: str, expected: str, source_pieces: list[str]) -> SessionReport:
    context = await browser.new_context(viewport={"width": 1400, "height": 1000})
    page = await context.new_page()
    await page.goto(url)
    await page.wait_for_function(step_view_drawn(), timeout=120_000)
    await page.get_by_label("Sentence").fill(sentence)
    translate_ms = await page.evaluate(CLICK_UNTIL_DRAWN, ["Translate", expected, 1])
    step_ms = [await page.evaluate(CLICK_UNTIL_DRAWN, ["Next", f"Step {i + 2} of", i + 2]) for i in range(STEPS)]
    text = await page.inner_text("body")
    labels = await page.evaluate(SOURCE_LABELS)
    await context.close()
    own = labels == [readable_label(piece) for piece in source_pieces]  # the step view's source labels
    return SessionReport(sentence, expected, translate_ms, step_ms, expected in text, own)


async def run_sessions(url: str, sessions: int) -> list[SessionReport]:
    checkpoint = load_checkpoint(DEFAULT_CHECKPOINT)
    chosen = [SENTENCES[i % len(SENTENCES)] for i in range(sessions)]
    results = [decode(checkpoint.model, checkpoint.tokenizer, s) for s in chosen]
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
        try:
            return await asyncio.wait_for(
                asyncio.gather(*(one_session(browser, url, s, r.text, r.src_pieces) for s, r in zip(chosen, results))),
                timeout=600,
            )
        finally:
            await browser.close()


def percentile(values: list[float], share: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(share * (len(ordered) - 1)))]


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
    parser = argparse.ArgumentParser(prog="python -m benchmarks.load", description=__doc__)
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
