"""Decoding from the command line: `translate` (sentences, one a line), `inspect` (every attention map of one sentence),
`attribute` (which source tokens each output token depends on), `decoderlens` (what each encoder layer already
says) and `figures` (a sentence's figures as SVG, PDF or PNG files)."""

from __future__ import annotations

import argparse
import sys

from transformer.cli.common import (
    add_checkpoint,
    add_decode_fields,
    decode_argument,
    decode_settings,
    device,
    write_arrays,
)
from transformer.cli.heads import head_argument, heads_off_probe
from transformer.decoding.result import source_ids, truncation_note
from transformer.io.checkpoint import Checkpoint
from transformer.text.files import TEXT_FILE, decoded_lines, open_regular
from transformer.toolkits.opening import load_any_checkpoint


def cmd_translate(args: argparse.Namespace) -> int:
    from transformer.decoding.translate import translate_texts

    checkpoint = load_any_checkpoint(args.checkpoint, device(args.device))
    source = args.input or "standard input"
    if args.input:
        with open_regular(args.input, TEXT_FILE) as handle:
            lines, problems = decoded_lines(handle)
    else:
        lines, problems = decoded_lines(sys.stdin.buffer)
    for problem in problems:  # the good lines are still translated, one output line per input line
        print(f"{source}: {problem}; its output line is left empty", file=sys.stderr)
    max_len = checkpoint.config.max_len
    for number, line in enumerate(lines, 1):
        ids, cut = source_ids(checkpoint.tokenizer, line, max_len) if line.strip() else ([], False)
        if cut:
            print(f"{source}: line {number}: {truncation_note(checkpoint.tokenizer, max_len)}", file=sys.stderr)
    probe = heads_off_probe(checkpoint.model, args.heads_off)
    for line in translate_texts(checkpoint.model, checkpoint.tokenizer, lines, decode_settings(args), probe=probe):
        print(line)
    return 1 if problems else 0


def cmd_inspect(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from transformer.decoding.lens import read_lens
    from transformer.io.export import result_arrays

    checkpoint, result = decode_argument(args)
    result = replace(result, lens=read_lens(checkpoint.model, result.lens, result.tgt_ids))  # every layer's guesses
    out = write_arrays(args, result_arrays(result, checkpoint.tokenizer))
    print(result.text)
    print(f"wrote {out} ({len(result.src_ids)} source, {result.steps} output tokens)", file=sys.stderr)
    return 0


def cmd_attribute(args: argparse.Namespace) -> int:
    from transformer.analysis.attribution.measures import attribute

    checkpoint, result = decode_argument(args)
    arrays = attribute(checkpoint.model, result, n_steps=args.steps).arrays()
    out = write_arrays(args, arrays)
    print(result.text)
    delta = float(abs(arrays["convergence_delta"]).max())
    print(
        f"wrote {out} ({len(result.src_ids)} source, {result.steps} output tokens; largest convergence delta "
        f"{delta:.3g})",
        file=sys.stderr,
    )
    return 0


def cmd_contributions(args: argparse.Namespace) -> int:
    import numpy as np

    from transformer.analysis.contributions import contributions
    from transformer.analysis.rollout import attention_flow
    from transformer.text.pieces import readable

    checkpoint, result = decode_argument(args)
    found = contributions(checkpoint.model, result.src_ids, result.tgt_ids)
    arrays = {
        "encoder_alti": found.encoder,
        "flow": attention_flow(result.encoder_self.numpy(), max_tokens=None),
        "alti_plus": found.alti_plus,
        "source_share": found.source_share,
        "src_pieces": np.array(result.src_pieces),
        "tgt_pieces": np.array(result.tgt_pieces),
        "decoder_input_pieces": np.array(result.decoder_input_pieces),
    }
    out = write_arrays(args, arrays)
    print(result.text)
    shares = ", ".join(f"{readable(piece)} {share:.0%}" for piece, share in zip(result.tgt_pieces, found.source_share))
    print(f"from the source: {shares}", file=sys.stderr)
    print(f"wrote {out} ({len(result.src_ids)} source, {result.steps} output tokens)", file=sys.stderr)
    return 0


def cmd_decoderlens(args: argparse.Namespace) -> int:
    """The translation from each encoder layer's output (analysis.decoder_lens) as JSON; with --step, each layer's
    candidates at that step of the model's own translation."""
    import json
    from dataclasses import asdict
    from pathlib import Path

    from transformer.analysis.decoder_lens import candidates_at_step, decoder_lens
    from transformer.decoding.strategies import DecodeSettings, decode_text

    if args.step is not None and args.step < 1:
        raise ValueError(f"--step {args.step}: steps count from 1")
    checkpoint = load_any_checkpoint(args.checkpoint, device(args.device))
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    own = decode_text(model, tokenizer, args.text, DecodeSettings())
    layers = decoder_lens(model, tokenizer, own.src_ids)
    found: dict = {"text": args.text, "translation": own.text, "layers": [asdict(layer) for layer in layers]}
    if args.step is not None:
        candidates = candidates_at_step(model, own.src_ids, own.tgt_ids, args.step - 1)
        found["step"] = {"step": args.step, "token": own.tgt_pieces[args.step - 1]} | {
            "candidates": [
                {"layer": layer, "pieces": [tokenizer.id_to_piece(i) for i in ids], "ids": ids, "probabilities": ps}
                for layer, (ids, ps) in enumerate(zip(candidates.ids, candidates.probabilities), 1)
            ]
        }
    Path(args.out).write_text(json.dumps(found, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    for layer in layers:
        print(f"layer {layer.layer}: {layer.text}")
    print(f"wrote {args.out}", file=sys.stderr)
    return 0


def cmd_figures(args: argparse.Namespace) -> int:
    from pathlib import Path

    from transformer.analysis.attribution.measures import attribute
    from transformer.viz.files import write_figures
    from transformer.viz.matrices import matrix_heatmap
    from transformer.viz.report import report_figures

    if args.corrupt and not args.token:
        print("figures: --corrupt needs --token, the output token the Cause grids read (il)", file=sys.stderr)
        return 2
    checkpoint, result = decode_argument(args)
    figures = list(report_figures(result, args.words))
    found = attribute(checkpoint.model, result, n_steps=args.steps)
    gradients = ("Integrated gradients", found.integrated_gradients)
    figures.append(
        (
            gradients[0],
            matrix_heatmap(
                gradients[1],
                "integrated gradients of each output token over the source",
                list(result.tgt_pieces),
                list(result.src_pieces),
                x_title="source token",
                y_title="output token",
            ),
        )
    )
    if args.corrupt:
        figures += cause_figures(checkpoint, args)
    written = write_figures(figures, Path(args.out), args.format)
    print(result.text)
    print(f"wrote {len(written)} figures into {args.out}: {', '.join(p.name for p in written)}", file=sys.stderr)
    return 0


def cause_figures(checkpoint: Checkpoint, args: argparse.Namespace) -> list:
    """The Cause page's grids for the sentence against `--corrupt`: every site patched (cli.interventions.patched)."""
    from transformer.cli.interventions import patched
    from transformer.viz.patching import patching_grids

    pair = argparse.Namespace(
        clean=args.text,
        corrupt=args.corrupt,
        target=args.token,
        foil=args.against,
        step=None,
        words=False,
        noising=False,
    )
    _, clean, _, found = patched(checkpoint.model, checkpoint.tokenizer, pair)
    grids = patching_grids(found, list(clean.src_pieces)).all()
    return [(f"Cause {figure.layout.title.text or number}", figure) for number, figure in enumerate(grids, 1)]


def add_parsers(commands: argparse._SubParsersAction) -> None:
    """Registers this module's commands."""
    translate = commands.add_parser("translate", help="translate sentences, one per line, from stdin or --input")
    add_checkpoint(translate)
    add_decode_fields(translate)
    translate.add_argument("--input", help="file to translate instead of stdin")
    translate.add_argument(
        "--heads-off",
        nargs="+",
        type=head_argument,
        default=[],
        metavar="KIND.LAYER.HEAD",
        help="switch these heads off (1-based, as the app names them: encoder.1.6 decoder.2.3 cross.3.1; "
        "encoder:1:6 is read too); greedy only",
    )
    translate.set_defaults(run=cmd_translate)

    inspect = commands.add_parser("inspect", help="decode one sentence and write every attention map")
    add_checkpoint(inspect)
    inspect.add_argument("--text", required=True)
    inspect.add_argument("--out", required=True, help="output file (.npz, or .json with --format json)")
    inspect.add_argument("--format", choices=["npz", "json"], default="npz")
    add_decode_fields(inspect)
    inspect.set_defaults(run=cmd_inspect)

    attribution = commands.add_parser(
        "attribute", help="integrated gradients, gradient x input and value-weighted attention for each output token"
    )
    add_checkpoint(attribution)
    attribution.add_argument("--text", required=True)
    attribution.add_argument("--out", required=True, help="output file (.npz, or .json with --format json)")
    attribution.add_argument("--format", choices=["npz", "json"], default="npz")
    attribution.add_argument("--steps", type=int, default=32, help="interpolation steps of integrated gradients")
    add_decode_fields(attribution)
    attribution.set_defaults(run=cmd_attribute)

    add_reading_parsers(commands)


def add_reading_parsers(commands: argparse._SubParsersAction) -> None:
    """The commands that read one sentence's decode further: contributions, DecoderLens, its figures as files."""
    contributions = commands.add_parser(
        "contributions",
        help="ALTI+: how much each output token drew on each source token and on the output so far, through the "
        "whole model",
    )
    add_checkpoint(contributions)
    contributions.add_argument("--text", required=True)
    contributions.add_argument("--target", help="a translation to read (teacher forced) instead of the decode")
    contributions.add_argument("--out", required=True, help="output file (.npz, or .json with --format json)")
    contributions.add_argument("--format", choices=["npz", "json"], default="npz")
    add_decode_fields(contributions)
    contributions.set_defaults(run=cmd_contributions)

    lens = commands.add_parser(
        "decoderlens",
        help="DecoderLens: the translation the decoder writes from each encoder layer's output (docs/decoder-lens.md)",
    )
    add_checkpoint(lens)
    lens.add_argument("--text", required=True)
    lens.add_argument("--step", type=int, help="also each layer's candidates at this step of the translation (1-based)")
    lens.add_argument("--out", required=True, help="output file (.json)")
    lens.set_defaults(run=cmd_decoderlens)

    figures = commands.add_parser(
        "figures",
        help="a sentence's figures as files for papers and slides: SVG or PDF (text as text) or PNG at 2x",
    )
    add_checkpoint(figures)
    figures.add_argument("--text", required=True)
    figures.add_argument("--out", required=True, help="the folder the files are written into (made where missing)")
    figures.add_argument("--format", choices=["svg", "pdf", "png"], default="svg")
    figures.add_argument("--words", action="store_true", help="maps over words, each word's pieces merged")
    figures.add_argument("--steps", type=int, default=32, help="interpolation steps of integrated gradients")
    figures.add_argument("--corrupt", help="also the Cause page's grids: a source of the same piece count")
    figures.add_argument("--token", help="with --corrupt: the output token read, as the output writes it (il)")
    figures.add_argument("--against", help="with --corrupt: the token it is read against (elle)")
    add_decode_fields(figures)
    figures.set_defaults(run=cmd_figures)
