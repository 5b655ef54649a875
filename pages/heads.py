"""Head statistics for the sentence and over a corpus sample, and head ablation."""

import numpy as np
import streamlit as st

from transformer.analysis.alignment import CONVENTIONS, aer_grid
from transformer.analysis.heads.statistics import (
    STATISTICS,
    corpus_statistics,
    head_statistics,
    statistic_ranges,
    statistics_frame,
)
from transformer.analysis.views import attention_view
from transformer.decoding.strategies import DecodeSettings
from transformer.io.export import csv_text
from transformer.model.heads import Head, every_head, head_names, layer_names
from transformer.model.kinds import AttentionKind
from transformer.viz.charts import token_probabilities
from transformer.viz.matrices import matrix_heatmap
from ui.services import models, uploads
from ui.services.explorer import Explored
from ui.state import keys, url
from ui.widgets import controls, frame, head_importance
from ui.widgets.charts import show, table
from ui.widgets.progress import ProgressBar, pace
from ui.widgets.text import literal

INTRO = (
    "What each head does: on the sidebar's sentence, how spread its attention is, how far it looks and how much it "
    "rests on the sentence's end; what the translation loses when heads are switched off; and, over sentences of "
    "your own, which heads the translation depends on."
)


def statistics_view(statistics: dict, key: str, ranges: dict[str, tuple[float, float]], kind: AttentionKind) -> str:
    """A sortable table (click a column), one statistic as a layers x heads heatmap, and the CSV; the statistic
    shown. The sentence's statistic is named in the link (a file's statistics stay with the visitor who sent it)."""
    rows = statistics_frame(statistics)
    left, right = st.columns([3, 2])
    with left:
        table(rows.style.format("{:.3f}"), width="stretch", height=320)
        st.download_button(
            "Table as CSV",
            csv_text(rows),
            file_name=f"head-statistics-{kind}-{key}.csv",
            mime="text/csv",
            on_click="ignore",
            key=f"{key}_csv",
        )
    with right:
        if key == "sentence":
            url.from_link(f"{key}_statistic", "statistic", list(statistics))
        name = st.selectbox("Statistic", list(statistics), key=f"{key}_statistic")
        layers, heads = statistics[name].shape
        figure = matrix_heatmap(
            statistics[name],
            name,
            layer_names(layers),
            head_names(heads),
            value_range=ranges[name],
        )
        show(figure, key=f"{key}_heatmap")
    return name


def sentence_statistics_of(
    explored: Explored, kind: AttentionKind, stored: keys.CorpusStatistics | None
) -> tuple[dict[str, np.ndarray], dict[str, tuple[float, float]]]:
    """Each head's statistics on the sentence (with each head's AER where the Alignment page scored a gold file),
    and each statistic's colour range, shared with the corpus sample's."""
    session, result = st.session_state, explored.result
    view = attention_view(result, kind)
    sentence_statistics = head_statistics(view.maps, view.key_pieces)
    ranges = statistic_ranges(len(view.key_pieces), sentence_statistics, stored.statistics if stored else None)
    aligned = session.get("alignment_run")
    if kind is AttentionKind.CROSS and aligned and aligned.checkpoint_key == explored.checkpoint_key:
        for convention in CONVENTIONS:  # a corpus's figure beside the sentence's: each head's AER on the gold file
            name = f"aligns words (AER, {convention})"
            sentence_statistics[name] = aer_grid(aligned.report, "attention", convention, "argmax")[:, :-1]
            ranges[name] = (0.0, 1.0)
        st.caption(
            literal(
                f"aligns words (AER): each head's alignment error rate on {aligned.name} "
                f"({len(aligned.report.aligned)} pairs, argmax links; lower aligns better), from the Alignment "
                "page's gold file: the corpus's figure, not this sentence's."
            )
        )
    return sentence_statistics, ranges


def corpus_sample(explored: Explored, kind: AttentionKind) -> None:
    """The statistics averaged over a sample of a file the visitor gives, computed on request."""
    session, checkpoint = st.session_state, explored.checkpoint
    st.subheader("Over a corpus sample")
    with st.container(border=True):  # no form: the time to expect follows the slider as it moves
        uploaded = st.file_uploader("Source sentences, one a line (any text file, or gzipped)", key="stats_file")
        sample = st.slider("Sentences to use (from the top of the file)", 10, 500, 100, step=10, key="stats_sample")
        run = st.button("Compute", key="stats_run")
        st.caption(pace("corpus statistics", explored.checkpoint_key, "sentence", sample))
    if run and uploaded is not None:
        try:
            sentences = [s for s in uploads.uploaded_lines(uploaded) if s.strip()][:sample]
        except ValueError as error:
            st.error(literal(f"{uploaded.name}: {error}"))
            sentences = None
        if sentences == []:
            st.warning(literal(f"{uploaded.name} has no sentences: it is empty or only blank lines."))
        elif sentences:
            costs = [len(s) ** 2 for s in sentences]
            timed = ("corpus statistics", explored.checkpoint_key, len(sentences))
            progress = ProgressBar("Decoding", len(sentences), "sentences", costs, stop_key="stats_stop", timed=timed)
            session.stats_over_corpus = keys.CorpusStatistics(
                kind.value,
                explored.checkpoint_key,
                len(sentences),
                corpus_statistics(
                    checkpoint.model,
                    checkpoint.tokenizer,
                    sentences,
                    kind,
                    progress=progress,
                ),
            )
            st.rerun()  # both maps drawn again on one colour range per statistic
    elif run:
        st.warning("Choose a file first.")


def ablation(explored: Explored) -> list[Head]:
    """The output decoded again with the heads the visitor switched off, beside the original; those heads."""
    session, checkpoint = st.session_state, explored.checkpoint
    st.subheader("Head ablation")
    st.markdown("Switch heads off (their output no longer reaches the rest of the model) and decode again, greedily.")
    options = every_head(checkpoint.model.config)
    if url.many_from_link("ablate_heads", "off", options):
        session.ablated = tuple(session.ablate_heads)
    with st.form("ablation"):
        picked = st.multiselect(
            "Heads to switch off",
            options,
            format_func=lambda head: Head(*head).label,
            key="ablate_heads",
        )
        if st.form_submit_button("Decode without them"):  # once, however many heads were picked one by one
            session.ablated = tuple(picked)
    chosen = [head for head in session.get("ablated", ()) if head in options]
    if chosen:
        baseline = models.decode_cached(checkpoint, explored.checkpoint_key, explored.text, DecodeSettings())
        with st.spinner("Decoding without those heads ..."):
            without = models.ablation_cached(checkpoint, explored.checkpoint_key, explored.text, tuple(chosen))
        columns = st.columns(2)
        for column, (name, run_result) in zip(
            columns, (("all heads", baseline), (f"{len(chosen)} head{'s' if len(chosen) != 1 else ''} off", without))
        ):
            with column:
                st.markdown(f"**{name}** · {literal(run_result.text)}")
                show(
                    token_probabilities(
                        run_result.tgt_pieces,
                        run_result.token_probs.numpy(),
                        f"{name}: probability of each token",
                        run_result.forced,
                    ),
                    key=f"ablation_{name}",
                )
        changed = "the same output" if without.tgt_ids == baseline.tgt_ids else "a different output"
        # the tokens the model chose: a forced language code, the same in both, would only pull both means down
        mean = float(without.token_probs[without.forced :].log().mean().exp()) / float(
            baseline.token_probs[baseline.forced :].log().mean().exp()
        )
        st.markdown(
            f"Without them the model gives {changed}; the geometric mean token probability is {mean:.2f}× the original."
        )
    return chosen


def page(explored: Explored) -> None:
    st.markdown(INTRO)
    kind = controls.attention_kind(horizontal=True)
    st.caption(" · ".join(f"**{name}**: {meaning}" for name, meaning in STATISTICS.items()))
    st.subheader("This sentence")
    stored = st.session_state.get("stats_over_corpus")
    stored = (
        stored if stored and (stored.kind, stored.checkpoint_key) == (kind.value, explored.checkpoint_key) else None
    )
    sentence_statistics, ranges = sentence_statistics_of(explored, kind, stored)
    sentence_statistic = statistics_view(sentence_statistics, "sentence", ranges, kind)
    corpus_sample(explored, kind)
    if stored:  # read above, for the colour ranges; a new computation reruns the page
        st.caption(f"Averaged over {stored.sentences} sentences; the colours use the same range as the sentence's.")
        statistics_view(stored.statistics, "corpus", ranges, kind)
    head_importance.section(explored)
    chosen = ablation(explored)
    url.write_url(
        {
            "statistic": "" if sentence_statistic == next(iter(sentence_statistics)) else sentence_statistic,
            "off": url.choices_text(chosen, every_head(explored.checkpoint.model.config)),
        }
    )


page(frame.draw(__file__))
