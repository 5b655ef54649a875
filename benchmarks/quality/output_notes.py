"""How well the notes find nonsense: each checkpoint greedy-decodes the first N sentences of each dev set, and the
"unsure" note (mean log-probability of the output's tokens under the model's UNSURE_BELOW, or the default's for
another model) is scored against the sentence chrF of its output: the share of poor outputs (chrF < 20) it notes, and
of good ones (chrF > 60); then the share of poor outputs that get no note of any kind; the threshold that would note
at most 10 % of the good ones is printed after. With --language FILE (repeatable), the share of each file's lines of
four words or more that the "does not read like" note would be given (the tokenizer alone, no decode).

    python -m benchmarks.quality.output_notes --checkpoint checkpoints/en-fr-captions.safetensors \\
        --pairs ../shared/data/en-fr/flores.dev.en.gz ../shared/data/en-fr/flores.dev.fr.gz ... --per-set 150
    python -m benchmarks.quality.output_notes --checkpoint checkpoints/en-fr-general.safetensors \\
        --language ../shared/data/en-fr/flores.dev.en.gz --language ../shared/data/multi30k/val.de.gz
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import sacrebleu
import torch

from transformer.decoding.degenerate import (
    FOREIGN_MIN_WORDS,
    GOOD,
    POOR,
    UNSURE_BELOW,
    calibrated,
    decode_notes,
    foreign_note,
    mean_log_prob,
    noted,
)
from transformer.decoding.greedy import decode_with_chooser
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint
from transformer.text.files import read_lines


def measure(checkpoint_path: Path, pairs: list[tuple[Path, Path]], per_set: int) -> dict[str, np.ndarray]:
    """Per dev set, (chrF, mean log-probability, notes given) of each output."""
    checkpoint = load_checkpoint(checkpoint_path)
    below = UNSURE_BELOW.get(checkpoint_path.stem, UNSURE_BELOW[DEFAULT_CHECKPOINT.stem])
    eos = checkpoint.tokenizer.id_to_piece(checkpoint.config.eos_id)
    found = {}
    for source, reference in pairs:
        rows = []
        for text, wanted in zip(read_lines(source)[:per_set], read_lines(reference)[:per_set], strict=True):
            result = decode_with_chooser(checkpoint.model, checkpoint.tokenizer, text)
            notes = decode_notes(result, eos, below)
            rows.append((sacrebleu.sentence_chrf(result.text, [wanted]).score, mean_log_prob(result), len(notes)))
        found[source.name.removesuffix(".gz").removesuffix(".en")] = np.array(rows)
    return found


def percent(share: float) -> str:
    return "–" if np.isnan(share) else f"{share:.0%}"


def main() -> None:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.quality.output_notes",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--checkpoint", type=Path, action="append", required=True, help="repeat for several")
    parser.add_argument("--pairs", type=Path, nargs=2, action="append", default=[], metavar=("SRC", "REF"))
    parser.add_argument("--language", type=Path, action="append", default=[], help="lines to try the language note on")
    parser.add_argument("--per-set", type=int, default=150)
    args = parser.parse_args()
    torch.set_num_threads(1)
    for path in args.checkpoint:
        if args.language:
            language_rows(path, args.language)
        if not args.pairs:
            continue
        found = measure(path, [tuple(pair) for pair in args.pairs], args.per_set)
        below = UNSURE_BELOW.get(path.stem, UNSURE_BELOW[DEFAULT_CHECKPOINT.stem])
        print(f"\n{path.name}: the note below {below} (mean log-probability of the output's tokens)")
        print(
            "| dev set | outputs | mean chrF | poor (< 20) | poor noted | good (> 60) | good noted | poor with no note |"
        )
        print("| --- | --- | --- | --- | --- | --- | --- | --- |")
        for name, rows in [*found.items(), ("all", np.concatenate(list(found.values())))]:
            poor_noted, good_noted = noted(rows, below)
            print(
                f"| {name} | {len(rows)} | {rows[:, 0].mean():.1f} | {np.mean(rows[:, 0] < POOR):.0%} | "
                f"{percent(poor_noted)} | {np.mean(rows[:, 0] > GOOD):.0%} | {percent(good_noted)} | "
                f"{percent(np.mean(rows[rows[:, 0] < POOR, 2] == 0) if (rows[:, 0] < POOR).any() else np.nan)} |"
            )
        everything = np.concatenate(list(found.values()))
        best = calibrated(everything)
        if best is not None:
            poor_noted, good_noted = noted(everything, best)
            print(f"calibrated on these outputs: {best:.3f} (poor noted {poor_noted:.0%}, good noted {good_noted:.0%})")


def language_rows(checkpoint_path: Path, files: list[Path]) -> None:
    """The share of each file's lines that the language note would be given, by the checkpoint's tokenizer."""
    tokenizer = load_checkpoint(checkpoint_path).tokenizer
    print(f"\n{checkpoint_path.name}: the language note (pieces per word)")
    print("| file | lines of 4 words or more | noted | pieces per word: median | 99th percentile |")
    print("| --- | --- | --- | --- | --- |")
    for path in files:
        lines = [line for line in read_lines(path)[:2000] if len(line.split()) >= FOREIGN_MIN_WORDS]
        pieces = [[tokenizer.id_to_piece(i) for i in tokenizer.encode(line)] for line in lines]
        given = [foreign_note(found, None) is not None for found in pieces]
        ratios = [len(found) / len(line.split()) for found, line in zip(pieces, lines)]
        print(
            f"| {path.name} | {len(lines)} | {np.mean(given):.1%} | {np.median(ratios):.2f} | "
            f"{np.percentile(ratios, 99):.2f} |"
        )


if __name__ == "__main__":
    main()
