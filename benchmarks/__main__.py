"""python -m benchmarks [--quick | --smoke] [--no-browser | --cold-start] [--sentences FILE] [--treebank FILE]: every
figure of the performance table, with its baseline, each row printed as it is measured."""

from __future__ import annotations

import argparse
import dataclasses
import tempfile
from pathlib import Path

from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint
from transformer.text.files import read_lines
from ui.services.work import TRANSLATE_BATCH

from .app_speed import (
    browser_rows,
    candidate_words_row,
    cold_start_rows,
    decoder_lens_row,
    lens_row,
    long_input_row,
    step_view_row,
)
from .attribution_speed import (
    attention_path_rows,
    attribution_row,
    contributions_row,
    flow_row,
    head_importance_rows,
    syntax_row,
)
from .model_speed import (
    Row,
    batched_beam_row,
    corpus_batch_row,
    decode_rows,
    lower_bound_row,
    machine,
    table,
    training_row,
)
from .patching_speed import pair_set_row, patching_rows
from .report_speed import report_rows
from .serving.start import start_part_rows
from .training_step import GENERAL, training_step_rows

MULTI30K_VALIDATION = Path(__file__).resolve().parents[2] / "shared" / "data" / "multi30k" / "val.en.gz"
UD_DEV = Path(__file__).resolve().parents[2] / "shared" / "data" / "ud" / "en_ewt-ud-dev.conllu.gz"
BEAM_SENTENCES = 200
TREEBANK_SENTENCES = 2000


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repeats (noisier)")
    parser.add_argument(
        "--smoke", action="store_true", help="one repeat of everything, a few sentences: that every row runs"
    )
    parser.add_argument("--no-browser", action="store_true", help="skip the Chromium timings")
    parser.add_argument(
        "--cold-start", action="store_true", help="only the app's cold start: its parts, then in Chromium"
    )
    parser.add_argument(
        "--sentences",
        type=Path,
        default=MULTI30K_VALIDATION,
        help="English sentences, one a line (plain or gzip), for the batched beam row",
    )
    parser.add_argument(
        "--treebank", type=Path, default=UD_DEV, help="gold parses (CoNLL-U) for the syntactic heads' row"
    )
    args = parser.parse_args()
    repeats = 1 if args.smoke else 3 if args.quick else 9
    if args.cold_start:
        print(f"machine: {machine()}\n", flush=True)
        rows = MeasuredRows()
        rows.extend(start_part_rows(1 if args.smoke else 3))
        rows.extend(cold_start_rows(1 if args.smoke else 5))
        print("\n" + table(rows))
        return
    checkpoint = load_checkpoint(DEFAULT_CHECKPOINT)
    print(f"machine: {machine()}\ncheckpoint: {DEFAULT_CHECKPOINT.name}\n", flush=True)
    rows = MeasuredRows()
    rows.extend(decode_rows(checkpoint, repeats))
    rows.append(lower_bound_row(checkpoint, repeats))
    if args.sentences.exists():
        sentences = read_lines(args.sentences)[: 16 if args.smoke else BEAM_SENTENCES]
        rows.append(batched_beam_row(checkpoint, sentences))
        rows.append(corpus_batch_row(checkpoint, sentences, TRANSLATE_BATCH))
        rows.extend(head_importance_rows(checkpoint, sentences))
    else:
        print(f"{args.sentences} is missing: no batched beam row", flush=True)
    if args.treebank.exists():
        rows.append(syntax_row(checkpoint, args.treebank, 50 if args.smoke else TREEBANK_SENTENCES))
    else:
        print(f"{args.treebank} is missing: no syntactic heads' row", flush=True)
    rows.append(training_row(checkpoint, max(1 if args.smoke else 3, repeats // 2)))
    # The general recipe's model (a model of a few dimensions in the smoke run: that the rows run, not their figures)
    recipe = dataclasses.replace(GENERAL, d_model=32, n_heads=2, d_ff=64) if args.smoke else GENERAL
    rows.extend(training_step_rows(recipe, repeats=max(1 if args.smoke else 3, repeats // 2)))
    rows.append(step_view_row(checkpoint, repeats))
    rows.append(lens_row(checkpoint, repeats))
    rows.append(decoder_lens_row(checkpoint, repeats))
    rows.append(candidate_words_row(checkpoint, repeats))
    rows.append(long_input_row(checkpoint))
    rows.append(attribution_row(checkpoint, repeats))
    rows.extend(attention_path_rows(repeats))
    rows.append(contributions_row(checkpoint, repeats))
    rows.append(flow_row(checkpoint, repeats))
    rows.extend(patching_rows(checkpoint, repeats))
    rows.append(pair_set_row(checkpoint, 2 if args.smoke else None))
    rows.extend(start_part_rows(1 if args.smoke else 3))
    if not args.no_browser:
        rows.extend(browser_rows(*((1, 2, 1) if args.smoke else ())))
        rows.extend(report_rows(checkpoint, *((1, 1) if args.smoke else ())))
        if args.smoke:  # the real sizes' app rows (hf_families --app, --app-on-device) at the tests' size
            rows.extend(tiny_marian_app_rows())
    print("\n" + table(rows))


def tiny_marian_app_rows() -> list[Row]:
    from benchmarks.hf_families import CORPUS, app_rows_at
    from tests.fixtures.hf_models import TINY, save_marian

    with tempfile.TemporaryDirectory() as folder:
        model = save_marian(Path(folder), CORPUS, CORPUS, TINY)
        return app_rows_at("a tiny Marian model", model) + app_rows_at("a tiny Marian model", model, on_device=True)


class MeasuredRows(list):
    """The table's rows, each printed as soon as it is measured: a row that fails later loses none before it."""

    def append(self, row: Row) -> None:
        super().append(row)
        print(table([row]).splitlines()[-1], flush=True)

    def extend(self, rows: list[Row]) -> None:
        for row in rows:
            self.append(row)


if __name__ == "__main__":
    main()
