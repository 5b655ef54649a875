"""`patch-set`: activation patching over a pair set (docs/pair-sets.md): every pair as `patch` patches it alone, the
set's contrastive accuracy, its effects over the pairs, and each head's ablation against that accuracy; spread over
processes by torchrun."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from transformer.cli.common import add_checkpoint, device
from transformer.cli.interventions import ESTIMATE, patch_arrays


def cmd_patch_set(args: argparse.Namespace) -> int:
    """patch over a pair set: each pair as `patch` patches it alone, its arrays in DIR/pairs/<id>.npz, a row of
    DIR/pairs.csv, the set's contrastive accuracy in DIR/summary.json, its effects in DIR/effects.* and, with
    --ablation, each head's ablation against the accuracy in DIR/ablation.csv; a run
    started again skips the pairs already written (of the same settings: DIR/run.json). Under torchrun the pairs
    left are split by rank and rank 0 writes what they make together."""
    import dataclasses

    from transformer.analysis.interventions.pair_sets import read_pair_set
    from transformer.training.distributed import device_for_rank, gathered_on_rank_zero, in_turn, leave, rank_and_world

    read = read_pair_set(args.pairs)
    rank, world = rank_and_world()
    out, settings = Path(args.out), {"checkpoint": str(args.checkpoint), "pairs": Path(args.pairs).name}
    if rank == 0:
        for number, why in read.refused:
            print(f"{Path(args.pairs).name}, line {number}: {why}: left out", file=sys.stderr)
        done = resumed(out, settings | run_settings(args))
    in_turn(world)  # rank 0 has made the folder and recorded the run
    done = done if rank == 0 else resumed(out, settings | run_settings(args), record=False)
    left = [pair for pair in read.pairs if pair.id not in done]
    if rank == 0:
        print(f"{len(read.pairs)} pairs, {len(read.pairs) - len(left)} done before", file=sys.stderr)
    on = device_for_rank(rank) if world > 1 else device(args.device)
    mine = patched_into(out, args, left[rank::world], on, f"rank {rank}: " if world > 1 else "")
    every_rank = gathered_on_rank_zero(mine, world)
    if every_rank is not None:
        for outcomes in every_rank:
            done |= outcomes  # type: ignore[arg-type]
        outcomes = [dataclasses.replace(done[pair.id], phenomenon=pair.phenomenon) for pair in read.pairs]
        write_set_results(out, outcomes, len(read.refused))
        written = [pair for pair in read.pairs if done[pair.id].written]
        write_effects(out, written, args.words, args.method)
        if args.ablation:
            write_ablation(out, outcomes)
    leave(world)
    return 0


def patched_into(out: Path, args: argparse.Namespace, pairs: list[Any], on: Any, said: str) -> dict[str, Any]:
    """Each pair patched (its decode and each pass held to the memory free first) and its arrays written whole into
    DIR/pairs/<id>.npz, with --ablation its two metrics with each head off (`ablation_clean`, `ablation_corrupt`, in
    `ablation_heads`' order); the pairs' outcomes by id."""
    import numpy as np

    from transformer.analysis.interventions.budget import check_contrast
    from transformer.analysis.interventions.contrastive import patched_pairs
    from transformer.analysis.interventions.set_ablation import metrics_with_each_head_off
    from transformer.io.export import npz_bytes
    from transformer.io.memory import memory_available
    from transformer.model.heads import every_head
    from transformer.toolkits.opening import load_any_checkpoint

    checkpoint = load_any_checkpoint(args.checkpoint, on)
    model, tokenizer, room = checkpoint.model, checkpoint.tokenizer, memory_available()
    heads = every_head(model.config)

    outcomes = {}

    def within_budget(contrast: Any, spans: list | None) -> None:
        check_contrast(model, contrast, spans, room)

    runs = patched_pairs(model, tokenizer, pairs, args.noising, args.words, within_budget, args.method)
    for number, run in enumerate(runs, 1):
        if run.shares is not None:
            arrays = patch_arrays(run.patching, run.contrast, run.clean, tokenizer, run.spans, run.estimate)
            if args.ablation:
                clean, corrupt = metrics_with_each_head_off(model, run.contrast, heads)
                arrays |= {"ablation_clean": clean, "ablation_corrupt": corrupt}
                arrays["ablation_heads"] = np.array([str(head) for head in heads])
            written = out / "pairs" / f"{run.pair.id}.npz"
            written.with_suffix(".part").write_bytes(npz_bytes(arrays))
            written.with_suffix(".part").replace(written)  # whole, or not there: a stopped run redoes the pair
        outcomes[run.pair.id] = run.outcome
        print(f"{said}{number}/{len(pairs)} {run.pair.id}: {run.outcome.status}", file=sys.stderr)
    return outcomes


def run_settings(args: argparse.Namespace) -> dict[str, Any]:
    return {"noising": bool(args.noising), "words": bool(args.words), "method": args.method} | (
        {"ablation": True} if args.ablation else {}
    )


def resumed(out: Path, settings: dict[str, Any], record: bool = True) -> dict[str, Any]:
    """The outcomes of the pairs an earlier run of these settings wrote in `out` (its pairs/*.npz), by id; `out`
    made and the settings recorded where it is new (`record`); ValueError where it holds a run of other settings."""
    import json

    import numpy as np

    from transformer.analysis.interventions.contrastive import READ, Outcome

    recorded = out / "run.json"
    if recorded.exists() and json.loads(recorded.read_text()) != settings:
        raise ValueError(f"{out} holds a run of other settings ({recorded}): give another --out, or the same settings")
    if record:
        (out / "pairs").mkdir(parents=True, exist_ok=True)
        recorded.write_text(json.dumps(settings, indent=1))
    done = {}
    for path in sorted((out / "pairs").glob("*.npz")):
        with np.load(path) as arrays:
            step, clean, corrupt = (float(arrays[name]) for name in ("step", "metric_clean", "metric_corrupt"))
        done[path.stem] = Outcome(path.stem, "", READ, int(step), clean, corrupt)
    return done


def write_set_results(out: Path, outcomes: list[Any], refused_lines: int) -> None:
    """DIR/pairs.csv (a row a pair) and DIR/summary.json (the counts, the accuracy and its interval, by phenomenon)."""
    import dataclasses
    import json

    import pandas as pd

    from transformer.analysis.interventions.contrastive import NOT_WRITTEN, REFUSED, accuracy, by_phenomenon

    rows = [
        (o.id, o.phenomenon, o.status, "" if o.step is None else o.step + 1, o.metric_clean, o.metric_corrupt)
        + (o.correct, o.why)
        for o in outcomes
    ]
    columns = ["id", "phenomenon", "status", "step", "metric_clean", "metric_corrupt", "correct", "why"]
    written_csv(out / "pairs.csv", pd.DataFrame(rows, columns=columns))

    def counted(found: Any) -> dict[str, Any]:  # a share of no pairs is null, not NaN (which JSON has not)
        return {name: None if value != value else value for name, value in dataclasses.asdict(found).items()}

    summary = counted(accuracy(outcomes)) | {
        "not_written": sum(o.status == NOT_WRITTEN for o in outcomes),
        "refused": sum(o.status == REFUSED for o in outcomes),
        "lines_refused": refused_lines,
        "by_phenomenon": {name or "(none)": counted(a) for name, a in by_phenomenon(outcomes).items()},
    }
    (out / "summary.json").write_text(json.dumps(summary, indent=1) + "\n")
    said = f"{summary['correct']} of {summary['written']} written pairs correct"
    if summary["written"]:
        said += f" ({summary['share']:.1%}, 95 % interval {summary['low']:.1%} to {summary['high']:.1%})"
    print(f"{said}; wrote {out}", file=sys.stderr)


def write_effects(out: Path, pairs: list[Any], words: bool, method: str = "exact") -> None:
    """DIR/effects.npz and DIR/effects.csv: each site family's mean share over the written pairs, its interval and
    top-five count (set_effects), read from the pairs' own files (a resumed run's too): exact patching's, or with
    `method` "attribution" the estimate's (`estimate` says which). With "both", DIR/agreement.csv: each pair's
    Spearman ρ and overlap of the ten strongest sites between the two."""
    import numpy as np
    import pandas as pd

    from transformer.analysis.interventions.attribution_patching import agreement
    from transformer.analysis.interventions.set_effects import effects_by_role, roles_of
    from transformer.analysis.interventions.sites import SHARE_FAMILIES, Patching
    from transformer.io.export import npz_bytes

    if not pairs:
        return

    def stored(arrays: Any, prefix: str) -> Patching:  # the shares a pair's file holds under these names
        return Patching(*(arrays[prefix + name] for name in SHARE_FAMILIES), 0.0, 0.0, False)

    found, roles, agreed = [], [], []
    for pair in pairs:
        with np.load(out / "pairs" / f"{pair.id}.npz") as arrays:
            patching = stored(arrays, ESTIMATE if method == "attribution" else "")
            if method == "both":
                agreed.append((pair.id, *agreement(stored(arrays, ESTIMATE), patching)))
            ids = arrays["src_ids"].tolist(), arrays["corrupt_ids"].tolist()
            roles.append(roles_of(list(arrays["src_pieces"]), *ids, pair.roles, words))
        found.append(patching)
    if agreed:
        written_csv(out / "agreement.csv", pd.DataFrame(agreed, columns=["id", "spearman_rho", "top10_overlap"]))
        rho, top = np.nanmean([row[1] for row in agreed]), np.nanmean([row[2] for row in agreed])
        print(f"attribution patching against exact: mean ρ {rho:.3f}, ten strongest shared {top:.0%}", file=sys.stderr)
    names, by_family = effects_by_role(found, roles)
    arrays = {"roles": np.array(names), "pairs": np.array(len(pairs)), "estimate": np.array(method == "attribution")}
    for family, effect in by_family.items():
        arrays |= {f"{family}_{part}": getattr(effect, part) for part in ("mean", "low", "high", "top")}
    (out / "effects.npz").write_bytes(npz_bytes(arrays))
    rows = [
        (
            family,
            *_site_labels(family, at, names),
            *(getattr(effect, part)[at] for part in ("mean", "low", "high", "top")),
        )
        for family, effect in by_family.items()
        for at in np.ndindex(effect.mean.shape)
    ]
    columns = ["family", "layer", "head", "role", "mean", "low", "high", "top_five_in"]
    written_csv(out / "effects.csv", pd.DataFrame(rows, columns=columns))


def write_ablation(out: Path, outcomes: list[Any]) -> None:
    """DIR/ablation.csv: each head's ablation against the set's accuracy (set_ablation), read from the pairs' own
    files (a resumed run's too), a row a head, the heads that lower the accuracy most first."""
    import numpy as np
    import pandas as pd

    from transformer.analysis.interventions.set_ablation import ablation_over_set
    from transformer.model.heads import Head

    with_each_off, heads = {}, []
    for outcome in outcomes:
        if outcome.written:
            with np.load(out / "pairs" / f"{outcome.id}.npz") as arrays:
                with_each_off[outcome.id] = (arrays["ablation_clean"], arrays["ablation_corrupt"])
                heads = heads or [Head.parse(str(name)) for name in arrays["ablation_heads"]]  # every pair's the same
    found = sorted(ablation_over_set(outcomes, with_each_off, heads), key=lambda a: (a.change, a.gap_change))
    rows = [
        (str(a.head), a.head.kind.value, a.head.layer + 1, a.head.index + 1, a.accuracy.share, a.accuracy.low)
        + (a.accuracy.high, a.change, a.broken, a.mended, a.gap_change)
        for a in found
    ]
    columns = ["head", "kind", "layer", "index", "accuracy", "low", "high", "change", "broken", "mended", "gap_change"]
    written_csv(out / "ablation.csv", pd.DataFrame(rows, columns=columns))
    if found:
        first = found[0]
        said = (
            f"switched off alone, {first.head} changes the accuracy most: {first.change:+.1%} ({first.broken} pairs "
            f"made wrong, {first.mended} made right)"
            if first.change
            else f"no head switched off alone changes the accuracy; {first.head} narrows the two sources' gap most "
            f"({first.gap_change:+.2f} on average)"
        )
        print(said, file=sys.stderr)


def written_csv(path: Path, frame: Any) -> None:
    """A table written as every CSV of the project is (csv_text: cells a spreadsheet would run made text)."""
    from transformer.io.export import csv_text

    path.write_text(csv_text(frame, index=False), encoding="utf-8", newline="")


def _site_labels(family: str, at: tuple[int, ...], roles: list[str]) -> tuple[Any, Any, str]:
    """A site's layer (a layer boundary for a stream), head (1-based) and role, as the CSV names them."""
    if family == "encoder_stream":
        return at[0], "", roles[at[1]]
    if family == "decoder_stream":
        return at[0], "", ""
    return at[0] + 1, at[1] + 1, "differing" if family == "encoder_heads_differing" else ""


def add_parsers(commands: argparse._SubParsersAction) -> None:
    """Registers this module's command."""
    patch_set = commands.add_parser(
        "patch-set",
        help="patch over a pair set (docs/pair-sets.md): every site of each pair, and the set's contrastive accuracy",
    )
    add_checkpoint(patch_set)
    patch_set.add_argument("--pairs", required=True, help="a pair set: one JSON object a line (docs/pair-sets.md)")
    patch_set.add_argument("--out", required=True, help="the results' folder (started again: skips pairs done)")
    patch_set.add_argument("--noising", action="store_true", help="as patch --noising")
    patch_set.add_argument("--words", action="store_true", help="as patch --words")
    patch_set.add_argument(
        "--method",
        choices=["exact", "attribution", "both"],
        default="exact",
        help="exact patching of every site, attribution patching's estimate of it (one backward pass a pair), or "
        "both with their agreement",
    )
    patch_set.add_argument(
        "--ablation",
        action="store_true",
        help="also switch each head off alone (as --heads-off does) in both runs of each pair, and write the set's "
        "accuracy with each head off (ablation.csv)",
    )
    patch_set.set_defaults(run=cmd_patch_set)
