"""App-side figures: building a step's figures, a 200-token input, and timings in Chromium."""

from __future__ import annotations

import statistics
import time
from dataclasses import replace

import torch

from transformer.analysis.views import attention_view
from transformer.decoding.greedy import decode, decode_ids
from transformer.decoding.result import DecodeResult
from transformer.io.checkpoint import Checkpoint
from transformer.model.encoder_decoder import Transformer
from transformer.model.kinds import AttentionKind
from transformer.viz.attention import attention_heatmap, heads_or_means, step_attention
from transformer.viz.charts import probability_bars

from .browser import ARTIFACTS, app_server, chromium, pause_playing, wait_for_heatmaps, wait_idle
from .model_speed import SENTENCE, Row, median_ms, no_eos_chooser

TWENTY_WORDS = [
    "A young boy in a blue jacket is throwing a red ball to his small brown dog in the park today.",
    "Two women are sitting on a wooden bench near the river and talking about the old city and its people.",
    "A man with a black hat plays the guitar on the street while a crowd of tourists watches him closely.",
    "Three children are running across the green field towards their mother who is holding a large white kite.",
    "An old woman in a long red coat is buying fresh bread and vegetables at the busy morning market.",
]


def step_figures(result: DecodeResult, step: int, tokenizer) -> int:
    """What a step click builds on the server (the three figures of the step view), serialised; returns bytes."""
    ids = result.topk_ids[step].tolist()
    figures = [
        probability_bars([tokenizer.id_to_piece(i) for i in ids], result.topk_probs[step].numpy(), 0, "top"),
        step_attention(result.cross[:, :, step].numpy(), result.src_pieces, "cross"),
        step_attention(
            result.decoder_self[:, :, step, : step + 1].numpy(), result.decoder_input_pieces[: step + 1], "self"
        ),
    ]
    return sum(len(figure.to_json()) for figure in figures)


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


def server_step_row(checkpoint: Checkpoint, repeats: int) -> Row:
    result = decode(checkpoint.model, checkpoint.tokenizer, SENTENCE)
    middle = result.steps // 2
    ms = median_ms(lambda: step_figures(result, middle, checkpoint.tokenizer), repeats * 3)
    size = step_figures(result, middle, checkpoint.tokenizer)
    return Row(
        "server side of a step click (3 figures + JSON)", "—", None, ms, "≤ 100 ms", f"{size / 1024:.0f} KiB of JSON"
    )


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


# Clicks a button and resolves, in the page's own clock, once the step view shows `step` in the text and in
# the titles of both attention figures, Plotly has drawn them, and Streamlit's run is over.
CLICK_UNTIL_DRAWN = """
async ([label, text, step]) => {
  const drawn = () => {
    const titles = [...document.querySelectorAll('.js-plotly-plot')].map(g => g._fullLayout?.title?.text || '');
    return document.body.innerText.includes(text)
      && titles.filter(t => t.includes(`of step ${step} over`)).length >= 2
      && !document.querySelector('[data-testid="stStatusWidget"]');
  };
  const start = performance.now();
  [...document.querySelectorAll('button')].find(b => b.innerText.trim().endsWith(label)).click();
  await new Promise(resolve => { const check = () => drawn() ? resolve() : requestAnimationFrame(check); requestAnimationFrame(check); });
  await new Promise(r => requestAnimationFrame(() => requestAnimationFrame(r)));
  return performance.now() - start;
}
"""


def browser_rows(translations: int = 5, steps: int = 10) -> list[Row]:
    """Timings in Chromium against a fresh `streamlit run app.py`: cold start, translate, step, memory."""
    log = ARTIFACTS / "benchmark-server.log"
    started = time.perf_counter()
    with app_server(log) as server, chromium() as browser:
        healthy_ms = (time.perf_counter() - started) * 1000
        page = browser.new_page(viewport={"width": 1500, "height": 1100})
        page.goto(server.url)
        wait_for_heatmaps(page, 2)
        cold_ms = (time.perf_counter() - started) * 1000
        wait_idle(page)
        translate_ms, step_ms = [], []
        for sentence in TWENTY_WORDS[:translations]:
            page.get_by_label("Sentence").fill(sentence)
            translate_ms.append(page.evaluate(CLICK_UNTIL_DRAWN, ["Translate", sentence.split()[-1], 1]))
        for index in range(steps):
            step_ms.append(page.evaluate(CLICK_UNTIL_DRAWN, ["Next", f"Step {index + 2} of", index + 2]))
        pause_ms, moved = [], 0
        for _ in range(3):
            page.get_by_role("button", name="First").click()
            page.get_by_text("Step 1 of").wait_for()
            wait_idle(page)
            page.get_by_role("button", name="Play").click()
            page.get_by_role("button", name="Pause").wait_for()
            page.get_by_text("Step 3 of").wait_for(timeout=60_000)
            elapsed, at, after = pause_playing(page)
            pause_ms.append(elapsed)
            moved += after != at
        memory = server.peak_memory_mb()
    return [
        Row(
            "app cold start to first page drawn (Chromium)",
            "—",
            None,
            cold_ms,
            "≤ 5000 ms",
            f"of which {healthy_ms:.0f} ms until the server answers",
        ),  # fmt: skip
        Row(
            "Translate click to heatmaps drawn, 20 words",
            "—",
            None,
            statistics.median(translate_ms),
            "≤ 1500 ms",
            f"max {max(translate_ms):.0f} ms over {len(translate_ms)}",
        ),  # fmt: skip
        Row(
            "step click to the step's figures redrawn",
            "—",
            None,
            statistics.median(step_ms),
            "≤ 300 ms",
            f"max {max(step_ms):.0f} ms over {len(step_ms)}",
        ),  # fmt: skip
        Row(
            "Pause click to the stepping stopped",
            "—",
            None,
            statistics.median(pause_ms),
            "≤ 300 ms",
            f"max {max(pause_ms):.0f} ms over {len(pause_ms)}; moved on after the click {moved} times",
        ),  # fmt: skip
        Row("peak memory of the app process", "—", None, memory, "report", "MiB (VmHWM), not ms"),
    ]


def cpu_name() -> str:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def machine() -> str:
    return f"{cpu_name()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}"
