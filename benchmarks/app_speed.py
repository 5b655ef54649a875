"""App-side figures: building a step's figures, a 200-token input, and timings in Chromium."""

from __future__ import annotations

import json
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass, fields, replace

import torch
from playwright.sync_api import Page

from tests.fixtures.browser import (
    ARTIFACTS,
    CLICK_UNTIL_DRAWN,
    LAUNCH,
    PLAIN_RUN,
    PLAYER,
    TRIVIAL_RUN,
    app_server,
    chromium,
    count_frames_sent,
    percentile,
    step_view_position,
    wait_for_heatmaps,
    wait_for_step_view,
    wait_idle,
)
from transformer.analysis.views import attention_view
from transformer.decoding.candidate_words import candidate_words
from transformer.decoding.greedy import decode_ids, decode_with_chooser
from transformer.decoding.lens import logit_lens
from transformer.decoding.result import DecodeResult
from transformer.io.checkpoint import Checkpoint
from transformer.model.encoder_decoder import Transformer
from transformer.model.kinds import AttentionKind
from transformer.viz.attention import attention_heatmap, heads_or_means
from ui.players.step_player import STEP_RATES, step_data
from ui.state.keys import SENTENCE_LABEL

from .app_on_device import TWENTY_WORDS
from .model_speed import SENTENCE, Row, median_ms, no_eos_chooser


def step_view_payload(result: DecodeResult, tokenizer) -> int:
    """What a decode sends the explorer's step view (every step, once), as JSON; returns bytes."""
    return len(json.dumps(step_data(result, tokenizer, 0, False, "benchmark")))


def attention_page_figures(result: DecodeResult) -> int:
    """Every kind's model view (or its cheaper form past the budget) and one head's map; returns JSON bytes."""
    size = 0
    for kind in AttentionKind:
        view = attention_view(result, kind)
        rows = [f"layer {i + 1}" for i in range(view.maps.shape[0])]
        grid, _ = heads_or_means(view.maps, view.query_pieces, view.key_pieces, rows, kind, view.mask)
        head = attention_heatmap(view.maps[0, 0], view.query_pieces, view.key_pieces, kind, view.mask)
        size += len(grid.to_json()) + len(head.to_json())
    return size


def step_view_row(checkpoint: Checkpoint, repeats: int) -> Row:
    result = decode_with_chooser(checkpoint.model, checkpoint.tokenizer, SENTENCE)
    ms = median_ms(lambda: step_view_payload(result, checkpoint.tokenizer), repeats * 3)
    size = step_view_payload(result, checkpoint.tokenizer)
    note = f"{size / 1024:.0f} KiB of JSON for all {result.steps} steps; a step click then costs the server nothing"
    return Row("server side of the step view, once per decode", "—", None, ms, "≤ 100 ms", note)


def lens_row(checkpoint: Checkpoint, repeats: int) -> Row:
    """The logit lens of a 30-step decode against the whole decode (which includes it), and its share of the step
    view's JSON."""
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    ids = tokenizer.encode(SENTENCE) + [model.config.eos_id]
    chooser = no_eos_chooser(model.config.eos_id)
    result = decode_ids(model, tokenizer, ids, chooser, max_new_tokens=30)
    decode_ms = median_ms(lambda: decode_ids(model, tokenizer, ids, chooser, max_new_tokens=30), repeats)
    decoder_input = torch.tensor([[model.config.start_id, *result.tgt_ids[:-1]]])
    with torch.inference_mode():
        output = model(torch.tensor([ids]), decoder_input, need_weights=True)
    states = torch.cat(output.decoder_layer_states)
    lens_ms = median_ms(lambda: logit_lens(model, states, output.log_probs[0], result.tgt_ids), repeats * 3)
    data = step_data(result, tokenizer, 0, False, "benchmark")
    note = f"lens JSON {len(json.dumps(data['lens'])) / 1024:.1f} KiB of the step view's {len(json.dumps(data)) / 1024:.0f} KiB"
    return Row(f"logit lens of a {result.steps}-step decode", "the whole decode", decode_ms, lens_ms, "≤ 0.1", note)


def decoder_lens_row(checkpoint: Checkpoint, repeats: int) -> Row:
    """DecoderLens of the it pair's clean sentence, every encoder layer's translation in one batch, against one
    greedy decode of it (aim: at most a decode a layer and one more)."""
    from transformer.analysis.decoder_lens import decoder_lens
    from transformer.analysis.interventions.patching import CLEAN_EXAMPLE

    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    ids = tokenizer.encode(CLEAN_EXAMPLE) + [model.config.eos_id]
    decode_ms = median_ms(lambda: decode_ids(model, tokenizer, ids), repeats)
    lens_ms = median_ms(lambda: decoder_lens(model, tokenizer, ids), repeats)
    layers = model.config.n_encoder_layers
    what = f"DecoderLens, the it sentence from each of {layers} encoder layers, batched"
    return Row(what, "one greedy decode", decode_ms, lens_ms, f"≤ {layers + 1}")


def candidate_words_row(checkpoint: Checkpoint, repeats: int) -> Row:
    """The word each candidate of a 30-step decode would make (computed once per decode, beside it) against the
    decode itself, and its share of the step view's JSON."""
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    ids = tokenizer.encode(SENTENCE) + [model.config.eos_id]
    chooser = no_eos_chooser(model.config.eos_id)
    result = decode_ids(model, tokenizer, ids, chooser, max_new_tokens=30)
    decode_ms = median_ms(lambda: decode_ids(model, tokenizer, ids, chooser, max_new_tokens=30), repeats)
    words_ms = median_ms(lambda: candidate_words(model, tokenizer, result), repeats)
    words = candidate_words(model, tokenizer, result)
    made = sum(word is not None for row in words for word in row)
    note = (
        f"{made} of {result.topk_ids.numel()} candidates grow into a longer word; "
        f"JSON {len(json.dumps(words)) / 1024:.1f} KiB"
    )
    return Row(f"candidates' words of a {result.steps}-step decode", "the decode", decode_ms, words_ms, "≤ 1.5", note)


def long_input_row(checkpoint: Checkpoint) -> Row:
    """200 source tokens and 200 output tokens; the shipped model reads 128, so the same weights get max_len 256."""
    config = replace(checkpoint.config, max_len=256)
    model = Transformer(config).eval()
    model.load_state_dict(checkpoint.model.state_dict())
    tokenizer = checkpoint.tokenizer
    ids = (tokenizer.encode(" ".join(TWENTY_WORDS)) * 8)[:199] + [config.eos_id]
    start = time.perf_counter()
    result = decode_ids(model, tokenizer, ids, no_eos_chooser(config.eos_id), max_new_tokens=200)
    size = attention_page_figures(result)
    ms = (time.perf_counter() - start) * 1000
    recorded = sum(t.numel() * t.element_size() for t in (result.encoder_self, result.decoder_self, result.cross))
    note = f"attention recorded: {recorded / 2**20:.1f} MiB; figures {size / 2**20:.1f} MiB of JSON"
    return Row("200-token input: decode + attention page figures", "—", None, ms, "≤ 5000 ms", note)


# Clicks Play and resolves, in the page's own clock, once the step view shows its last step.
PLAY_TO_THE_END = f"""
async () => {{
  const root = {PLAYER};
  const last = root.querySelector('.slider').max;
  const start = performance.now();
  [...root.querySelectorAll('button')].find(b => b.textContent.includes('Play')).click();
  await new Promise(resolve => {{ const check = () => root.querySelector('.slider').value === last ? resolve() : requestAnimationFrame(check); requestAnimationFrame(check); }});
  return performance.now() - start;
}}
"""


TRIVIAL_LABEL = "Sentence"  # the sidebar text box of benchmarks/apps/trivial_page.py (not the app's label)


@dataclass(frozen=True)
class ColdStart:
    """Milliseconds from process start to: the server's first answer, the page's sidebar drawn, its content drawn."""

    answered_ms: float
    sidebar_ms: float
    drawn_ms: float


def cold_start(
    launcher: list[str], drawn: Callable[[Page], None] = wait_for_step_view, sidebar_text: str = SENTENCE_LABEL
) -> ColdStart:
    """Starts a server and opens its first page in an already open browser, as a visitor's is; the sidebar counts
    as drawn when `sidebar_text` shows in it (the app's sentence label; the trivial page has its own)."""
    with chromium() as browser:
        started = time.perf_counter()
        with app_server(ARTIFACTS / "cold-start.log", launcher=launcher) as server:
            answered = time.perf_counter()
            page = browser.new_page(viewport={"width": 1500, "height": 1100})
            page.goto(server.url)
            page.locator('[data-testid="stSidebar"]').get_by_text(sidebar_text, exact=True).wait_for()
            sidebar = time.perf_counter()
            drawn(page)
            finished = time.perf_counter()
    return ColdStart(*((moment - started) * 1000 for moment in (answered, sidebar, finished)))


def median_cold_start(
    launcher: list[str],
    drawn: Callable[[Page], None] = wait_for_step_view,
    runs: int = 3,
    sidebar_text: str = SENTENCE_LABEL,
) -> ColdStart:
    starts = [cold_start(launcher, drawn, sidebar_text) for _ in range(runs)]
    return ColdStart(*(statistics.median(getattr(s, field.name) for s in starts) for field in fields(ColdStart)))


def cold_start_rows(runs: int = 3) -> list[Row]:
    """The launcher's cold start against a plain `streamlit run app.py` and a trivial page, `runs` of each."""
    trivial = median_cold_start(TRIVIAL_RUN, lambda page: wait_for_heatmaps(page, 1), runs, TRIVIAL_LABEL)
    plain = median_cold_start(PLAIN_RUN, runs=runs)
    launched = median_cold_start(LAUNCH, runs=runs)
    return [
        Row(
            "app cold start to the explorer drawn, step view included (Chromium)",
            "streamlit run app.py",
            plain.drawn_ms,
            launched.drawn_ms,
            "ratio ≤ 1.0",
            f"python -m ui.server.launch to the step view drawn, median of {runs} each; a trivial Streamlit + "
            f"Plotly page (benchmarks/apps/trivial_page.py) to its figure drawn: {trivial.drawn_ms:.0f} ms",
        ),
        Row(
            "cold start, the server's first answer",
            "a trivial Streamlit page's",
            trivial.answered_ms,
            launched.answered_ms,
            "within 1000 ms",
            f"python -m ui.server.launch; plain streamlit run app.py: {plain.answered_ms:.0f} ms",
        ),
        Row(
            "cold start, the sidebar drawn",
            "streamlit run app.py",
            plain.sidebar_ms,
            launched.sidebar_ms,
            "report",
            f"python -m ui.server.launch; the trivial page's: {trivial.sidebar_ms:.0f} ms",
        ),
    ]


def browser_rows(translations: int = 5, steps: int = 20, runs: int = 3) -> list[Row]:
    """Timings in Chromium against a fresh app: cold start (against a plain `streamlit run app.py`, `runs` of each),
    translate, step, Play, memory."""
    cold_start = cold_start_rows(runs)
    with app_server(ARTIFACTS / "benchmark-server.log") as server, chromium() as browser:
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        sent = count_frames_sent(page)
        page.goto(server.url)
        wait_for_step_view(page)
        wait_idle(page)
        translate_ms, step_ms = [], []
        for sentence in TWENTY_WORDS[:translations]:
            page.get_by_label("Sentence").fill(sentence)
            translate_ms.append(page.evaluate(CLICK_UNTIL_DRAWN, ["Translate", sentence.split()[-1], 1]))
        wait_for_step_view(page, 1)
        wait_idle(page)
        before = len(sent)
        _, last = step_view_position(page)
        clicks = min(steps, last - 1)
        step_ms = [page.evaluate(CLICK_UNTIL_DRAWN, ["Next", f"Step {i + 2} of", i + 2]) for i in range(clicks)]
        page.evaluate(CLICK_UNTIL_DRAWN, ["First", "Step 1 of", 1])
        page.get_by_label("Steps a second when playing").select_option(str(max(STEP_RATES)))
        play_ms = page.evaluate(PLAY_TO_THE_END)
        frames = len(sent) - before
        walkthrough_ms = []  # Attention, step by step: every stage of a head, as a link opens it
        for _ in range(runs):
            started = time.perf_counter()
            page.goto(f"{server.url}/computation")
            page.get_by_text("The numbers match").wait_for()
            wait_for_heatmaps(page, 15)
            walkthrough_ms.append((time.perf_counter() - started) * 1000)
        memory = server.peak_memory_mb()
    return [
        *cold_start,
        Row(
            "Translate click to the step view drawn, 20 words",
            "—",
            None,
            statistics.median(translate_ms),
            "≤ 1500 ms",
            f"max {max(translate_ms):.0f} ms over {len(translate_ms)}",
        ),
        Row(
            "step click to the step's view redrawn (in the browser)",
            "—",
            None,
            percentile(step_ms, 0.95),
            "p95 ≤ 50 ms",
            f"p50 {statistics.median(step_ms):.1f} ms over {len(step_ms)} clicks; {frames} websocket frames sent "
            "while stepping and playing",
        ),
        Row(
            f"Play at {max(STEP_RATES)} a second: steps a second achieved",
            "—",
            None,
            (last - 1) * 1000 / play_ms,
            "≥ 5 steps/s",
            f"{last - 1} steps in {play_ms:.0f} ms; a rate, not ms",
        ),
        Row(
            "Attention, step by step opened to its 15 figures drawn",
            "—",
            None,
            statistics.median(walkthrough_ms),
            "report",
            f"median of {runs} link visits after the explorer; max {max(walkthrough_ms):.0f} ms",
        ),
        Row("peak memory of the app process", "—", None, memory, "report", "MiB (VmHWM), not ms"),
    ]
