"""`timeline`: a training run's checkpoints read on probe sentences, attention forming epoch by epoch."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def cmd_timeline(args: argparse.Namespace) -> int:
    import pandas as pd

    from transformer.analysis.alignment import parse_pharaoh
    from transformer.analysis.timeline import KINDS, GoldPairs
    from transformer.io.export import csv_text
    from transformer.io.timeline_file import load_timeline, save_timeline, timeline_path
    from transformer.text.files import read_lines, read_parallel
    from transformer.training.snapshots import timeline_of_run

    if args.probes_from:  # a new default's timeline reads the probes of the one it replaces
        probes = [(probe.source, probe.reference) for probe in load_timeline(args.probes_from).probes]
    elif args.ref:
        probes = list(zip(*read_parallel(args.src, args.ref)))
    else:
        raise ValueError("--src needs --ref: the probes' reference translations, line by line")
    gold = None
    if args.align:
        sources, targets = read_parallel(args.align[0], args.align[1])
        golds, _ = parse_pharaoh(
            read_lines(args.align[2]), [len(s.split()) for s in sources], [len(t.split()) for t in targets]
        )
        gold = GoldPairs(sources, targets, golds)
    timeline = timeline_of_run(
        args.checkpoints,
        probes,
        gold,
        args.untrained_seed,
        progress=lambda label: print(f"reading the probes with {label} ...", file=sys.stderr),
    )
    out = Path(args.out) if args.out else timeline_path(Path(args.checkpoints[-1]))
    save_timeline(out, timeline)
    for e, snapshot in enumerate(timeline.snapshots):
        bleu = "" if snapshot.val_bleu is None else f", validation BLEU {snapshot.val_bleu:.2f}"
        probability = sum(float(p.token_probs[e].mean()) for p in timeline.probes) / len(timeline.probes)
        print(f"{snapshot.label}{bleu}: mean probability of the references' tokens {probability:.3f}")
    for kind in KINDS:
        settled = timeline.settled_at(kind)
        print(
            f"{kind.title}: heads settled at "
            + "; ".join(
                f"layer {layer + 1}: " + " ".join(str(timeline.snapshots[e].epoch) for e in row)
                for layer, row in enumerate(settled)
            )
            + " (epoch, per head)"
        )
    print(f"wrote {out} ({out.stat().st_size:,} bytes)")
    if args.table:
        rows = timeline.table()
        with open(args.table, "w", newline="", encoding="utf-8") as file:
            file.write(csv_text(pd.DataFrame(rows), index=False))
        print(f"wrote {args.table}")
    return 0


def add_parsers(commands: argparse._SubParsersAction) -> None:
    """Registers this module's commands."""
    timeline = commands.add_parser(
        "timeline", help="how a run learned: its epoch checkpoints read on probe sentences, for the How it learned page"
    )
    timeline.add_argument(
        "checkpoints", nargs="+", help="the run's checkpoints, oldest first (e.g. NAME-epoch*.safetensors)"
    )
    probes = timeline.add_mutually_exclusive_group(required=True)
    probes.add_argument("--src", help="probe sentences, one a line (with --ref)")
    probes.add_argument("--probes-from", metavar="TIMELINE", help="the probes and references of this timeline file")
    timeline.add_argument("--ref", help="their reference translations (teacher forced), line by line")
    timeline.add_argument(
        "--align",
        nargs=3,
        metavar=("SRC", "TGT", "GOLD"),
        help="hand-aligned pairs (as for `align`): each snapshot's heads get an AER",
    )
    timeline.add_argument(
        "--untrained-seed",
        type=int,
        help="begin with the untrained model of this seed (the run's start, with its seed)",
    )
    timeline.add_argument("--out", help="default: timelines/NAME.safetensors beside the last checkpoint")
    timeline.add_argument("--table", help="also write every head's measures per snapshot to this CSV file")
    timeline.set_defaults(run=cmd_timeline)
