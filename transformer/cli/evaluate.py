"""`evaluate`: sacreBLEU and chrF of a checkpoint on test sets."""

from __future__ import annotations

import argparse
from pathlib import Path

from transformer.cli.common import (
    add_checkpoint,
    device,
)
from transformer.toolkits.opening import load_any_checkpoint


def cmd_evaluate(args: argparse.Namespace) -> int:
    from transformer.training.evaluate import evaluate_files, save_scores

    if len(args.src) != len(args.ref):
        raise ValueError(f"{len(args.src)} source files but {len(args.ref)} reference files: give one of each per set")
    runs = [(src, ref, beam) for src, ref in zip(args.src, args.ref) for beam in args.beam]
    if len(runs) > 1 and (args.output or args.save):
        raise ValueError("--output and --save take one set and one beam width")
    checkpoint = load_any_checkpoint(args.checkpoint, device(args.device))  # once for every set and width
    if len(runs) > 1:
        print("| set | decoding | BLEU | chrF |\n| --- | --- | --- | --- |")
    for src, ref, beam in runs:
        scores, hypotheses = evaluate_files(checkpoint, src, ref, beam=beam)
        if len(runs) > 1:
            decoding = "greedy" if beam == 1 else f"beam {beam}"
            name = Path(src).name.removesuffix(".gz").rsplit(".", 1)[0]  # flores.dev.en.gz: flores.dev
            print(f"| {name} | {decoding} | {scores.bleu:.2f} | {scores.chrf:.2f} |", flush=True)
            continue
        print(f"BLEU = {scores.bleu:.2f}  ({scores.bleu_signature})")
        print(f"chrF = {scores.chrf:.2f}  ({scores.chrf_signature})")
        if args.output:
            Path(args.output).write_text("\n".join(hypotheses) + "\n", encoding="utf-8")
        if args.save:
            name = args.name or f"{Path(src).name.split('.')[0]}_{'greedy' if beam == 1 else f'beam{beam}'}"
            save_scores(args.checkpoint, scores, name)
            print(f"saved as scores.{name} in {args.checkpoint}")
    return 0


def add_parsers(commands: argparse._SubParsersAction) -> None:
    """Registers this module's commands."""
    evaluate = commands.add_parser("evaluate", help="sacreBLEU and chrF of a checkpoint on a test set")
    add_checkpoint(evaluate)
    evaluate.add_argument(
        "--src",
        required=True,
        nargs="+",
        help="source sentences, one a line (.gz accepted); "
        "several sets (and --beam widths) print a table, the model loaded once",
    )
    evaluate.add_argument("--ref", required=True, nargs="+", help="reference translations, line by line, a file a set")
    evaluate.add_argument("--beam", type=int, nargs="+", default=[1], help="beam width(s); 1: greedy")
    evaluate.add_argument("--output", help="also write the translations here")
    evaluate.add_argument("--save", action="store_true", help="store the scores in the checkpoint's metadata")
    evaluate.add_argument("--name", help="key for --save (default: from the file name and beam)")
    evaluate.set_defaults(run=cmd_evaluate)
