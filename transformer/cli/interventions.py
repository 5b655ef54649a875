"""Commands that change what the model computes and watch the output change: `patch` (activation patching)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from transformer.cli.common import add_checkpoint, device, write_arrays


def patched(model: Any, tokenizer: Any, args: argparse.Namespace) -> tuple[Any, Any, list | None, Any]:
    """The pair's contrast, the clean sentence's decode, the spans patched together (None: each piece) and every
    site patched; the decode and each pass held to the memory free before they run, and the passes said first."""
    from transformer.analysis.interventions.budget import check_patching
    from transformer.analysis.interventions.patching import SITES_PER_BATCH, contrast_of_texts
    from transformer.analysis.interventions.sites import patch_every_site
    from transformer.analysis.words import word_spans
    from transformer.decoding.result import source_ids
    from transformer.decoding.strategies import check_decode
    from transformer.io.memory import memory_available

    room = memory_available()  # what the decode and each pass may hold on this machine
    if room is not None:
        check_decode(model, len(source_ids(tokenizer, args.clean, model.config.max_len)[0]), 0, room)
    step = None if args.step is None else args.step - 1
    contrast, clean = contrast_of_texts(model, tokenizer, args.clean, args.corrupt, args.target, args.foil, step)
    spans = word_spans(clean.src_pieces) if args.words else None
    positions = len(spans or contrast.clean_src)
    passes = check_patching(model, len(contrast.clean_src), len(contrast.output), positions, SITES_PER_BATCH, room)
    print(f"patching every site: {passes:,} forward passes at most", file=sys.stderr)
    return contrast, clean, spans, patch_every_site(model, contrast, noising=args.noising, spans=spans)


def patch_arrays(
    found: Any, contrast: Any, clean: Any, tokenizer: Any, spans: list | None, estimate: Any = None
) -> dict[str, Any]:
    """What `patch --out` writes of one pair (and `patch-set` of each): every family's grid (exact patching's, and
    attribution patching's `estimate` under the same names prefixed `attribution_`, either alone where the other is
    None), the two metrics, the step and tokens read, and the pieces and words of both sources and the output."""
    import numpy as np

    from transformer.analysis.interventions.sites import SHARE_FAMILIES
    from transformer.analysis.words import word_labels, word_spans

    corrupt_src, metrics = contrast.corrupt_src, found or estimate
    grids = {name: getattr(found, name) for name in SHARE_FAMILIES} if found is not None else {}
    grids |= {f"{ESTIMATE}{name}": getattr(estimate, name) for name in SHARE_FAMILIES} if estimate else {}
    return grids | {
        "metric_clean": np.array(metrics.metric_clean),
        "metric_corrupt": np.array(metrics.metric_corrupt),
        "step": np.array(contrast.step),
        "target_id": np.array(contrast.target),
        "foil_id": np.array(-1 if contrast.foil is None else contrast.foil),
        "src_pieces": np.array(clean.src_pieces),
        "src_words": np.array(word_labels(clean.src_pieces, spans or word_spans(clean.src_pieces))),
        "corrupt_pieces": np.array([tokenizer.id_to_piece(i) for i in corrupt_src]),
        "tgt_pieces": np.array(clean.tgt_pieces),
        "src_ids": np.array(clean.src_ids),
        "corrupt_ids": np.array(corrupt_src),
        "tgt_ids": np.array(clean.tgt_ids),
    }


ESTIMATE = "attribution_"  # what prefixes attribution patching's arrays in a pair's file


def cmd_patch(args: argparse.Namespace) -> int:
    import numpy as np

    from transformer.model.heads import Head
    from transformer.model.kinds import AttentionKind
    from transformer.text.pieces import readable
    from transformer.toolkits.opening import load_any_checkpoint

    checkpoint = load_any_checkpoint(args.checkpoint, device(args.device))
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    contrast, clean, spans, found = patched(model, tokenizer, args)
    step, foil = contrast.step, contrast.foil
    arrays = patch_arrays(found, contrast, clean, tokenizer, spans)
    out = write_arrays(args, arrays)
    print(clean.text)
    measured = f"logit({args.target}) - logit({args.foil})" if foil is not None else f"log p({args.target})"
    stream = found.encoder_residual
    layer, position = np.unravel_index(np.nanargmax(np.abs(stream)), stream.shape)
    columns = arrays["src_words"] if args.words else clean.src_pieces
    heads = {"cross": found.cross_heads, "decoder": found.decoder_self_heads}
    kind = max(heads, key=lambda name: np.nanmax(np.abs(heads[name])))
    head_layer, head = np.unravel_index(np.nanargmax(np.abs(heads[kind])), heads[kind].shape)
    print(
        f"{measured} at step {step + 1}: clean {found.metric_clean:.3f}, corrupted {found.metric_corrupt:.3f}; the "
        f"encoder stream's strongest site: {readable(str(columns[position]))} at layer boundary {layer} "
        f"({stream[layer, position]:+.2f} of the difference, {'noising' if args.noising else 'denoising'}); "
        f"the strongest head at the step: {Head(AttentionKind(kind), int(head_layer), int(head))} "
        f"({heads[kind][head_layer, head]:+.2f})",
        file=sys.stderr,
    )
    print(f"wrote {out}", file=sys.stderr)
    return 0


def cmd_patch_set(args: argparse.Namespace) -> int:
    """patch over a pair set: each pair as `patch` patches it alone, its arrays in DIR/pairs/<id>.npz, a row of
    DIR/pairs.csv, the set's contrastive accuracy in DIR/summary.json and its effects in DIR/effects.*; a run
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
        write_effects(out, [pair for pair in read.pairs if done[pair.id].written], args.words, args.method)
    leave(world)
    return 0


def patched_into(out: Path, args: argparse.Namespace, pairs: list[Any], on: Any, said: str) -> dict[str, Any]:
    """Each pair patched (its decode and each pass held to the memory free first) and its arrays written whole into
    DIR/pairs/<id>.npz; the pairs' outcomes by id."""
    from transformer.analysis.interventions.budget import check_patching
    from transformer.analysis.interventions.contrastive import patched_pairs
    from transformer.analysis.interventions.patching import SITES_PER_BATCH
    from transformer.io.export import npz_bytes
    from transformer.io.memory import memory_available
    from transformer.toolkits.opening import load_any_checkpoint

    checkpoint = load_any_checkpoint(args.checkpoint, on)
    model, tokenizer, room = checkpoint.model, checkpoint.tokenizer, memory_available()

    def within_budget(contrast: Any, spans: list | None) -> None:
        positions = len(spans or contrast.clean_src)
        check_patching(model, len(contrast.clean_src), len(contrast.output), positions, SITES_PER_BATCH, room)

    outcomes = {}
    runs = patched_pairs(model, tokenizer, pairs, args.noising, args.words, within_budget, args.method)
    for number, run in enumerate(runs, 1):
        if run.shares is not None:
            arrays = patch_arrays(run.patching, run.contrast, run.clean, tokenizer, run.spans, run.estimate)
            written = out / "pairs" / f"{run.pair.id}.npz"
            written.with_suffix(".part").write_bytes(npz_bytes(arrays))
            written.with_suffix(".part").replace(written)  # whole, or not there: a stopped run redoes the pair
        outcomes[run.pair.id] = run.outcome
        print(f"{said}{number}/{len(pairs)} {run.pair.id}: {run.outcome.status}", file=sys.stderr)
    return outcomes


def run_settings(args: argparse.Namespace) -> dict[str, Any]:
    return {"noising": bool(args.noising), "words": bool(args.words), "method": args.method}


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
    from transformer.analysis.interventions.set_effects import columns_by_role, effects, pair_sites
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
            differing = np.flatnonzero(arrays["src_ids"] != arrays["corrupt_ids"]).tolist()
            roles.append(columns_by_role(list(arrays["src_pieces"]), differing, pair.roles, words))
        found.append(patching)
    if agreed:
        written_csv(out / "agreement.csv", pd.DataFrame(agreed, columns=["id", "spearman_rho", "top10_overlap"]))
        rho, top = np.nanmean([row[1] for row in agreed]), np.nanmean([row[2] for row in agreed])
        print(f"attribution patching against exact: mean ρ {rho:.3f}, ten strongest shared {top:.0%}", file=sys.stderr)
    names = list(dict.fromkeys(name for pair_roles in roles for name in pair_roles))
    names = [n for n in names if n not in ("before", "after", "rest")] + ["before", "after", "rest"]
    by_family = effects([pair_sites(patching, role, names) for patching, role in zip(found, roles)])
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
    """Registers this module's commands."""
    patch = commands.add_parser(
        "patch",
        help="activation patching: the share of the clean and corrupted outputs' difference at one token that each "
        "site carries (the encoder's stream, its heads at each position, the decoder's heads and stream at the step)",
    )
    add_checkpoint(patch)
    patch.add_argument("--clean", required=True, help="the source whose output is read (decoded greedily)")
    patch.add_argument("--corrupt", required=True, help="a source of the same piece count that differs in a word")
    patch.add_argument("--target", required=True, help="the output token read, as the output writes it (il)")
    patch.add_argument("--foil", help="the token it is read against, in the same form (elle); none: log p(target)")
    patch.add_argument("--step", type=int, help="the output step read (1-based); default: the target's first")
    patch.add_argument(
        "--noising", action="store_true", help="patch the corrupted run's activations into the clean run instead"
    )
    patch.add_argument(
        "--words",
        action="store_true",
        help="patch each source word's pieces together: the encoder's grids by word (src_words), not by piece",
    )
    patch.add_argument("--out", required=True, help="output file (.npz, or .json with --format json)")
    patch.add_argument("--format", choices=["npz", "json"], default="npz")
    patch.set_defaults(run=cmd_patch)
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
    patch_set.set_defaults(run=cmd_patch_set)
