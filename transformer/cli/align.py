"""`align`: every head's word alignments scored against gold ones (AER)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from transformer.cli.common import (
    add_checkpoint,
    device,
)
from transformer.toolkits.opening import load_any_checkpoint


def cmd_align(args: argparse.Namespace) -> int:
    from transformer.analysis.alignment import parse_pharaoh, reversed_gold, with_intersection
    from transformer.text.files import read_lines, read_parallel

    if args.table and Path(args.table).suffix not in (".csv", ".json"):
        raise ValueError(f"--table {args.table}: name a .csv or a .json file")
    sources, targets = read_parallel(args.src, args.tgt)
    golds, one_based = parse_pharaoh(
        read_lines(args.gold), [len(s.split()) for s in sources], [len(t.split()) for t in targets], args.one_based
    )
    if args.limit:
        sources, targets, golds = sources[: args.limit], targets[: args.limit], golds[: args.limit]
    counting = "given" if args.one_based is not None else "detected"
    print(f"{args.gold}: words counted from {int(one_based)} ({counting})", file=sys.stderr)
    report = _aligned(args, args.checkpoint, sources, targets, golds, "aligning")
    if args.reverse_checkpoint:
        reversed_golds = [reversed_gold(g) for g in golds]
        backward = _aligned(
            args, args.reverse_checkpoint, targets, sources, reversed_golds, "aligning with the reverse model"
        )
        if backward.scores and report.scores:
            both = with_intersection(report, backward, golds)
            score = next(s.counts for s in report.scores if s.method == both)
            print(
                f"both directions ({both.extraction}): AER {score.aer:.3f}, precision {score.precision:.3f}, "
                f"recall {score.recall:.3f}",
                file=sys.stderr,
            )
    if report.skipped:
        shown = ", ".join(str(i + 1) for i in report.skipped[:10])
        print(
            f"left out {len(report.skipped)} pairs, empty or longer than the model reads (lines {shown}"
            f"{', ...' if len(report.skipped) > 10 else ''})",
            file=sys.stderr,
        )
    if not report.scores:
        raise ValueError("no pair could be aligned")
    _write_report(args, report, len(sources))
    return 0


def _aligned(
    args: argparse.Namespace, checkpoint_path: str, sources: list[str], targets: list[str], golds: list, what: str
):
    """align_corpus with the checkpoint at checkpoint_path, under a progress bar."""
    from tqdm import tqdm

    from transformer.analysis.alignment import align_corpus

    checkpoint = load_any_checkpoint(checkpoint_path, device(args.device))
    with tqdm(total=len(sources), desc=what, unit="pair") as bar:
        return align_corpus(
            checkpoint.model,
            checkpoint.tokenizer,
            sources,
            targets,
            golds,
            args.threshold,
            args.integrated_gradients,
            progress=lambda done, _: bar.update(done - bar.n),
            flow=args.flow,
        )


def _write_report(args: argparse.Namespace, report, pairs: int) -> None:
    """The methods' scores on stdout (the best --top), and --table and --out where asked."""
    import json

    from transformer.analysis.alignment import format_pharaoh
    from transformer.io.export import csv_text

    table = report.table()
    print(f"{'rank':>4}  {'AER':>6}  {'prec.':>6}  {'recall':>6}  method")
    for row, score in zip(table[: args.top], report.scores):
        print(
            f"{row['rank']:>4}  {row['aer']:6.3f}  {row['precision']:6.3f}  {row['recall']:6.3f}  {score.method.label}"
        )
    print(f"({len(table)} methods over {len(report.aligned)} pairs; best AER first)")
    if args.table:
        with open(args.table, "w", newline="", encoding="utf-8") as out:
            if args.table.endswith(".json"):
                json.dump(table, out, indent=1, ensure_ascii=False)
            else:
                out.write(csv_text(report.frame(), index=False))
        print(f"wrote {args.table}")
    if args.out:
        best = report.scores[0].method
        by_line = dict(zip(report.aligned, report.links[best]))
        Path(args.out).write_text("".join(format_pharaoh(by_line.get(i, ())) + "\n" for i in range(pairs)))
        print(f"wrote {args.out}: the links of {best.label}, 0-based, a line per pair (empty where left out)")


def add_parsers(commands: argparse._SubParsersAction) -> None:
    """Registers this module's commands."""
    align = commands.add_parser("align", help="score every head's word alignments against gold ones (AER)")
    add_checkpoint(align)
    align.add_argument("--src", required=True, help="source sentences, one a line, words separated by spaces")
    align.add_argument("--tgt", required=True, help="their translations, line by line")
    align.add_argument("--gold", required=True, help="gold links, a line per pair: i-j sure, i?j or ipj possible")
    based = align.add_mutually_exclusive_group()
    based.add_argument(
        "--one-based",
        dest="one_based",
        action="store_true",
        default=None,
        help="the gold counts words from 1 (default: detected, 1-based when no link names word 0)",
    )
    based.add_argument("--zero-based", dest="one_based", action="store_false", help="the gold counts words from 0")
    align.add_argument("--threshold", type=float, default=0.3, help="the threshold extraction's weight (default 0.3)")
    align.add_argument(
        "--integrated-gradients",
        action="store_true",
        help="also align with integrated gradients (about 15 times the time)",
    )
    align.add_argument(
        "--flow",
        action="store_true",
        help="also align with attention flow through the decoder (max-flow over every layer; pairs of up to 48 "
        "pieces a side, the longer left out of every method)",
    )
    align.add_argument(
        "--reverse-checkpoint",
        help="a model translating the other way: its best links, read back, are "
        "intersected with this model's best (a method of its own in the table)",
    )
    align.add_argument("--limit", type=int, help="align the first N pairs only")
    align.add_argument("--top", type=int, default=20, help="rows of the ranked table printed (default 20)")
    align.add_argument("--table", help="write the whole ranked table to this .csv or .json file")
    align.add_argument("--out", help="write the best method's alignments to this file, in the Pharaoh format")
    align.set_defaults(run=cmd_align)
