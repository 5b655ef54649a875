"""Activation patching of the it pair: the encoder stream's whole grid batched, against one site a pass and against
one decode of the sentence; every site of every family (the stream, the encoder's heads at each position, the
decoder's heads and stream at the step) against one decode; attribution patching's estimate of every site against
one decode and against exact patching; and exact patching of the built-in pair sets. With --scale, the rows that need
several processes or a large model (minutes, alone on a quiet machine): `patch-set` of the built-in sets' first
pairs in 2 processes (torchrun, a thread each) against 1 process of 2 threads, both from a fresh start (loading the
model is part of a run); and attribution patching of a set at NLLB-600M's shape (random weights, made-up pieces:
only the shapes count), a pair at a time as `patch-set --method attribution` runs them, against one greedy decode a
pair, with what 1,000 pairs would take at that pace."""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch
from torch.utils.flop_counter import FlopCounterMode

from benchmarks.model_speed import Row, median_ms, table
from transformer.analysis.interventions.attribution_patching import attribution_patching
from transformer.analysis.interventions.contrastive import patched_pairs
from transformer.analysis.interventions.pair_sets import BUILT_IN_SETS, Pair, pair_line, read_pair_set
from transformer.analysis.interventions.patching import CLEAN_EXAMPLE as CLEAN
from transformer.analysis.interventions.patching import CORRUPT_EXAMPLE as CORRUPT
from transformer.analysis.interventions.patching import contrast_of_texts, patch_encoder_stream
from transformer.analysis.interventions.sites import patch_every_site
from transformer.decoding.strategies import decode_text
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, Checkpoint, load_checkpoint
from transformer.model.encoder_decoder import Transformer
from transformer.text.pieces import readable
from transformer.toolkits.opening import load_any_checkpoint


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
    pairs = [
        pair for path in sorted(BUILT_IN_SETS.glob("*.jsonl")) for pair in read_pair_set(path).pairs[:pairs_per_set]
    ]
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


def seconds_of(command: list[str], threads: int) -> float:
    """The wall time of a command run to its end with `threads` threads a process."""
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, env=os.environ | {"OMP_NUM_THREADS": str(threads)})
    return time.perf_counter() - started


def two_processes_row(pairs_per_set: int) -> Row:
    """patch-set of the built-in sets' first pairs: 2 processes of a thread each against 1 of 2 threads."""
    pairs = [
        pair for path in sorted(BUILT_IN_SETS.glob("*.jsonl")) for pair in read_pair_set(path).pairs[:pairs_per_set]
    ]
    with tempfile.TemporaryDirectory() as folder:
        listed = Path(folder) / "set.jsonl"
        listed.write_text("".join(pair_line(pair) + "\n" for pair in pairs))
        run = ["-m", "transformer", "patch-set", "--pairs", str(listed), "--out"]
        one = seconds_of([sys.executable, *run, f"{folder}/one"], threads=2)
        torchrun = str(Path(sys.executable).with_name("torchrun"))
        two = seconds_of([torchrun, "--nproc_per_node", "2", *run, f"{folder}/two"], threads=1)
        same = json.loads(Path(f"{folder}/one/summary.json").read_text()) == json.loads(
            Path(f"{folder}/two/summary.json").read_text()
        )
    what = f"patch-set, every site of {len(pairs)} built-in pairs, 2 processes (torchrun, a thread each)"
    note = f"{one:.0f} s against {two:.0f} s, the same summary: {same}"
    return Row(what, "1 process of 2 threads", one * 1000, two * 1000, "report", note)


def nllb_pairs(checkpoint, count: int, seed: int = 0) -> list[Pair]:
    """Pairs of ten-word sentences differing in their fifth word. The made-up tokenizer knows no word of a text (each
    is <unk>) but its language codes, so the fifth word is one of those, another in the corrupted sentence: the two
    sources differ at one position. The target is the clean translation's first word (random weights write what
    they write), the foil another."""
    rng, codes, pairs = random.Random(seed), ["deu_Latn", "spa_Latn", "ita_Latn", "por_Latn"], []
    for number in range(count):
        words = [f"w{rng.randrange(1, 5000)}" for _ in range(10)]
        words[4] = codes[number % len(codes)]
        corrupt = [*words[:4], codes[(number + 1) % len(codes)], *words[5:]]
        pieces = decode_text(checkpoint.model, checkpoint.tokenizer, " ".join(words)).tgt_pieces
        target = readable(next(piece for piece in pieces if piece.startswith("▁")))  # past the language's code
        foil = "w9999" if target != "w9999" else "w9998"
        pairs.append(Pair(f"nllb-{number}", " ".join(words), " ".join(corrupt), target, foil))
    return pairs


def nllb_attribution_row(count: int) -> Row:
    """Attribution patching of `count` pairs at NLLB-600M's shape, one after another, against a decode of each."""
    from benchmarks.hf_families import save_nllb_at_size  # imports the tests' Hugging Face fixtures

    folder = Path(tempfile.mkdtemp())
    try:
        save_nllb_at_size(folder, "600M")
        checkpoint = load_any_checkpoint(folder)
        pairs = nllb_pairs(checkpoint, count)
        started = time.perf_counter()
        for pair in pairs:
            decode_text(checkpoint.model, checkpoint.tokenizer, pair.clean)
        decodes = time.perf_counter() - started
        started = time.perf_counter()
        outcomes = [
            run.outcome.status
            for run in patched_pairs(checkpoint.model, checkpoint.tokenizer, pairs, method="attribution")
        ]
        estimated = time.perf_counter() - started
    finally:
        shutil.rmtree(folder)
    read = outcomes.count("read")
    note = (
        f"{estimated / count:.1f} s a pair ({read} of {count} read; its clean decode included): 1,000 pairs in "
        f"about {estimated / count * 1000 / 60:.0f} min on this machine"
    )
    what = f"attribution patching, every site of {count} pairs at NLLB-600M's shape"
    return Row(what, "one greedy decode a pair", decodes * 1000, estimated * 1000, "report", note)


if __name__ == "__main__":  # these rows alone, on a quiet machine
    parser = argparse.ArgumentParser(prog="python -m benchmarks.patching_speed", description=__doc__.split("\n\n")[0])
    parser.add_argument("repeats", nargs="?", type=int, default=9)
    parser.add_argument("device", nargs="?", default="cpu")
    parser.add_argument(
        "--scale",
        action="store_true",
        help="instead, the rows that need processes or a large model (minutes): patch-set in 2 processes against 1, "
        "and attribution patching at NLLB-600M's shape",
    )
    parser.add_argument(
        "--pairs", type=int, default=40, help="of each built-in set, for the processes' row (0: skip it)"
    )
    parser.add_argument("--nllb-pairs", type=int, default=20, help="pairs at NLLB-600M's shape (0: skip that row)")
    args = parser.parse_args()
    if args.scale:
        rows = [two_processes_row(args.pairs)] if args.pairs else []
        print(table(rows + ([nllb_attribution_row(args.nllb_pairs)] if args.nllb_pairs else [])))
    else:
        checkpoint = load_checkpoint(DEFAULT_CHECKPOINT, args.device)
        print(table([*patching_rows(checkpoint, args.repeats), pair_set_row(checkpoint, None)]))
