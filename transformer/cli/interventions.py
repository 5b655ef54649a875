"""Commands that change what the model computes and watch the output change: `patch` (activation patching)."""

from __future__ import annotations

import argparse
import sys
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
