"""How much of each output token comes from the source, over a corpus: ALTI+'s source share of every step of the
greedy outputs, its mean, and its mean by where the step falls in the output (tenths of the output's length), to see
whether it falls along the output as Ferrando et al. (2022) report.

    python -m benchmarks.quality.source_shares [--checkpoint PATH] --src ../shared/data/en-fr/flores.dev.en.gz [--sentences 200]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from transformer.analysis.contributions import contributions
from transformer.decoding.greedy import decode_with_chooser
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint
from transformer.text.files import read_lines

TENTHS = 10


def source_shares(checkpoint_path: str, sources: list[str]) -> tuple[np.ndarray, np.ndarray]:
    """Every step's source share, and each step's place in its output (0 first, up to 1 last), over all outputs."""
    checkpoint = load_checkpoint(checkpoint_path)
    shares, places = [], []
    for source in sources:
        result = decode_with_chooser(checkpoint.model, checkpoint.tokenizer, source)
        found = contributions(checkpoint.model, result.src_ids, result.tgt_ids)
        shares.append(found.source_share)
        places.append(np.arange(result.steps) / max(result.steps - 1, 1))
    return np.concatenate(shares), np.concatenate(places)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.quality.source_shares", description=__doc__)
    parser.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT))
    parser.add_argument("--src", required=True, help="source sentences, one a line (plain or gzip)")
    parser.add_argument("--sentences", type=int, default=200)
    args = parser.parse_args()
    sources = read_lines(args.src)[: args.sentences]
    started = time.perf_counter()
    shares, places = source_shares(args.checkpoint, sources)
    print(f"{len(sources)} sentences, {len(shares)} output steps, {time.perf_counter() - started:.0f} s")
    print(f"mean source share {shares.mean():.3f} (median {np.median(shares):.3f})")
    tenth = np.minimum((places * TENTHS).astype(int), TENTHS - 1)
    by_tenth = [shares[tenth == t].mean() for t in range(TENTHS)]
    print("by tenth of the output: " + " ".join(f"{value:.3f}" for value in by_tenth))
    slope = np.polyfit(places, shares, 1)[0]
    print(f"least-squares slope over the output (first step 0, last 1): {slope:+.3f}")


if __name__ == "__main__":
    main()
