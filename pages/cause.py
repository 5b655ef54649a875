"""Cause: where the model decides between two words, by activation patching the sidebar's sentence against a
corrupted one (the grids of every site, a sentence saying what they show, the numbers as CSV)."""

from dataclasses import dataclass

import numpy as np
import pandas as pd
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from transformer.analysis.interventions.budget import PatchingTooLarge, check_patching
from transformer.analysis.interventions.patching import CLEAN_EXAMPLE as CLEAN
from transformer.analysis.interventions.patching import CORRUPT_EXAMPLE as CORRUPT
from transformer.analysis.interventions.patching import (
    SITES_PER_BATCH,
    Contrast,
    check_piece_counts,
    each_position,
    foil_id,
    target_step,
)
from transformer.analysis.interventions.sites import (
    Patching,
    PatchingStopped,
    pass_costs,
    stream_sites_expected,
)
from transformer.analysis.interventions.summary import in_words
from transformer.analysis.words import word_labels, word_spans
from transformer.decoding.result import DecodeInputError, source_ids
from transformer.io.export import csv_text
from transformer.model.heads import layer_name
from transformer.text.pieces import readable
from transformer.viz.patching import FAMILIES, patching_grids
from transformer.viz.report import patching_report
from ui.services import models
from ui.services.explorer import Explored
from ui.services.work import heavy_job
from ui.state import keys, url
from ui.widgets import controls, frame
from ui.widgets.charts import show
from ui.widgets.progress import ProgressBar, pace, stop_button
from ui.widgets.text import literal

INTRO = (
    "Where does the model decide? Give a **corrupted** sentence that differs from the sidebar's in a word (the same "
    "number of pieces), and an output token to read: the **target** the sidebar's translation writes, against a "
    "**foil** (the token the corrupted sentence makes it write). Both sentences are run on the sidebar's translation; "
    "then each site, one at a time, is given the other run's activation (*activation patching*, Vig et al. 2020; Meng "
    "et al. 2022). A site's share is how much of the difference between the two runs patching it alone moves: 100 % "
    "where that site carries all of it. Red restores the clean run's output, blue works against it."
)


Spans = tuple[tuple[int, int], ...] | None  # the positions patched together, by word; None: each piece alone


@dataclass(frozen=True)
class Asked:
    corrupt: str
    target: str
    foil: str  # "" for none: the target's log-probability is read
    noising: bool
    words: bool  # each word's pieces patched together


def from_the_link() -> None:
    """The form's fields from a link, on the session's first visit to the page."""
    session, linked = st.session_state, st.session_state.get("url_page", {})
    if "cause_corrupt" not in session:
        session.cause_corrupt = linked.get("corrupt", "")[: keys.MAX_CHARACTERS]
        session.cause_target = linked.get("target", "")[:100]
        session.cause_foil = linked.get("against", "")[:100]
        session.cause_noising = linked.get("noising") == "1"


def take_the_example() -> None:
    session = st.session_state
    session.text = session.applied_text = CLEAN
    session.cause_corrupt, session.cause_target, session.cause_foil = CORRUPT, "il", "elle"


def the_form(explored: Explored) -> tuple[Asked | None, DeltaGenerator]:
    """The corrupted sentence, the target and foil, and the direction (None until the sentence and target are
    given); and the line saying what to expect of the run, for the page to clear once its results are shown."""
    from_the_link()
    st.button(f"Try the example: “{CLEAN}” against “…too wide.”, il against elle", on_click=take_the_example)
    corrupt = st.text_input("Corrupted sentence", key="cause_corrupt", max_chars=keys.MAX_CHARACTERS)
    left, middle, right = st.columns(3)
    target = left.text_input(
        "Target token", key="cause_target", max_chars=100, help="A token of the sidebar's translation, as it writes it"
    )
    foil = middle.text_input("Foil (optional)", key="cause_foil", max_chars=100)
    words = controls.words_toggle(right)
    noising = right.toggle(
        "Noising",
        key="cause_noising",
        help="Off (denoising): the corrupted run is given the clean run's activation at each site, which asks which "
        "sites suffice to restore the clean output. On (noising): the clean run is given the corrupted run's, which "
        "asks which are needed.",
    )
    expectation = st.empty()
    passes = len(pass_weights(explored, columns(explored, words)[0], corrupt_ids(explored, corrupt)))
    expectation.caption(pace("activation patching", explored.checkpoint_key, "forward pass", passes))
    if not corrupt.strip() or not target.strip():
        st.info("Give a corrupted sentence and a target token, or try the example.")
        return None, expectation
    return Asked(corrupt.strip(), target.strip(), foil.strip(), noising, words), expectation


def contrast_of(explored: Explored, asked: Asked) -> Contrast | None:
    """The two runs and the token read, from the sidebar's translation; None with the reason in one line."""
    result, tokenizer = explored.result, explored.checkpoint.tokenizer
    try:
        step = target_step(result.tgt_pieces, asked.target)
        foil = foil_id(tokenizer, result.tgt_pieces[step], asked.foil) if asked.foil else None
        corrupt = source_ids(tokenizer, asked.corrupt, explored.checkpoint.config.max_len)[0]
        check_piece_counts(tokenizer, explored.text, asked.corrupt, len(result.src_ids), len(corrupt))
        return Contrast(result.src_ids, corrupt, result.tgt_ids, step, result.tgt_ids[step], foil)
    except (ValueError, DecodeInputError) as error:
        st.error(literal(f"Cannot patch: {error}"))
        return None


def patched(explored: Explored, contrast: Contrast, noising: bool, spans: Spans) -> Patching | None:
    """Every site patched (by word where `spans` are given), in a heavy-job slot with its bar and Stop; None (said)
    once stopped."""
    session, asked = st.session_state, (explored.checkpoint_key, contrast, noising, spans)
    if session.get("cause_stopped") == asked:
        if st.button("Patch again", key="cause_resume", type="primary"):
            session.pop("cause_stopped")
            st.rerun()
        st.info("Stopped: nothing was patched for these sentences.")
        return None
    stop = st.empty()  # Stop while patching, gone after
    if stop_button("cause_stop", stop):  # pressed: this rerun ended the work at its last update
        session.cause_stopped = asked
        st.rerun()
    costs = pass_weights(explored, spans, contrast.corrupt_src, contrast.step)
    timed = ("activation patching", explored.checkpoint_key, len(costs))
    progress = ProgressBar("Patching every site", len(costs), "forward passes", costs, timed=timed)
    try:
        with heavy_job("activation patching") as should_stop:
            found = models.patching_cached(
                explored.checkpoint,
                explored.checkpoint_key,
                tuple(contrast.clean_src),
                tuple(contrast.corrupt_src),
                tuple(contrast.output),
                contrast.step,
                contrast.target,
                contrast.foil,
                noising,
                spans,
                _progress=progress,
                _should_stop=should_stop,
            )
    except PatchingStopped:
        return None
    finally:
        progress.close()
        stop.empty()
    return found


def within_budget(explored: Explored, spans: Spans) -> bool:
    """Whether patching every site of the sidebar's sentence is within the server's passes and memory; if not, said
    in one line, before any run (an upload of 60 encoder layers made 3,200 passes of a 200-word pair)."""
    result = explored.result
    try:
        check_patching(
            explored.checkpoint.model,
            len(result.src_ids),
            len(result.tgt_ids),
            len(spans or result.src_ids),
            SITES_PER_BATCH,
            models.DECODE_LIMIT_BYTES,
            models.PATCH_MAX_PASSES,
        )
    except PatchingTooLarge as error:
        st.error(literal(f"Cannot patch: {error}."))
        return False
    return True


def columns(explored: Explored, words: bool) -> tuple[Spans, list[str]]:
    """The source's sites: each piece, or each word (its pieces patched together), and their labels (pieces)."""
    pieces = explored.result.src_pieces
    if not words:
        return None, pieces
    spans = word_spans(pieces)
    return tuple(spans), word_labels(pieces, spans)


def pass_weights(explored: Explored, spans: Spans, corrupt: list[int] | None = None, step: int = 0) -> list[float]:
    """Each forward pass patching every site over the source's spans (each piece where None) makes, weighed by its
    work at the output's `step` (sites.pass_costs, what the bar's time left weighs): their number is what the page
    says to expect and what its bar and pace count. With the corrupted source's ids (of as many pieces), the passes
    the run makes (the stream's sites where the two runs differ, sites.stream_sites_expected); without, the most."""
    model, clean = explored.checkpoint.model, explored.result.src_ids
    sites = list(spans or each_position(len(clean)))
    differing = (
        None if corrupt is None or len(corrupt) != len(clean) else stream_sites_expected(model, clean, corrupt, sites)
    )
    return pass_costs(model, len(sites), SITES_PER_BATCH, len(clean), step, differing)


def corrupt_ids(explored: Explored, corrupt: str) -> list[int] | None:
    """The corrupted sentence's source ids, or None where there is none yet or it cannot be read (said later)."""
    if not corrupt.strip():
        return None
    try:
        return source_ids(explored.checkpoint.tokenizer, corrupt.strip(), explored.checkpoint.config.max_len)[0]
    except DecodeInputError:
        return None


def measured(asked: Asked) -> str:
    return f"logit({asked.target}) − logit({asked.foil})" if asked.foil else f"log p({asked.target})"


def grids(explored: Explored, found: Patching, pieces: list[str]) -> None:
    """Each family's grid over the source words or the heads, on one scale centred on 0 (±1 at least: all of the
    difference); the encoder's heads one layer at a time."""
    drawn = patching_grids(found, pieces)
    show(drawn.encoder_stream, key="cause_stream")
    layers = list(range(explored.checkpoint.config.n_encoder_layers))
    url.from_link("cause_layer", "encoder_layer", layers, name=lambda layer: str(layer + 1))
    layer = st.selectbox("Encoder heads of", layers, format_func=layer_name, key="cause_layer")
    show(drawn.encoder_heads[layer], key="cause_encoder_heads")
    left, right = st.columns(2)
    with left:
        show(drawn.cross_heads, key="cause_cross")
    with right:
        show(drawn.decoder_self_heads, key="cause_self")
    show(drawn.decoder_stream, key="cause_dec")


def every_site(found: Patching, pieces: list[str]) -> pd.DataFrame:
    """One row per site: its family, layer, head and source position where it has them, the word, and its share."""
    pieces = [readable(piece) for piece in pieces]
    rows = []
    for family, axes in FAMILIES.items():
        values = getattr(found, family)
        for at in np.ndindex(values.shape):
            site = dict(zip(axes, at))
            word = pieces[site["position"]] if "position" in site else ""
            rows.append({"site": family, **site, "word": word, "share": float(values[at])})
    return pd.DataFrame(rows, columns=["site", "layer", "head", "position", "word", "share"])


def exports(
    explored: Explored, asked: Asked, contrast: Contrast, found: Patching, labels: list[str], said: str
) -> None:
    """Every site as CSV, and the run as one offline HTML file (every grid, the encoder's heads of every layer)."""
    csv_column, report_column = st.columns(2)
    csv_column.download_button(
        "Every site as CSV",
        csv_text(every_site(found, labels)),
        file_name="patching.csv",
        mime="text/csv",
        on_click="ignore",
        key="cause_csv",
    )
    step = contrast.step + 1
    lines = {
        "Clean sentence": explored.text,
        "Corrupted sentence": asked.corrupt,
        "Translation": explored.result.text,
        "Read": f"{measured(asked)} at step {step}, {'noising' if asked.noising else 'denoising'}",
    }
    report_column.download_button(
        "HTML report (offline)",
        lambda: patching_report(found, [readable(label) for label in labels], explored.checkpoint_name, lines, said),
        file_name="patching-report.html",
        mime="text/html",
        on_click="ignore",
        key="cause_report",
    )


def page(explored: Explored) -> None:
    st.markdown(INTRO)
    asked, expectation = the_form(explored)
    spans, labels = columns(explored, asked is not None and asked.words)
    fits = within_budget(explored, spans)  # said before anything is asked: the sidebar's sentence decides it
    contrast = None if asked is None or not fits else contrast_of(explored, asked)
    found = None if contrast is None else patched(explored, contrast, asked.noising, spans)
    if found is not None:
        expectation.empty()  # said before the run; above its results it read as if they were still to come
        said = in_words(found, labels, measured(asked))
        st.markdown(literal(said))
        grids(explored, found, labels)
        exports(explored, asked, contrast, found, labels, said)
    session = st.session_state
    fields = {"corrupt": session.cause_corrupt, "target": session.cause_target, "against": session.cause_foil}
    linked = {name: url.url_text(value.strip()) for name, value in fields.items() if value.strip()}
    if session.cause_noising:
        linked["noising"] = "1"
    if found is not None:
        linked["encoder_layer"] = str(session.cause_layer + 1)
    url.write_url(linked)


page(frame.draw(__file__))
