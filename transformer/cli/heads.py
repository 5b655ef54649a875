"""`heads`: which heads the translations depend on, over a corpus sample (ablation and gradient importance), and
what each does (Voita et al.'s roles)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from transformer.cli.common import add_checkpoint, device
from transformer.hugging_face.directory import load_checkpoint_or_hf
from transformer.model.kinds import AttentionKind
from transformer.model.probes import Probe
from transformer.text.files import read_lines

SHOWN = 5  # heads printed at each end of each measure's ranking


def head_argument(text: str) -> tuple[AttentionKind, int, int]:
    """KIND:LAYER:HEAD, 1-based as the app shows them (encoder:2:5), as the 0-based triple the probe takes."""
    try:
        kind, layer, head = text.split(":")
        found = AttentionKind(kind), int(layer) - 1, int(head) - 1
    except ValueError:
        kinds = ", ".join(k.value for k in AttentionKind)
        raise argparse.ArgumentTypeError(
            f"{text!r}: give KIND:LAYER:HEAD, KIND one of {kinds}, e.g. cross:2:5"
        ) from None
    if found[1] < 0 or found[2] < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: layers and heads count from 1")
    return found


def heads_off_probe(model, heads: list[tuple[AttentionKind, int, int]]) -> Probe | None:
    """The probe switching off --heads-off (each checked against the model's shape), or None."""
    if not heads:
        return None
    config = model.config
    for kind, layer, head in heads:
        count = kind.layers(config)
        if layer >= count or head >= config.n_heads:
            raise ValueError(
                f"{kind.value}:{layer + 1}:{head + 1}: this model has {count} {kind.value} layers of {config.n_heads} heads"
            )
    return Probe.ablating(heads)


def cmd_heads(args: argparse.Namespace) -> int:
    from transformer.analysis.heads.importance import (
        ablation_importance,
        corpus_of,
        gradient_importance,
        importance_table,
    )
    from transformer.analysis.heads.roles import POSITIONAL_SHARE, head_roles
    from transformer.decoding.translate import translate_texts
    from transformer.io.export import csv_text

    checkpoint = load_checkpoint_or_hf(args.checkpoint, device(args.device))
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    sources = read_lines(args.src)
    if args.ref:
        pairs = [(s, r) for s, r in zip(sources, read_lines(args.ref)) if s.strip() and r.strip()][: args.sentences]
        sources, references = [s for s, _ in pairs], [r for _, r in pairs]
    else:
        sources = [line for line in sources if line.strip()][: args.sentences]
    if not sources:
        raise ValueError(f"{args.src} has no sentences")
    ablation = gradient = None
    if args.measure in ("ablation", "both"):

        def progress(done: int, total: int) -> None:
            print(
                f"\rablation: {done:,} of {total:,} rows (a head off, a sentence)", end="", file=sys.stderr, flush=True
            )

        ablation = ablation_importance(model, tokenizer, sources, references if args.ref else None, progress=progress)
        print(
            f"\nintact: BLEU {ablation.bleu:.2f}, chrF {ablation.chrf:.2f}, mean log-probability {ablation.log_prob:.3f}"
            f" ({len(sources)} sentences, against {'the references' if args.ref else 'its own greedy output'})",
            file=sys.stderr,
        )
    if not args.ref:  # the model's own greedy outputs, decoded once
        references = ablation.intact if ablation is not None else translate_texts(model, tokenizer, sources)
    corpus = corpus_of(model, tokenizer, sources, references)
    if args.measure in ("gradient", "both"):
        gradient = gradient_importance(model, corpus)
    table = importance_table(model, ablation, gradient, head_roles(model, tokenizer, corpus))
    out = Path(args.out)
    if out.suffix == ".json":
        out.write_text(table.to_json(orient="records", indent=1), encoding="utf-8")
    else:
        out.write_text(csv_text(table, index=False), encoding="utf-8", newline="")
    for column, ascending in (("ablation_logprob_delta", True), ("gradient_importance", False)):
        if column in table:
            ranked = table.sort_values(column, ascending=ascending)
            for end, rows in (("most", ranked.head(SHOWN)), ("least", ranked.tail(SHOWN)[::-1])):
                names = ", ".join(f"{r.kind} {r.layer}.{r.head} ({getattr(r, column):+.3f})" for r in rows.itertuples())
                print(f"{end} important by {column}: {names}")
    positional = table[table.positional_share >= POSITIONAL_SHARE]
    names = ", ".join(f"{r.kind} {r.layer}.{r.head} ({r.positional_offset:+.0f})" for r in positional.itertuples())
    print(f"positional (largest weight at one offset for {POSITIONAL_SHARE:.0%} of tokens or more): {names or 'none'}")
    print(f"wrote {out} ({len(table)} heads)", file=sys.stderr)
    return 0


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
    heads.add_argument("--out", required=True, help="the table: .csv, or .json")
    heads.set_defaults(run=cmd_heads)
