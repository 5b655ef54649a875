"""The command line: `python -m transformer {translate,inspect,attribute,evaluate,train,average,holdout,import-hf,train-lens,align,timeline,synthetic} --help`."""

from __future__ import annotations

import argparse
import ast
import os
import re
import sys
from collections.abc import Collection
from dataclasses import MISSING, Field, fields
from pathlib import Path

import torch

from transformer.decoding.result import DecodeInputError, DecodeResult, source_ids, truncation_note
from transformer.decoding.settings import DecodeSettings, decode_text
from transformer.hugging_face.directory import load_checkpoint_or_hf
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, Checkpoint, CheckpointError
from transformer.model.config import TransformerConfig
from transformer.text.files import TEXT_FILE, decoded_lines, open_regular
from transformer.text.tokenizer import LONE_SURROGATE

CONSOLE_COMMAND = "transformer-explorer"  # pyproject.toml's [project.scripts]
FIELD_HELP = {
    "train_src": "training source files, one per corpus",
    "train_tgt": "their target files, in the same order",
    "train_weights": "how many times an epoch reads each corpus, in the same order (0.5: a new random half each "
    "epoch); every corpus once if not given",
    "val_src": "validation source files, one per set: the best checkpoint has the best mean BLEU over the sets",
    "val_tgt": "their reference files, in the same order",
    "snapshot_epochs": "also keep the model after these epochs",
    "keep_last": "also keep the models of the last N epochs beside --out, for `average`, and the untrained start "
    "(NAME-epoch0), for `timeline`",
    "max_seconds": "start no new epoch after this many seconds of training in this call (a resumed or continued "
    "run gets them anew: a session's budget); the epoch in progress finishes; 0: no limit",
    "tokenizer_sample": "sentences (both sides, drawn in the weights' proportions) the vocabulary is trained on",
    "cpu_bfloat16": "bfloat16 autocast on the CPU too (a GPU always uses it): faster steps where the cores have "
    "bfloat16 instructions (avx512_bf16 or amx_bf16 in lscpu), slower where not; `python -m "
    "benchmarks.training_step` measures it",
}
TOKENIZER_FIELDS = {"src_vocab_size", "tgt_vocab_size", "pad_id", "unk_id", "bos_id", "eos_id"}  # the tokenizer's


def _device(name: str) -> str:
    if name == "cuda" and not torch.cuda.is_available():
        print("CUDA is not available: running on the CPU", file=sys.stderr)
        return "cpu"
    return name


def _add_checkpoint(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--checkpoint",
        default=str(DEFAULT_CHECKPOINT),
        help="checkpoint file, or a Hugging Face model directory (Marian, M2M100, NLLB, mBART-50, BART, T5) (default: %(default)s)",
    )
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cuda" if torch.cuda.is_available() else "cpu")


def cmd_translate(args: argparse.Namespace) -> int:
    from transformer.decoding.translate import translate_texts

    checkpoint = load_checkpoint_or_hf(args.checkpoint, _device(args.device))
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
            print(f"{source}: line {number}: {truncation_note(max_len, len(ids) - 1)}", file=sys.stderr)
    for line in translate_texts(checkpoint.model, checkpoint.tokenizer, lines, _decode_settings(args)):
        print(line)
    return 1 if problems else 0


def _decode_argument(args: argparse.Namespace) -> tuple[Checkpoint, DecodeResult]:
    """The --text sentence decoded by the --checkpoint model as the decoding flags say, noting a cut on stderr."""
    undecodable = LONE_SURROGATE.search(args.text)  # what the shell's non-UTF-8 bytes become in sys.argv
    if undecodable:
        byte = undecodable.group().encode("utf-8", "surrogateescape").hex()
        raise ValueError(f"--text is not UTF-8 text (byte 0x{byte}); give the sentence as UTF-8")
    checkpoint = load_checkpoint_or_hf(args.checkpoint, _device(args.device))
    result = decode_text(checkpoint.model, checkpoint.tokenizer, args.text, _decode_settings(args))
    if result.truncated:
        print(f"note: {truncation_note(checkpoint.config.max_len, len(result.src_ids) - 1)}", file=sys.stderr)
    return checkpoint, result


def _write_arrays(args: argparse.Namespace, arrays: dict) -> Path:
    """--out as .npz, or JSON with --format json."""
    from transformer.io.export import json_text, npz_bytes

    out = Path(args.out)
    if args.format == "json":
        out.write_text(json_text(arrays), encoding="utf-8")
    else:
        out.write_bytes(npz_bytes(arrays))
    return out


def cmd_inspect(args: argparse.Namespace) -> int:
    from transformer.io.export import result_arrays

    checkpoint, result = _decode_argument(args)
    out = _write_arrays(args, result_arrays(result, checkpoint.tokenizer))
    print(result.text)
    print(f"wrote {out} ({len(result.src_ids)} source, {result.steps} output tokens)", file=sys.stderr)
    return 0


def cmd_attribute(args: argparse.Namespace) -> int:
    from transformer.analysis.attribution import attribute

    checkpoint, result = _decode_argument(args)
    arrays = attribute(checkpoint.model, result, n_steps=args.steps).arrays()
    out = _write_arrays(args, arrays)
    print(result.text)
    delta = float(abs(arrays["convergence_delta"]).max())
    print(
        f"wrote {out} ({len(result.src_ids)} source, {result.steps} output tokens; largest convergence delta "
        f"{delta:.3g})",
        file=sys.stderr,
    )
    return 0


def cmd_evaluate(args: argparse.Namespace) -> int:
    from transformer.training.evaluate import evaluate_files, save_scores

    if len(args.src) != len(args.ref):
        raise ValueError(f"{len(args.src)} source files but {len(args.ref)} reference files: give one of each per set")
    runs = [(src, ref, beam) for src, ref in zip(args.src, args.ref) for beam in args.beam]
    if len(runs) > 1 and (args.output or args.save):
        raise ValueError("--output and --save take one set and one beam width")
    checkpoint = load_checkpoint_or_hf(args.checkpoint, _device(args.device))  # once for every set and width
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


def cmd_train(args: argparse.Namespace) -> int:
    from transformer.training.train import TrainSettings, train

    values = _field_values(args, TrainSettings, skip={"model"})
    for name in ("train_src", "train_tgt", "val_src", "val_tgt", "train_weights", "snapshot_epochs"):
        values[name] = tuple(values.get(name, ()))
    model = _field_values(args, TransformerConfig, skip=TOKENIZER_FIELDS)
    values["model"] = TransformerConfig(src_vocab_size=args.vocab_size, tgt_vocab_size=args.vocab_size, **model)
    progress = train(TrainSettings(**values), resume=args.resume, continue_from=args.continue_from)
    if os.environ.get("RANK", "0") == "0":  # under torchrun, only rank 0 validated: its line alone
        print(
            f"done: {progress.step} steps, best validation BLEU {progress.best_bleu:.2f} (epoch {progress.best_epoch})"
        )
    return 0


def cmd_average(args: argparse.Namespace) -> int:
    from transformer.io.average import average_checkpoints
    from transformer.io.checkpoint import save_checkpoint

    averaged = average_checkpoints(args.checkpoints)
    save_checkpoint(args.out, averaged.model, averaged.tokenizer, averaged.metadata, getattr(torch, args.dtype))
    print(f"wrote {args.out}: the mean of {len(args.checkpoints)} checkpoints")
    return 0


def cmd_holdout(args: argparse.Namespace) -> int:
    from transformer.text.holdout import write_holdout

    for part, path in write_holdout(args.src, args.tgt, args.size, args.out_dir, args.seed).items():
        print(f"{part}: {path}")
    return 0


def cmd_import_hf(args: argparse.Namespace) -> int:
    from transformer.hugging_face.directory import import_hf
    from transformer.io.checkpoint import save_checkpoint

    checkpoint = import_hf(args.directory)
    save_checkpoint(args.out, checkpoint.model, checkpoint.tokenizer, checkpoint.metadata, getattr(torch, args.dtype))
    config = checkpoint.config
    print(
        f"wrote {args.out}: {config.parameter_count():,} parameters, {config.n_encoder_layers}+"
        f"{config.n_decoder_layers} layers, {config.n_heads} heads, vocabulary {config.src_vocab_size:,}"
    )
    return 0


def cmd_train_lens(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from transformer.analysis.tuned_lens import file_sha256, fit_tuned_lens, save_tuned_lens, tuned_lens_path
    from transformer.io.checkpoint import load_checkpoint
    from transformer.text.files import read_parallel

    if not Path(args.checkpoint).is_file():
        raise ValueError(f"{args.checkpoint} is not a checkpoint file (a tuned lens is stored beside one)")
    checkpoint = load_checkpoint(args.checkpoint)
    sources, targets = read_parallel(args.src, args.tgt)
    with tqdm(total=args.steps, desc="fitting the tuned lens", unit="step") as bar:

        def advance(step: int, loss: float) -> None:
            bar.update(step - bar.n)
            bar.set_postfix(kl=f"{loss:.3f}")

        lens = fit_tuned_lens(checkpoint.model, checkpoint.tokenizer, sources, targets, args.steps, progress=advance)
    out = Path(args.out) if args.out else tuned_lens_path(Path(args.checkpoint))
    save_tuned_lens(out, lens, file_sha256(args.checkpoint), f"{Path(args.src).name} / {Path(args.tgt).name}")
    for layer, (plain, tuned) in enumerate(zip(lens.kl_logit, lens.kl_tuned)):
        print(
            f"decoder layer {layer + 1}: mean KL from the output {plain:.3f} nats with the logit lens, "
            f"{tuned:.3f} with the tuned lens (held-out pairs)"
        )
    print(f"wrote {out}")
    return 0


def cmd_align(args: argparse.Namespace) -> int:
    import json

    import pandas as pd
    from tqdm import tqdm

    from transformer.analysis.alignment import (
        align_corpus,
        format_pharaoh,
        parse_pharaoh,
        reversed_gold,
        with_intersection,
    )
    from transformer.io.export import csv_text
    from transformer.text.files import read_lines, read_parallel

    if args.table and Path(args.table).suffix not in (".csv", ".json"):
        raise ValueError(f"--table {args.table}: name a .csv or a .json file")
    sources, targets = read_parallel(args.src, args.tgt)
    gold_lines = read_lines(args.gold)
    golds, one_based = parse_pharaoh(
        gold_lines, [len(s.split()) for s in sources], [len(t.split()) for t in targets], args.one_based
    )
    if args.limit:
        sources, targets, golds = sources[: args.limit], targets[: args.limit], golds[: args.limit]
    checkpoint = load_checkpoint_or_hf(args.checkpoint, _device(args.device))
    counting = "given" if args.one_based is not None else "detected"
    print(f"{args.gold}: words counted from {int(one_based)} ({counting})", file=sys.stderr)
    with tqdm(total=len(sources), desc="aligning", unit="pair") as bar:
        report = align_corpus(
            checkpoint.model,
            checkpoint.tokenizer,
            sources,
            targets,
            golds,
            args.threshold,
            args.integrated_gradients,
            progress=lambda done, _: bar.update(done - bar.n),
        )
    if args.reverse_checkpoint:
        reverse = load_checkpoint_or_hf(args.reverse_checkpoint, _device(args.device))
        with tqdm(total=len(sources), desc="aligning with the reverse model", unit="pair") as bar:
            backward = align_corpus(
                reverse.model,
                reverse.tokenizer,
                targets,
                sources,
                [reversed_gold(g) for g in golds],
                args.threshold,
                args.integrated_gradients,
                progress=lambda done, _: bar.update(done - bar.n),
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
                out.write(csv_text(pd.DataFrame(table), index=False))
        print(f"wrote {args.table}")
    if args.out:
        best = report.scores[0].method
        by_line = dict(zip(report.aligned, report.links[best]))
        Path(args.out).write_text("".join(format_pharaoh(by_line.get(i, ())) + "\n" for i in range(len(sources))))
        print(f"wrote {args.out}: the links of {best.label}, 0-based, a line per pair (empty where left out)")
    return 0


def cmd_timeline(args: argparse.Namespace) -> int:
    import pandas as pd

    from transformer.analysis.alignment import parse_pharaoh
    from transformer.analysis.timeline import KINDS, GoldPairs
    from transformer.io.export import csv_text
    from transformer.training.snapshots import timeline_of_run
    from transformer.io.timeline_file import load_timeline, save_timeline, timeline_path
    from transformer.text.files import read_lines, read_parallel

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


def cmd_synthetic(args: argparse.Namespace) -> int:
    from transformer.training.synthetic import train_reversal

    bleu = train_reversal(args.out, seed=args.seed, epochs=args.epochs)
    print(f"wrote {args.out}: validation BLEU {bleu:.2f}")
    return 0


def _add_fields(
    parser: argparse.ArgumentParser | argparse._ArgumentGroup,
    settings: type,
    defaults: object | None = None,
    skip: Collection[str] = (),
) -> None:
    """One flag per field of a settings dataclass (--beam-width for beam_width), typed as the field.

    Defaults are the field's own, or those of the given instance; a Literal field's values are its choices.
    """
    for field in fields(settings):
        if field.name in skip:
            continue
        flag = "--" + field.name.replace("_", "-")
        default = field.default if defaults is None else getattr(defaults, field.name)
        required = default is MISSING
        sequence = re.fullmatch(r"tuple\[(int|float|str), \.\.\.\]", field.type)
        if sequence:  # one value or several after the flag: --train-src a.en b.en
            kind = {"int": int, "float": float, "str": str}[sequence.group(1)]
            parser.add_argument(
                flag,
                type=kind,
                nargs="+" if required else "*",
                required=required,
                default=None if required else list(default),
                help=_help(field, required),
            )
        elif field.type == "bool":
            parser.add_argument(
                flag, action=argparse.BooleanOptionalAction, default=default, help=FIELD_HELP.get(field.name)
            )
        else:
            literal = re.fullmatch(r"Literal\[(.*)\]", field.type)
            choices = ast.literal_eval(f"({literal.group(1)},)") if literal else None
            kind = {"int": int, "int | None": int, "float": float}.get(field.type, str)
            parser.add_argument(
                flag,
                type=kind,
                required=required,
                default=None if required else default,
                choices=choices,
                help=_help(field, required),
            )


def _help(field: Field, required: bool) -> str | None:
    """The field's comment in its dataclass, when it has one (FIELD_HELP), and its default."""
    text = FIELD_HELP.get(field.name, "")
    return text if required else f"{text}{'; ' if text else ''}default: %(default)s"


def _field_values(args: argparse.Namespace, settings: type, skip: Collection[str] = ()) -> dict:
    """The parsed flags that _add_fields made for a settings dataclass, by field name (unset ones left out)."""
    return {
        f.name: getattr(args, f.name)
        for f in fields(settings)
        if f.name not in skip and getattr(args, f.name, None) is not None
    }


def _train_parser(parser: argparse.ArgumentParser) -> None:
    from transformer.training.train import DEFAULT_MODEL, TrainSettings

    _add_fields(parser, TrainSettings, skip={"model"})
    model = parser.add_argument_group("the model (TransformerConfig); the tokenizer sets the special ids")
    model.add_argument(
        "--vocab-size",
        type=int,
        default=DEFAULT_MODEL.src_vocab_size,
        help="joint vocabulary asked of the tokenizer (default: %(default)s)",
    )
    _add_fields(model, TransformerConfig, DEFAULT_MODEL, skip=TOKENIZER_FIELDS)
    parser.add_argument("--resume", action="store_true", help="continue from the saved state beside --out")
    parser.add_argument(
        "--continue-from",
        metavar="CHECKPOINT",
        help="where no state is beside --out (a lost run directory): go on from this checkpoint of "
        "the same run, its weights, vocabulary and epochs, Adam's moments anew",
    )


def _decode_parser(parser: argparse.ArgumentParser) -> None:
    _add_fields(parser, DecodeSettings)
    parser.add_argument("--beam", type=int, default=1, help="shorthand: beam search of this width (1: as --strategy)")


def _decode_settings(args: argparse.Namespace) -> DecodeSettings:
    values = _field_values(args, DecodeSettings)
    if args.beam > 1:
        values.update(strategy="beam", beam_width=args.beam)
    return DecodeSettings(**values)


def build_parser() -> argparse.ArgumentParser:
    command = Path(sys.argv[0]).name
    parser = argparse.ArgumentParser(
        prog=command if command == CONSOLE_COMMAND else "python -m transformer", description=__doc__
    )
    commands = parser.add_subparsers(dest="command", required=True)

    translate = commands.add_parser("translate", help="translate sentences, one per line, from stdin or --input")
    _add_checkpoint(translate)
    _decode_parser(translate)
    translate.add_argument("--input", help="file to translate instead of stdin")
    translate.set_defaults(run=cmd_translate)

    inspect = commands.add_parser("inspect", help="decode one sentence and write every attention map")
    _add_checkpoint(inspect)
    inspect.add_argument("--text", required=True)
    inspect.add_argument("--out", required=True, help="output file (.npz, or .json with --format json)")
    inspect.add_argument("--format", choices=["npz", "json"], default="npz")
    _decode_parser(inspect)
    inspect.set_defaults(run=cmd_inspect)

    attribution = commands.add_parser(
        "attribute", help="integrated gradients, gradient x input and value-weighted attention for each output token"
    )
    _add_checkpoint(attribution)
    attribution.add_argument("--text", required=True)
    attribution.add_argument("--out", required=True, help="output file (.npz, or .json with --format json)")
    attribution.add_argument("--format", choices=["npz", "json"], default="npz")
    attribution.add_argument("--steps", type=int, default=32, help="interpolation steps of integrated gradients")
    _decode_parser(attribution)
    attribution.set_defaults(run=cmd_attribute)

    evaluate = commands.add_parser("evaluate", help="sacreBLEU and chrF of a checkpoint on a test set")
    _add_checkpoint(evaluate)
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

    train = commands.add_parser("train", help="train a model on parallel text and save the best checkpoint")
    _train_parser(train)
    train.set_defaults(run=cmd_train)

    average = commands.add_parser("average", help="the mean of several checkpoints of one run (e.g. its last epochs)")
    average.add_argument("checkpoints", nargs="+", help="checkpoint files of the same model and vocabulary")
    average.add_argument("--out", required=True, help="the checkpoint file to write")
    average.add_argument("--dtype", choices=["float32", "float16"], default="float16")
    average.set_defaults(run=cmd_average)

    holdout = commands.add_parser("holdout", help="hold a dev set out of a corpus, by source sentence")
    holdout.add_argument("--src", required=True)
    holdout.add_argument("--tgt", required=True)
    holdout.add_argument("--size", type=int, default=1000, help="distinct source sentences to hold out")
    holdout.add_argument("--seed", type=int, default=1)
    holdout.add_argument("--out-dir", required=True, help="NAME-train and NAME-dev files are written there")
    holdout.set_defaults(run=cmd_holdout)

    hf = commands.add_parser(
        "import-hf",
        help="convert a Hugging Face model directory (Marian, M2M100, NLLB, mBART-50, BART, T5)",
    )
    hf.add_argument("directory", help="saved by the model's and the tokenizer's save_pretrained")
    hf.add_argument("--out", required=True, help="the checkpoint file to write")
    hf.add_argument("--dtype", choices=["float32", "float16"], default="float32")
    hf.set_defaults(run=cmd_import_hf)

    lens = commands.add_parser("train-lens", help="fit a tuned lens (an affine map per decoder layer) to a checkpoint")
    lens.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT), help="checkpoint file (default: %(default)s)")
    lens.add_argument("--src", required=True, help="source sentences, one a line (.gz accepted)")
    lens.add_argument("--tgt", required=True, help="their translations, line by line (teacher forced)")
    lens.add_argument("--steps", type=int, default=200, help="optimisation steps of about 1,200 target tokens")
    lens.add_argument("--out", help="default: lenses/NAME.safetensors beside the checkpoint, where the app finds it")
    lens.set_defaults(run=cmd_train_lens)

    align = commands.add_parser("align", help="score every head's word alignments against gold ones (AER)")
    _add_checkpoint(align)
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
        "--reverse-checkpoint",
        help="a model translating the other way: its best links, read back, are "
        "intersected with this model's best (a method of its own in the table)",
    )
    align.add_argument("--limit", type=int, help="align the first N pairs only")
    align.add_argument("--top", type=int, default=20, help="rows of the ranked table printed (default 20)")
    align.add_argument("--table", help="write the whole ranked table to this .csv or .json file")
    align.add_argument("--out", help="write the best method's alignments to this file, in the Pharaoh format")
    align.set_defaults(run=cmd_align)

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

    synthetic = commands.add_parser("synthetic", help="train the tiny sequence-reversal model (about a minute)")
    synthetic.add_argument("--out", default=str(DEFAULT_CHECKPOINT.with_name("reverse.safetensors")))
    synthetic.add_argument("--seed", type=int, default=1)
    synthetic.add_argument("--epochs", type=int, default=30)
    synthetic.set_defaults(run=cmd_synthetic)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return args.run(args)
    except (CheckpointError, DecodeInputError, FileNotFoundError, ValueError) as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    except OSError as error:  # a full disk, a folder without write permission: the files written before are intact
        where = f" ({error.filename})" if error.filename else ""
        print(f"error: {error.strerror or error}{where}; files written before it are intact", file=sys.stderr)
        return 2
