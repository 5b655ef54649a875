"""`heads`: which heads the translations depend on, over a corpus sample (ablation and gradient importance), and
what each does (Voita et al.'s roles)."""

from __future__ import annotations

import argparse
import itertools
import sys
from collections.abc import Iterator
from contextlib import ExitStack
from pathlib import Path

from transformer.cli.common import add_checkpoint, device
from transformer.model.heads import Head
from transformer.model.probes import Probe
from transformer.text.files import MAX_LINE_BYTES, TEXT_FILE, iter_text_lines, open_regular
from transformer.toolkits.opening import load_any_checkpoint

SHOWN = 5  # heads printed at each end of each measure's ranking


def head_argument(text: str) -> Head:
    """A head as the app names it, 1-based (cross.2.5, or cross:2:5)."""
    try:
        return Head.parse(text)
    except ValueError as error:
        raise argparse.ArgumentTypeError(str(error)) from None


def heads_off_probe(model, heads: list[Head]) -> Probe | None:
    """The probe switching off --heads-off (each checked against the model's shape), or None."""
    if not heads:
        return None
    for head in heads:
        head.check(model.config)
    return Probe.ablating(heads)


def cmd_heads(args: argparse.Namespace) -> int:
    from transformer.analysis.heads.survey import PHASES, survey_heads
    from transformer.analysis.heads.syntax import read_treebank
    from transformer.io.export import csv_text

    checkpoint = load_any_checkpoint(args.checkpoint, device(args.device))
    sources, references = read_sample(args)
    ablation = args.measure in ("ablation", "both")
    prune_by = (args.prune_by or ("ablation" if ablation else "gradient")) if args.prune else None
    if prune_by == "ablation" and not ablation:
        raise ValueError("--prune-by ablation needs --measure ablation or both")
    treebank = read_treebank(args.treebank, args.treebank_sentences) if args.treebank else None
    if args.treebank and not treebank:
        raise ValueError(f"{args.treebank} has no sentences")

    def progress(phase: str, done: int, total: int, share: float | None) -> None:
        end = "\n" if done >= total else ""
        print(f"\r{phase}: {done:,} of {total:,} {PHASES[phase]}", end=end, file=sys.stderr, flush=True)

    survey = survey_heads(
        checkpoint.model, checkpoint.tokenizer, sources, references, ablation, treebank, prune_by, progress
    )
    against = "the references" if survey.given_references else "its own greedy output"
    chrf = f", chrF {survey.ablation.chrf:.2f}, mean log-probability {survey.ablation.log_prob:.3f}" if ablation else ""
    print(f"intact: greedy BLEU {survey.bleu:.2f}{chrf} ({len(sources)} sentences, against {against})", file=sys.stderr)
    table = survey.table
    if args.measure == "ablation":
        table = table.drop(columns="gradient_importance")
    out = Path(args.out)
    if out.suffix == ".json":
        out.write_text(table.to_json(orient="records", indent=1), encoding="utf-8")
    else:
        out.write_text(csv_text(table, index=False), encoding="utf-8", newline="")
    print_rankings(table)
    if survey.syntax is not None:
        print_syntax(survey.syntax)
    if survey.curves is not None:
        pruning = out.with_suffix(".pruning.csv")
        frame = pruning_frame(survey.curves, len(table))
        pruning.write_text(csv_text(frame, index=False), encoding="utf-8", newline="")
        print_pruning(survey.curves, len(table), prune_by)
        print(f"wrote {pruning} (the random order's heads are its first order's)", file=sys.stderr)
    print(f"wrote {out} ({len(table)} heads)", file=sys.stderr)
    return 0


def read_sample(args: argparse.Namespace) -> tuple[list[str], list[str] | None]:
    """--src's first --sentences non-blank lines, and --ref's beside them (pairs with a blank side left out). Each
    file is read as a stream only as far as the sample: a gzip bomb's rest is never decompressed."""
    if args.sentences < 1:
        raise ValueError(f"--sentences {args.sentences}: give 1 or more")
    with open_regular(args.src, TEXT_FILE) as src, ExitStack() as files:
        sources = _named_lines(args.src, src)
        if not args.ref:
            sample = list(itertools.islice((line for line in sources if line.strip()), args.sentences))
            if not sample:
                raise ValueError(f"{args.src} has no sentences")
            return sample, None
        references = _named_lines(args.ref, files.enter_context(open_regular(args.ref, TEXT_FILE)))
        pairs: list[tuple[str, str]] = []
        for number, (source, reference) in enumerate(itertools.zip_longest(sources, references), 1):
            if source is None or reference is None:
                shorter = args.src if source is None else args.ref
                raise ValueError(f"{shorter} ends at line {number - 1:,}, before the other: not a parallel pair")
            if source.strip() and reference.strip():
                pairs.append((source, reference))
            if len(pairs) == args.sentences:
                break
    if not pairs:
        raise ValueError(f"{args.src} has no sentences")
    return [s for s, _ in pairs], [r for _, r in pairs]


def _named_lines(path: str, handle) -> Iterator[str]:
    """A text file's lines as a stream; ValueError naming the file where one is not text or not a sentence."""
    try:
        yield from iter_text_lines(handle, max_line_bytes=MAX_LINE_BYTES)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None


def print_rankings(table) -> None:
    """The most and least important heads by each measure run, and the positional heads."""
    from transformer.analysis.heads.roles import POSITIONAL_SHARE

    for column, ascending in (("ablation_logprob_delta", True), ("gradient_importance", False)):
        if column in table:
            ranked = table.sort_values(column, ascending=ascending)
            for end, rows in (("most", ranked.head(SHOWN)), ("least", ranked.tail(SHOWN)[::-1])):
                names = ", ".join(f"{r.kind} {r.layer}.{r.head} ({getattr(r, column):+.3f})" for r in rows.itertuples())
                print(f"{end} important by {column}: {names}")
    positional = table[table.positional_share >= POSITIONAL_SHARE]
    names = ", ".join(f"{r.kind} {r.layer}.{r.head} ({r.positional_offset:+.0f})" for r in positional.itertuples())
    print(f"positional (largest weight at one offset for {POSITIONAL_SHARE:.0%} of tokens or more): {names or 'none'}")


def pruning_frame(curves, total: int):
    """Every point of every curve with its heads off, in their text form (as --heads-off takes them)."""
    import pandas as pd

    return pd.DataFrame(
        {
            "order": curve.order,
            "heads_off": count,
            "share": count / total,
            "bleu": curve.bleu[point],
            "heads": " ".join(map(str, sorted(curve.heads_off[point]))),
        }
        for curve in curves
        for point, count in enumerate(curve.counts)
    )


def print_pruning(curves, total: int, by: str) -> None:
    print(f"pruning curve (BLEU of the greedy output; heads ranked by {by}):")
    print("  heads off  " + "  ".join(f"{curve.order:>22}" for curve in curves))
    for point, count in enumerate(curves[0].counts):
        values = "  ".join(f"{curve.bleu[point]:>22.2f}" for curve in curves)
        print(f"  {count:>3} ({count / total:>4.0%})  {values}")


def print_syntax(syntax) -> None:
    """Each relation and direction: its arcs, the positional baseline, the best encoder head; then the syntactic
    heads (those beating a baseline by MARGIN)."""
    from transformer.analysis.heads.syntax import MARGIN, READINGS

    skipped = f", {syntax.skipped} longer than the model reads left out" if syntax.skipped else ""
    print(f"syntactic accuracy over {syntax.sentences:,} treebank sentences{skipped} (encoder heads):")
    for reading in READINGS:
        accuracy = syntax.accuracy[reading]
        layer, head = divmod(int(accuracy.argmax()), accuracy.shape[1])
        print(
            f"  {reading}: {syntax.arcs[reading]:,} arcs, positional baseline {syntax.baseline[reading]:.3f} "
            f"(offset {syntax.baseline_offset[reading]:+d}), best head encoder {layer + 1}.{head + 1} "
            f"{accuracy[layer, head]:.3f}"
        )
    found = syntax.syntactic()
    names = ", ".join(
        f"encoder {layer + 1}.{head + 1} {reading} ({acc:.3f} vs {base:.3f})"
        for reading, layer, head, acc, base in found
    )
    print(f"syntactic (beating the positional baseline by {MARGIN:.0%} or more): {names or 'none'}")


def add_parsers(commands: argparse._SubParsersAction) -> None:
    """Registers this module's commands."""
    heads = commands.add_parser(
        "heads", help="each head's importance over a corpus sample: switched off, and by the gradient of its gate"
    )
    add_checkpoint(heads)
    heads.add_argument("--src", required=True, help="source sentences, one a line (.gz accepted)")
    heads.add_argument("--ref", help="their references, line by line (default: the model's own greedy outputs)")
    heads.add_argument("--sentences", type=int, default=200, help="sentences from the top (default: %(default)s)")
    heads.add_argument("--measure", choices=["ablation", "gradient", "both"], default="both")
    heads.add_argument(
        "--treebank", help="gold parses (CoNLL-U, .gz accepted): each encoder head's syntactic accuracy, Voita et al.'s"
    )
    heads.add_argument(
        "--treebank-sentences", type=int, default=2000, help="treebank sentences from the top (default: %(default)s)"
    )
    heads.add_argument(
        "--prune",
        action="store_true",
        help="the pruning curve: 10%% of the heads off at a time up to 60%%, least important first, in random order "
        "and most important first; written beside --out as NAME.pruning.csv",
    )
    heads.add_argument("--prune-by", choices=["ablation", "gradient"], help="the ranking (default: ablation if run)")
    heads.add_argument("--out", required=True, help="the table: .csv, or .json")
    heads.set_defaults(run=cmd_heads)
