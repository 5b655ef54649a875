"""Activation patching of the it pair: the encoder stream's whole grid batched, against one site a pass and against
one decode of the sentence; every site of every family (the stream, the encoder's heads at each position, the
decoder's heads and stream at the step) against one decode; attribution patching's estimate of every site against
one decode and against exact patching; and exact patching of the built-in pair sets."""

from __future__ import annotations

import sys
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.model_speed import Row, median_ms, table
from transformer.analysis.interventions.attribution_patching import attribution_patching
from transformer.analysis.interventions.contrastive import patched_pairs
from transformer.analysis.interventions.pair_sets import read_pair_set
from transformer.analysis.interventions.patching import CLEAN_EXAMPLE as CLEAN
from transformer.analysis.interventions.patching import CORRUPT_EXAMPLE as CORRUPT
from transformer.analysis.interventions.patching import contrast_of_texts, patch_encoder_stream
from transformer.analysis.interventions.sites import patch_every_site
from transformer.decoding.strategies import decode_text
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, Checkpoint, load_checkpoint
from transformer.model.encoder_decoder import Transformer

SETS = Path(__file__).resolve().parents[1] / "transformer" / "analysis" / "interventions" / "sets"


def products_floor(model: Transformer, work, repeats: int) -> tuple[float, float, float]:
    """The time `work`'s matrix products (torch's count of its floating-point operations) would take at the rate
    this machine runs one of the batch's largest, the decoder's feed-forward over 61 runs of 17 positions: the floor
    no batching goes under; and the count (GFLOP) and the rate (GFLOP/s)."""
    with FlopCounterMode(display=False) as counter:
        work()
    inner = model.decoder_layers[0].feed_forward.inner
    rows = torch.randn(61 * 17, inner.in_features, device=inner.weight.device)
    waited = torch.cuda.synchronize if rows.is_cuda else lambda: None
    with torch.inference_mode():
        product_ms = median_ms(lambda: (inner(rows), waited()), repeats * 10)
    rate = 2 * rows.size(0) * inner.in_features * inner.out_features / product_ms / 1e6
    flops = counter.get_total_flops() / 1e9
    return flops / rate * 1e3, flops, rate


def patching_rows(checkpoint: Checkpoint, repeats: int) -> list[Row]:
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    contrast, _ = contrast_of_texts(model, tokenizer, CLEAN, CORRUPT, "il", "elle")  # "parce qu'il était"
    batched = median_ms(lambda: patch_encoder_stream(model, contrast), repeats)
    alone = median_ms(lambda: patch_encoder_stream(model, contrast, sites_per_batch=1), repeats)
    decode = median_ms(lambda: decode_text(model, tokenizer, CLEAN), repeats)
    every = median_ms(lambda: patch_every_site(model, contrast), repeats)
    estimated = median_ms(lambda: attribution_patching(model, contrast), repeats)
    floor, flops, rate = products_floor(model, lambda: patch_encoder_stream(model, contrast), repeats)
    sites = (model.config.n_encoder_layers + 1) * len(contrast.clean_src)
    what = f"activation patching, the encoder stream's {sites} sites of the it pair"
    return [
        Row(what + ", batched", "one site a pass", alone, batched, "≤ 0.25"),
        Row(what + ", batched", "one greedy decode of the sentence", decode, batched, "report (aim ≤ 20x)"),
        Row(
            what + ", batched",
            "its products at this machine's rate",
            floor,
            batched,
            "report",
            f"{flops:.2f} GFLOP at {rate:.0f} GFLOP/s",
        ),
        Row("activation patching, every site of the it pair, batched", "one greedy decode", decode, every, "report"),
        Row("attribution patching, every site of the it pair", "one greedy decode", decode, estimated, "aim ≤ 3"),
        Row(
            "attribution patching, every site of the it pair",
            "exact patching of every site",
            every,
            estimated,
            "report",
        ),
    ]


def pair_set_row(checkpoint: Checkpoint, pairs_per_set: int | None) -> Row:
    """Exact patching of every site of the built-in sets' pairs (the first `pairs_per_set` of each, or all), one
    pair after another as patch-set runs them, against one greedy decode of each pair's clean sentence."""
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    pairs = [pair for path in sorted(SETS.glob("*.jsonl")) for pair in read_pair_set(path).pairs[:pairs_per_set]]
    started = time.perf_counter()
    for _ in patched_pairs(model, tokenizer, pairs):
        pass
    total = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    for pair in pairs:
        decode_text(model, tokenizer, pair.clean)
    decodes = (time.perf_counter() - started) * 1000
    what = f"exact patching, every site of {len(pairs)} pairs of the built-in sets"
    return Row(
        what, "one greedy decode a pair", decodes, total, "report (aim: 360 in < 10 min)", f"{total / 1e3:.0f} s"
    )


if __name__ == "__main__":  # python -m benchmarks.patching_speed [repeats] [device]: these rows alone, quiet machine
    repeats, device = int(sys.argv[1]) if len(sys.argv) > 1 else 9, sys.argv[2] if len(sys.argv) > 2 else "cpu"
    checkpoint = load_checkpoint(DEFAULT_CHECKPOINT, device)
    print(table([*patching_rows(checkpoint, repeats), pair_set_row(checkpoint, None)]))
