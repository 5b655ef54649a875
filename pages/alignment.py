"""Alignment: which heads align words, scored against gold alignments (AER), with any sentence's links drawn."""

import functools
from dataclasses import dataclass
from pathlib import Path

import streamlit as st
from streamlit.runtime.uploaded_file_manager import UploadedFile

from transformer.analysis.alignment import (
    CONVENTIONS,
    DEFAULT_THRESHOLD,
    FLOW,
    AlignmentReport,
    GoldError,
    aer_grid,
    align_corpus,
    parse_pharaoh,
)
from transformer.analysis.decoder_flow import MAX_DECODER_FLOW_TOKENS
from transformer.io.export import csv_text
from transformer.model.heads import head_names, layer_names
from transformer.viz.alignment import alignment_heatmap
from transformer.viz.matrices import matrix_heatmap
from ui.services import models, uploads
from ui.services.explorer import Explored
from ui.services.work import heavy_job
from ui.state import keys, url
from ui.widgets import frame
from ui.widgets.charts import show, table
from ui.widgets.progress import ProgressBar, pace
from ui.widgets.text import literal

MAX_PAIRS = 2000
EXAMPLE = Path(__file__).parent.parent / "tests" / "data" / "alignment"  # 24 caption pairs aligned by hand
COUNTED_FROM = {"detect": None, "0": False, "1": True}

INTRO = (
    "Which heads align words? Measured as papers measure it: against human word alignments, by the alignment "
    "error rate (AER, Och & Ney 2003; lower is better). Give a source file and a target file (words separated by "
    "spaces) and a gold file in the Pharaoh format, a line per pair: `i-j` links source word i to target word j "
    "(sure), `i?j` or `ipj` a possible link. Every pair is run teacher forced; every cross-attention head, each "
    "layer's mean (each again without its sink keys: *attention, content only*) and value-weighted attention give "
    "a target × source word matrix, read two ways: row t as the query that **produces** target word t (*output*), "
    "or the one that was **fed** it, row t + 1 (*input*)."
)


@dataclass(frozen=True)
class Asked:
    """What the form asks for: the files (or the example) and how to align and score them."""

    source_file: UploadedFile | None
    target_file: UploadedFile | None
    gold_file: UploadedFile | None
    example: bool
    counted: str
    threshold: float
    limit: int
    gradients: bool
    flow: bool


def work_name(gradients: bool, flow: bool) -> str:
    """The work as timed on this server: its pace depends on the methods asked for."""
    return "alignment" + "+gradients" * gradients + "+flow" * flow


@functools.cache
def example_pairs() -> int:
    return len((EXAMPLE / "en.txt").read_text(encoding="utf-8").splitlines())


def the_form(explored: Explored) -> tuple[bool, Asked]:
    """The files and settings, with the pace to expect; whether Align and score was pressed."""
    with st.container(border=True):  # no form: the time to expect follows the settings as they change
        source_file = st.file_uploader("Source sentences, one a line", key="align_src")
        target_file = st.file_uploader("Their translations, line by line", key="align_tgt")
        gold_file = st.file_uploader("Gold alignments (Pharaoh: i-j sure, i?j or ipj possible)", key="align_gold")
        example = st.checkbox("Use the example instead: 24 caption pairs aligned by hand", key="align_example")
        left, middle, right = st.columns(3)
        counted = left.radio("Gold words counted from", list(COUNTED_FROM), horizontal=True, key="align_counted")
        threshold = middle.slider(
            "Threshold links: weight at least", 0.05, 0.95, DEFAULT_THRESHOLD, 0.05, key="align_threshold"
        )
        limit = right.number_input("Pairs (from the top)", 1, MAX_PAIRS, 200, key="align_limit")
        gradients = st.checkbox("Also integrated gradients (about 15 times as long)", key="align_gradients")
        flow = st.checkbox(
            f"Also attention flow through the decoder (pairs of up to {MAX_DECODER_FLOW_TOKENS} pieces a side)",
            key="align_flow",
            help="Maximum flow over every layer, the residual mixed in (Abnar and Zuidema 2020, carried into the "
            "decoder): longer pairs are left out of every method, so that all are scored on the same pairs.",
        )
        run = st.button("Align and score", key="align_run")
        pairs = min(int(limit), example_pairs()) if example else int(limit)
        st.caption(pace(work_name(gradients, flow), explored.checkpoint_key, "pair", pairs))
    asked = Asked(source_file, target_file, gold_file, example, counted, threshold, int(limit), gradients, flow)
    return run, asked


def read_files(asked: Asked) -> tuple[str, list[str], list[str], list[str]] | None:
    """The three files' lines (the example's, if chosen), or None with the reason said."""
    if asked.example:
        return "the example", *((EXAMPLE / name).read_text().splitlines() for name in ("en.txt", "fr.txt", "gold.txt"))
    files = (asked.source_file, asked.target_file, asked.gold_file)
    if not all(files):
        st.warning("Choose the three files, or the example.")
        return None
    try:
        lines = [uploads.uploaded_lines(file, asked.limit) for file in files]
    except ValueError as error:
        st.error(literal(str(error)))
        return None
    return f"{asked.source_file.name} / {asked.target_file.name}", *lines


def align(explored: Explored, asked: Asked, files: tuple[str, list[str], list[str], list[str]]) -> None:
    """Every pair aligned by every method and scored against the gold links, kept in the session (said where the
    files do not make parallel pairs)."""
    session, checkpoint = st.session_state, explored.checkpoint
    counted, threshold, gradients, flow = asked.counted, asked.threshold, asked.gradients, asked.flow

    name, sources, targets, gold_lines = files
    if len(sources) != len(targets):
        st.error(f"The source file has {len(sources)} lines and the target file {len(targets)}: not a parallel pair.")
    else:
        try:
            golds, one_based = parse_pharaoh(
                gold_lines, [len(s.split()) for s in sources], [len(t.split()) for t in targets], COUNTED_FROM[counted]
            )
        except GoldError as error:
            st.error(literal(f"The gold file: {error}"))
        else:
            count = min(asked.limit, len(sources))
            sources, targets, golds = sources[:count], targets[:count], golds[:count]
            costs = [len(s) * len(t) + 1 for s, t in zip(sources, targets)]
            timed = (work_name(gradients, flow), explored.checkpoint_key, count)
            progress = ProgressBar("Aligning", count, "pairs", costs, stop_key="align_stop", timed=timed)
            with heavy_job("alignments") as should_stop:
                report = align_corpus(
                    checkpoint.model,
                    checkpoint.tokenizer,
                    sources,
                    targets,
                    golds,
                    threshold,
                    gradients,
                    progress=lambda done, _: progress(done),
                    should_stop=should_stop,
                    flow=flow,
                )
            progress.close()
            session.alignment_run = keys.AlignmentRun(explored.checkpoint_key, name, sources, targets, golds, report)
            st.caption(f"Gold words counted from {int(one_based)}" + (" (detected)." if counted == "detect" else "."))


def ranking(stored: keys.AlignmentRun) -> None:
    """Every method's scores, best first, and their CSV."""
    report = stored.report
    longest = (
        "than attention flow is read for" if any(s.method.measure == FLOW for s in report.scores) else "the model reads"
    )
    note = f" {len(report.skipped)} left out: empty, or longer {longest}." if report.skipped else ""
    st.subheader("Every method, best first")
    st.caption(literal(f"{stored.name}: {len(report.aligned)} pairs aligned.{note} Click a column to sort."))
    frame = report.frame().set_index("rank")
    table(
        frame.style.format({"aer": "{:.3f}", "precision": "{:.3f}", "recall": "{:.3f}"}),
        width="stretch",
        height=360,
        key="align_table",
    )
    st.download_button(
        "Table as CSV", csv_text(frame), file_name="alignment.csv", mime="text/csv", on_click="ignore", key="align_csv"
    )


def grids(report: AlignmentReport) -> None:
    """Each layer's and head's AER under both conventions, for the measure and links chosen."""
    st.subheader("AER of every layer and head")
    measures = sorted({s.method.measure for s in report.scores if s.method.layer is not None})
    extractions = list(dict.fromkeys(s.method.extraction for s in report.scores))
    left, right = st.columns(2)
    measure = left.selectbox("Measure", measures, key="align_grid_measure")
    extraction = right.selectbox("Links", extractions, key="align_grid_extraction")
    for column, convention in zip(st.columns(2), CONVENTIONS):
        grid = aer_grid(report, measure, convention, extraction)
        layers, heads = grid.shape[0], grid.shape[1] - 1
        with column:
            show(
                matrix_heatmap(
                    grid,
                    f"AER, {convention} convention (lower aligns better)",
                    layer_names(layers),
                    [*head_names(heads), "heads' mean"],
                    value_range=(0.0, 1.0),
                ),
                key=f"align_grid_{convention}",
            )


def one_pair(explored: Explored, stored: keys.AlignmentRun) -> None:
    """One pair's matrix by one method, with the gold links and the method's own."""
    report = stored.report
    st.subheader("One pair, with its gold links")
    methods = [score.method for score in report.scores]
    left, right = st.columns([1, 3])
    pair = left.number_input("Pair", 1, len(report.aligned), 1, key="align_pair") - 1
    method = right.selectbox("Method (best first)", methods, format_func=lambda m: m.label, key="align_method")
    line = report.aligned[pair]
    source, target = stored.sources[line], stored.targets[line]
    st.markdown(f"**Line {line + 1}** · {literal(source)} → {literal(target)}")
    matrix = models.pair_matrix_cached(explored.checkpoint, explored.checkpoint_key, source, target, method)
    show(
        alignment_heatmap(
            matrix, source.split(), target.split(), stored.golds[line], report.links[method][pair], method.label
        ),
        key="align_pair_map",
    )
    st.caption("Squares: sure gold links; circles: possible ones; crosses: the links this method extracted.")


def page(explored: Explored) -> None:
    st.markdown(INTRO)
    run, asked = the_form(explored)
    if run and (files := read_files(asked)) is not None:
        align(explored, asked, files)
    stored = st.session_state.get("alignment_run")
    if stored and stored.checkpoint_key == explored.checkpoint_key and stored.report.scores:
        ranking(stored)
        grids(stored.report)
        one_pair(explored, stored)
    url.write_url()


page(frame.draw(__file__))
