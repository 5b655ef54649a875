"""Head statistics' "Which heads matter": every head's importance over a visitor's sample (switched off, and by
the gradient of a gate on it), its roles, its syntactic accuracy on gold parses, and the pruning curve, each point
a link that switches its heads off; the work in the heavy-job slot, with a progress bar and Stop."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from contextlib import closing
from dataclasses import dataclass
from urllib.parse import urlencode

import numpy as np
import pandas as pd
import streamlit as st

from transformer.analysis.heads.importance import ImportanceStopped
from transformer.analysis.heads.pruning import LEAST_FIRST, MOST_FIRST, PruningCurve
from transformer.analysis.heads.survey import PHASES, Survey
from transformer.analysis.heads.syntax import READINGS, ParsedSentence, TreebankError, parse_treebank
from transformer.analysis.heads.table import ROLE_MEANINGS, role_labels, role_tags
from transformer.decoding.result import DecodeInputError
from transformer.io.export import csv_text
from transformer.model.config import shown
from transformer.model.heads import Head, every_head
from transformer.model.kinds import AttentionKind
from transformer.viz.charts import lines
from transformer.viz.matrices import matrix_heatmap
from ui.services import models, uploads
from ui.services.explorer import Explored
from ui.services.work import TIMINGS, computing_clock, heavy_job
from ui.state import keys
from ui.state.url import MAX_PAGE_VALUE, choices_text, url_text
from ui.widgets.charts import show, table
from ui.widgets.progress import ProgressBar, pace
from ui.widgets.text import literal

MAX_SENTENCES = 200  # the sample's cap: every head off over 200 sentences is 16,000 greedy decodes for the default
MAX_TREEBANK_SENTENCES = 2000
PHASE_NAMES = {
    "ablation": "Switching each head off",
    "gradient": "The gradient of each head's gate, then its roles",
    "treebank": "Reading the gold parses",
    "pruning": "Pruning",
}
STOPPED = "Stopped: nothing had finished, so nothing was kept. Measure again when you are ready."
STOPPED_KEPT = (
    "Stopped: the parts that had finished are kept below (the table); the part stopped and any after it are not. "
    "Measure again for the rest."
)
STOPPED_PARTIAL = (
    "Stopped while switching each head off: what every head had finished is kept below, each head's change over the "
    "sample's {sentences:,} shortest sentences (a partial run: the gradient, the roles and any part after were not "
    "measured). Measure again for the whole sample."
)
MEASURES = {"gradient": "the gradient of a gate on each head (seconds)", "both": "also each head switched off"}
# What the grids can draw, by the table's column, as a reader names it.
COLUMNS = {
    "ablation_logprob_delta": "log-probability of the references without it (change)",
    "ablation_bleu_delta": "BLEU without it (change)",
    "gradient_importance": "gradient importance (each layer's scores over their norm)",
    "confidence": "confidence (mean largest weight)",
    "positional_share": "positional share (tokens whose largest weight is at its commonest offset)",
    "sink_share": "share on </s>, <s> and punctuation",
    "rare_share": "share of sentences peaking on the rarest piece",
    **{f"syntactic_{reading}": f"syntactic accuracy, {reading.replace('_', ' ')}" for reading in READINGS},
}
SIGNED = ("ablation_logprob_delta", "ablation_bleu_delta")  # a diverging scale around no change


@dataclass(frozen=True)
class Sample:
    name: str
    sources: list[str]
    references: list[str] | None


def section(explored: Explored) -> None:
    """The section: its form, the work on submit, and the last run's figures for this checkpoint."""
    session = st.session_state
    st.subheader("Which heads matter, over a corpus")
    st.markdown(
        "Which heads does the translation depend on, and what does each do? Over a sample of your sentences: each "
        "head switched off alone (the change in BLEU and in the log-probability of the references, Michel et al. "
        "2019) and the gradient of a gate on its output; each head's roles (Voita et al. 2019); with gold parses, "
        "its syntactic accuracy; and the pruning curve: BLEU as heads are switched off together."
    )
    with st.container(border=True):  # no form: the time to expect follows the settings as they change
        sources = st.file_uploader("Source sentences, one a line (any text file, or gzipped)", key="matter_src")
        references = st.file_uploader(
            "Their reference translations, line by line (optional: else the model's own output)", key="matter_ref"
        )
        treebank = st.file_uploader("Gold parses of English sentences, CoNLL-U (optional)", key="matter_treebank")
        left, right = st.columns(2)
        count = left.slider("Sentences (from the top)", 10, MAX_SENTENCES, 50, step=10, key="matter_sample")
        measure = right.radio(
            "Importance by", list(MEASURES), format_func=MEASURES.get, key="matter_measure", horizontal=True
        )
        prune = st.checkbox("Also the pruning curve (10 % of the heads off at a time, up to 60 %)", key="matter_prune")
        run = st.button("Measure the heads", key="matter_run")
        st.caption(pace(work_name(measure, prune), explored.checkpoint_key, "sentence", count))
    if any(session.get(f"matter_stop_{phase}") for phase in PHASES):  # this run is its Stop's: the work ended
        stopped(explored)
    if run:
        sample = uploaded_sample(sources, references, count)
        if sample is not None:
            measured = measure_heads(explored, sample, treebank, measure, prune)
            if measured is not None:
                session.heads_matter = measured
    stored = session.get("heads_matter")
    if stored is not None and stored.checkpoint_key == explored.checkpoint_key:
        show_run(stored, explored)


def work_name(measure: str, prune: bool) -> str:
    """The work as timed on this server: its pace depends on what is measured."""
    return f"head importance ({measure}{', pruning' if prune else ''})"


def uploaded_sample(sources, references, count: int) -> Sample | None:
    """The uploaded sentences as a sample, or None with the reason said."""
    if sources is None:
        st.warning("Choose a file of source sentences first.")
        return None
    try:
        read = max(4 * count, 1000)  # lines of each file: the sentences asked for, blank lines among them
        lines_read = uploads.uploaded_lines(sources, read)
        refs = None if references is None else uploads.uploaded_lines(references, read)
    except ValueError as error:
        st.error(literal(str(error)))
        return None
    if refs is not None and len(refs) != len(lines_read):
        st.error(f"The sources have {len(lines_read):,} lines and the references {len(refs):,}: not a parallel pair.")
        return None
    pairs = [(s, r) for s, r in zip(lines_read, refs or lines_read) if s.strip() and r.strip()][:count]
    if not pairs:
        st.warning(literal(f"{sources.name} has no sentences: it is empty or only blank lines."))
        return None
    return Sample(sources.name, [s for s, _ in pairs], None if refs is None else [r for _, r in pairs])


def parsed_upload(treebank, should_stop: Callable[[], bool]) -> tuple[ParsedSentence, ...]:
    """The uploaded treebank's first MAX_TREEBANK_SENTENCES, parsed as a stream in the heavy job's slot, stopping
    (ImportanceStopped) once the visitor leaves: 2,000 sentences of 512 words are a million lines."""

    def lines_until_stopped(lines: Iterable[str]) -> Iterator[str]:
        for number, line in enumerate(lines):
            if number % STOP_CHECK_LINES == 0 and should_stop():
                raise ImportanceStopped()
            yield line

    try:
        with closing(uploads.uploaded_line_stream(treebank)) as lines:
            parsed = parse_treebank(lines_until_stopped(lines), MAX_TREEBANK_SENTENCES)
    except TreebankError:
        raise
    except ValueError as error:  # the file's lines: not text, a line too long, past the limit decompressed
        raise TreebankError(str(error)) from None
    if not parsed:
        raise TreebankError(f"{shown(treebank.name)} has no sentences")
    return tuple(parsed)


STOP_CHECK_LINES = 2_000


def measure_heads(explored: Explored, sample: Sample, treebank, measure: str, prune: bool) -> keys.HeadsRun | None:
    """Every measure asked for, the treebank's parsing included, in one heavy-job turn with a bar per long part;
    None (and a note) if the visitor stopped it or the treebank was refused. The same sample and settings are
    measured once per server (the shared results cache)."""
    ablation = measure == "both"
    parts = ["ablation"] * ablation + ["gradient"] + ["treebank"] * (treebank is not None) + ["pruning"] * prune
    progress = PhasedProgress(parts, explored.checkpoint_key, len(sample.sources))
    session = st.session_state
    session.pop("heads_matter_kept", None)

    def kept(survey: Survey) -> None:
        finished = survey.ablation.finished if survey.ablation is not None else None
        sentences = len(sample.sources) if finished is None else len(finished)
        session.heads_matter_kept = keys.HeadsRun(explored.checkpoint_key, sample.name, sentences, survey)

    timed = (work_name(measure, prune), explored.checkpoint_key, len(sample.sources))
    try:
        with heavy_job("head measurements") as should_stop:
            parsed = None if treebank is None else parsed_upload(treebank, should_stop)
            survey = models.heads_survey_cached(
                explored.checkpoint,
                explored.checkpoint_key,
                tuple(sample.sources),
                None if sample.references is None else tuple(sample.references),
                ablation,
                parsed,
                ("ablation" if ablation else "gradient") if prune else None,
                _progress=progress,
                _should_stop=should_stop,
                _computed=lambda seconds: TIMINGS.record(*timed, seconds),
                _kept=kept,
            )
            progress.finish()
            session.pop("heads_matter_kept", None)  # the whole run finished: nothing partial to keep
    except ImportanceStopped:
        stopped(explored)
        return None
    except TreebankError as error:
        st.error(literal(f"The gold parses cannot be read: {error}"))
        return None
    except DecodeInputError as error:  # a sentence the model cannot take, or whose translation is empty
        st.error(literal(f"The heads cannot be measured over {sample.name}: {error}"))
        return None
    finally:
        progress.close()
    return keys.HeadsRun(explored.checkpoint_key, sample.name, len(sample.sources), survey)


class PhasedProgress:
    """A survey's progress: a bar for each part in turn (switching heads off, the gradient and roles, reading gold
    parses, pruning), each with its Stop button. Each part's pace is recorded here per sentence of the sample, so
    that a part's bar says, beside its own time left, the whole run's: its own and the parts to come at the paces
    they were measured at (a part that ended showed a full, frozen bar for 54 s, then the next's "about 1 s left")."""

    def __init__(self, parts: list[str], checkpoint_key: str, sentences: int) -> None:
        self.parts, self.checkpoint_key, self.sentences = parts, checkpoint_key, sentences
        self.phase: str | None = None
        self.bar: ProgressBar | None = None

    def timing(self, phase: str) -> tuple[str, str, float]:
        return f"heads part: {phase}", self.checkpoint_key, self.sentences

    def after(self, phase: str) -> float | None:
        """Seconds the parts after `phase` should take at their measured paces; None for the last part, or if one
        to come was never timed."""
        expected = [TIMINGS.expected(*self.timing(part)) for part in self.parts[self.parts.index(phase) + 1 :]]
        return None if not expected or None in expected else sum(expected)  # type: ignore[arg-type]

    def __call__(self, phase: str, done: int, total: int, share: float | None = None) -> None:
        if phase != self.phase:
            self.finish()
            self.phase = phase
            self.bar = ProgressBar(
                PHASE_NAMES[phase],
                total,
                PHASES[phase],
                stop_key=f"matter_stop_{phase}",
                after=self.after(phase) if phase in self.parts else None,
                expected=TIMINGS.expected(*self.timing(phase)) if phase in self.parts else None,
            )
        self.bar(done, total, share)

    def finish(self) -> None:
        """The part under way ended: its pace recorded, its bar gone."""
        if self.bar is not None and self.phase is not None:
            TIMINGS.record(*self.timing(self.phase), computing_clock() - self.bar.started)
        self.close()

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None


def stopped(explored: Explored) -> None:
    """What a stopped run says; what finished before its Stop (the table, when the treebank's part or pruning was
    stopped) becomes the run shown."""
    session = st.session_state
    kept = session.pop("heads_matter_kept", None)
    if kept is None or kept.checkpoint_key != explored.checkpoint_key:
        st.info(STOPPED)
        return
    session.heads_matter = kept
    finished = kept.survey.ablation.finished if kept.survey.ablation is not None else None
    st.info(STOPPED_KEPT if finished is None else STOPPED_PARTIAL.format(sentences=len(finished)))


def show_run(run: keys.HeadsRun, explored: Explored) -> None:
    """The grids of one column per kind, the table with each head's roles, its CSV, and the pruning curve."""
    survey = run.survey
    frame = survey.table.assign(roles=survey.table.apply(role_labels, axis=1))
    against = "the references" if survey.given_references else "the model's own output"
    st.caption(
        literal(
            f"{run.name}: {run.sentences} sentences, measured against {against}; the intact model's greedy BLEU "
            f"{survey.bleu:.2f}."
        )
    )
    shown = st.selectbox(
        "Drawn on the grids", [c for c in COLUMNS if c in frame], format_func=COLUMNS.get, key="matter_shown"
    )
    columns = st.columns(3)
    for column, kind in zip(columns, AttentionKind):
        rows = frame[frame.kind == kind.value]
        with column:
            if rows[shown].isna().all():
                st.caption(f"{kind.value}: not read for this kind.")
                continue
            show(kind_grid(rows, shown, kind), key=f"matter_grid_{kind.value}")
    if {"ablation_logprob_delta", "gradient_importance"} <= set(frame):
        agreement = (-frame.ablation_logprob_delta).corr(frame.gradient_importance, method="spearman")
        st.caption(f"The two measures rank the heads with a Spearman correlation of {agreement:.2f}.")
    st.caption(" · ".join(f"**{role}**: {meaning}" for role, meaning in ROLE_MEANINGS.items()))
    table(frame.style.format(precision=3), width="stretch", height=360)
    st.download_button(
        "Table as CSV", csv_text(frame, index=False), "heads.csv", "text/csv", on_click="ignore", key="matter_csv"
    )
    if survey.curves:
        show_pruning(survey.curves, len(frame), explored)


def kind_grid(rows: pd.DataFrame, column: str, kind: AttentionKind):
    """One kind's layers × heads of a column, each cell labelled with the head's roles in short."""
    grid = rows.pivot(index="layer", columns="head", values=column)
    tags = rows.assign(tag=rows.apply(role_tags, axis=1)).pivot(index="layer", columns="head", values="tag")
    values = grid.to_numpy(dtype=float)
    finite = values[np.isfinite(values)]
    value_range = None if column in SIGNED else (0.0, max(1.0, float(finite.max()) if finite.size else 1.0))
    return matrix_heatmap(
        values,
        kind.value,
        [f"layer {layer}" for layer in grid.index],
        [f"head {head}" for head in grid.columns],
        value_range=value_range,
        cell_text=tags.to_numpy(dtype=object),
    )


def show_pruning(curves: list[PruningCurve], total: int, explored: Explored) -> None:
    """The curve, and each point of the ordered curves as a link that opens this page with its heads off."""
    series = {c.order: ([100 * n / total for n in c.counts], list(c.bleu)) for c in curves}
    show(lines(series, "BLEU as heads are switched off together", "% of heads off", "BLEU"), key="matter_pruning")
    choices = every_head(explored.checkpoint.model.config)
    for curve in (c for c in curves if c.order in (LEAST_FIRST, MOST_FIRST)):
        points = [
            (n, bleu, point_link(explored, heads, choices))
            for n, bleu, heads in zip(curve.counts[1:], curve.bleu[1:], curve.heads_off[1:])
        ]
        links = [f"[{100 * n / total:.0f} %: {bleu:.1f}]({link})" for n, bleu, link in points if link]
        if len(links) < len(points):
            st.caption(f"{len(points) - len(links)} points name more heads than a link can carry: not linked.")
        st.markdown(f"{curve.order.capitalize()}, each point with its heads off: " + " · ".join(links))


def point_link(explored: Explored, heads: frozenset[Head], choices: list[Head]) -> str | None:
    """This page with the sentence on screen and `heads` switched off (Head ablation reads `off`), named among the
    model's heads (`choices`); None where the link could not name them all."""
    named = choices_text(sorted(heads), choices)
    if len(named) > MAX_PAGE_VALUE:
        return None
    return "heads?" + urlencode({"ckpt": explored.checkpoint_name, "text": url_text(explored.text), "off": named})
