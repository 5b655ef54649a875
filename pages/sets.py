"""Pair sets: the Cause page's question asked of a set of pairs (docs/pair-sets.md): the set's contrastive accuracy,
where the difference is carried on average, and which heads the model needs, with each pair a link to the Cause
page."""

from urllib.parse import urlencode

import numpy as np
import pandas as pd
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from transformer.analysis.interventions.attribution_patching import agreement
from transformer.analysis.interventions.contrastive import PairPatching, accuracy, by_phenomenon
from transformer.analysis.interventions.pair_sets import (
    BUILT_IN_SETS,
    Pair,
    PairSet,
    PairSetError,
    pair_set_from,
    read_pair_set,
)
from transformer.analysis.interventions.set_ablation import HeadAblation, ablation_over_set
from transformer.analysis.interventions.set_effects import Effect, effects_by_role, roles_of
from transformer.analysis.interventions.summary import set_in_words
from transformer.io.export import csv_text
from transformer.model.heads import Head, every_head
from transformer.model.kinds import AttentionKind
from transformer.viz.patching import set_grids
from ui.services.explorer import Explored
from ui.services.pair_sets import MAX_PAGE_PAIRS, PairRun, SetSettings, SetStopped, kept, run_key, run_set
from ui.services.work import heavy_job
from ui.state import url
from ui.state.url import url_text
from ui.widgets import controls, frame
from ui.widgets.charts import show, table
from ui.widgets.progress import ProgressBar, pace, stop_button
from ui.widgets.text import literal

INTRO = (
    "One pair is an anecdote; a phenomenon is a set of them. Choose a **pair set** (built in, or your own: one JSON "
    "object a line, as in docs/pair-sets.md), and each pair is run as the Cause page runs one: its **contrastive "
    "accuracy** (a pair is correct when the clean sentence prefers the target and the corrupted one the foil), every "
    "site patched and averaged over the pairs by the word's role, and, where asked, each head switched off alone "
    "against the accuracy. Each pair opens on the Cause page."
)
BUILT_IN = sorted(path.stem for path in BUILT_IN_SETS.glob("*.jsonl"))
METHODS = {
    "exact": "Exact patching: a pass a site",
    "attribution": "Attribution patching: an estimate, one backward pass a pair",
    "both": "Both, and how far they agree",
}
BUILT, OWN = "A built-in set", "My own set"  # where the pairs come from (a link names an upload's as set=own)
PRESENTED_ROWS = 10  # a table's rows in presentation mode
HEAD_FAMILIES = {  # the heads' families of a set's effects, by the kind of head
    "encoder_heads_differing": AttentionKind.ENCODER,
    "cross_heads": AttentionKind.CROSS,
    "self_heads": AttentionKind.DECODER,
}


def from_the_link() -> None:
    """The form's fields from a link (a built-in set, how many of its pairs, the method, the direction), on the
    session's first visit to the page; the count is checked against the set when the form draws."""
    session, linked = st.session_state, st.session_state.get("url_page", {})
    if session.get("sets_link_read"):  # a widget's key goes when it is not drawn (another source chosen)
        return
    session.sets_link_read = True
    session.sets_source = OWN if linked.get("set") == "own" else BUILT
    session.sets_builtin = linked["set"] if linked.get("set") in BUILT_IN else BUILT_IN[0]
    session.sets_method = linked["method"] if linked.get("method") in METHODS else "exact"
    session.sets_noising = linked.get("noising") == "1"
    session.sets_ablation = linked.get("ablation") != "0"
    if linked.get("pairs", "").isdigit():
        session.sets_linked_pairs = int(linked["pairs"][:7])


def chosen_set() -> PairSet | None:
    """A built-in set or an upload, read line by line (each refused line said); None, said, where there is none."""
    from_the_link()
    uploaded = None
    if st.radio("Pairs", [BUILT, OWN], horizontal=True, key="sets_source") == BUILT:
        read = read_pair_set(BUILT_IN_SETS / f"{st.selectbox('Set', BUILT_IN, key='sets_builtin')}.jsonl")
    else:
        uploaded = st.file_uploader("A pair set: one JSON object a line (docs/pair-sets.md)", key="sets_file")
        if uploaded is None:
            st.info("Upload a pair set, or choose a built-in one.")
            return None
        try:
            read = pair_set_from(uploaded.getvalue(), uploaded.name)
        except PairSetError as error:
            st.error(literal(f"Cannot read the set: {error}"))
            return None
    for number, why in read.refused[:5]:
        st.warning(literal(f"Line {number}: {why}: left out."))
    if len(read.refused) > 5:
        st.warning(f"{len(read.refused) - 5:,} more lines were refused and left out.")
    if not read.pairs:
        st.error("The set holds no pair that can be read.")
        return None
    return read


def the_form(explored: Explored, count: int) -> tuple[SetSettings, int, DeltaGenerator]:
    """How the set is run and how many of its pairs (the first ones); and the line saying what to expect of the run,
    for the page to clear once its results are shown."""
    left, right = st.columns(2)
    method = left.radio("Method", list(METHODS), format_func=METHODS.get, key="sets_method")
    words = controls.words_toggle(right)
    noising = right.toggle("Noising", key="sets_noising", help="As on the Cause page: which sites are needed")
    ablation = right.toggle(
        "Switch each head off",
        key="sets_ablation",
        help="Each head switched off alone in both runs of each pair, and the set's accuracy without it",
    )
    most = min(count, MAX_PAGE_PAIRS)
    session = st.session_state
    linked = session.pop("sets_linked_pairs", None)
    if linked is not None and 1 <= linked <= most:
        session.sets_pairs = linked
    session.sets_pairs = min(session.get("sets_pairs", most), most)  # every pair of a first set; of another, as many
    pairs = st.number_input(
        f"Pairs to run (the first; of {count:,})",
        1,
        most,
        key="sets_pairs",
        help=f"At most {MAX_PAGE_PAIRS:,} here; `python -m transformer patch-set` runs any set",
    )
    work = f"pair set, {method}" + ", ablation" * ablation
    expectation = st.empty()
    expectation.caption(pace(work, explored.checkpoint_key, "pair", int(pairs)))
    return SetSettings(method, noising, words, ablation), int(pairs), expectation


def ran(explored: Explored, pairs: list[Pair], settings: SetSettings) -> list[PairRun]:
    """The pairs run so far: all of them once Run is pressed (with the bar, the time left and Stop, which keeps
    what finished), or those an earlier run (this visitor's, or another's) left."""
    session, key = st.session_state, run_key(explored.checkpoint_key, pairs, settings)
    done, button = kept(key), st.empty()  # the button gone once every pair is done
    if len(done) < len(pairs) and button.button("Run the rest" if done else "Run", type="primary", key="sets_run"):
        session.sets_asked = key
    if session.get("sets_asked") == key and len(done) < len(pairs):
        stop = st.empty()
        if stop_button("sets_stop", stop):  # pressed: this rerun ended the work at its last update
            session.pop("sets_asked")
            st.rerun()
        work, left = f"pair set, {settings.method}" + ", ablation" * settings.ablation, len(pairs) - len(done)
        what = "Running the set" if not done else f"Running the {left:,} pairs left"
        progress = ProgressBar(what, left, "pairs", timed=(work, explored.checkpoint_key, left))
        try:
            with heavy_job("a pair set") as should_stop:
                run_set(explored.checkpoint, key, pairs, settings, progress, should_stop)
        except SetStopped:
            session.pop("sets_asked", None)
        finally:
            progress.close()
            stop.empty()
    finished = [done[pair.id] for pair in pairs if pair.id in done]
    if len(finished) == len(pairs):
        button.empty()
    if 0 < len(finished) < len(pairs):
        st.info(f"{len(finished):,} of {len(pairs):,} pairs done and kept: the results below are theirs.")
    return finished


def heads_table(by_family: dict[str, Effect], ablations: list[HeadAblation] | None) -> pd.DataFrame:
    """A row a head: its mean share (the encoder's at the differing word), the interval, in how many pairs it is
    among the five strongest sites, and with its ablation the accuracy without it; the strongest first."""
    off = {a.head: a for a in ablations or []}
    rows = []
    for family, kind in HEAD_FAMILIES.items():
        effect = by_family[family]
        for layer, index in np.ndindex(effect.mean.shape):
            head = Head(kind, layer, index)
            row = {"head": str(head), "mean share": effect.mean[layer, index], "low": effect.low[layer, index]}
            row |= {"high": effect.high[layer, index], "among five strongest in": int(effect.top[layer, index])}
            if head in off:
                row |= {"accuracy without it": off[head].accuracy.share, "change": off[head].change}
                row |= {"pairs made wrong": off[head].broken, "made right": off[head].mended}
            rows.append(row)
    table = pd.DataFrame(rows)
    return table.iloc[np.argsort(-np.abs(np.nan_to_num(table["mean share"].to_numpy())), kind="stable")]


def pair_link(explored: Explored, pair: Pair, settings: SetSettings) -> str:
    """The Cause page on this pair: its clean sentence in the sidebar, its corrupted one, target and foil."""
    query = {"ckpt": explored.checkpoint_name, "text": url_text(pair.clean), "corrupt": pair.corrupt}
    query |= {"target": pair.target} | ({"against": pair.foil} if pair.foil else {})
    query |= {name: "1" for name in ("noising", "words") if getattr(settings, name)}
    return "cause?" + urlencode(query)


def pairs_table(explored: Explored, runs: list[PairRun], settings: SetSettings) -> pd.DataFrame:
    """A row a pair: its outcome, with both methods their agreement, and the link that opens it on the Cause page."""
    rows = []
    for run in runs:
        o, patched = run.patched.outcome, run.patched
        row = {
            "id": o.id,
            "phenomenon": o.phenomenon,
            "status": o.status,
            "step": None if o.step is None else o.step + 1,
        }
        row |= {"metric clean": o.metric_clean, "metric corrupted": o.metric_corrupt, "correct": o.correct}
        if settings.method == "both" and patched.patching is not None:
            row["ρ"], row["ten strongest shared"] = agreement(patched.estimate, patched.patching)
        rows.append(row | {"why": o.why, "Cause": pair_link(explored, patched.pair, settings)})
    return pd.DataFrame(rows)


def columns_by_role(patched: PairPatching, words: bool) -> dict[str, list[int]]:
    """A read pair's source columns by the word's role (set_effects.roles_of)."""
    contrast = patched.contrast
    return roles_of(patched.clean.src_pieces, contrast.clean_src, contrast.corrupt_src, patched.pair.roles, words)


def results(explored: Explored, runs: list[PairRun], settings: SetSettings) -> None:
    """The accuracy, said in words; by phenomenon; the grids of mean shares; the heads' and the pairs' tables."""
    outcomes = [run.patched.outcome for run in runs]
    found = accuracy(outcomes)
    written = [run for run in runs if run.patched.shares is not None]
    names, by_family = [], None
    if written:
        shares = [run.patched.patching if settings.method != "attribution" else run.patched.estimate for run in written]
        names, by_family = effects_by_role(shares, [columns_by_role(run.patched, settings.words) for run in written])
    ablations = None
    if settings.ablation and written:
        with_each_off = {run.patched.outcome.id: run.ablation for run in written}
        ablations = ablation_over_set(outcomes, with_each_off, every_head(explored.checkpoint.config))
    estimate = settings.method == "attribution"
    left_out = found.pairs - found.written
    st.markdown(literal(set_in_words(found, left_out, by_family, names, ablations, estimate)))
    phenomena = by_phenomenon(outcomes)
    if len(phenomena) > 1:
        table(pd.DataFrame([{"phenomenon": n or "(none)"} | vars(a) for n, a in phenomena.items()]), hide_index=True)
    if by_family is not None:
        if estimate:
            st.caption("Attribution patching's estimate of each share, not exact patching's.")
        for number, figure in enumerate(set_grids(by_family, names)):
            show(figure, key=f"sets_grid_{number}")
    tables(explored, runs, settings, None if by_family is None else heads_table(by_family, ablations))


def tables(explored: Explored, runs: list[PairRun], settings: SetSettings, heads: pd.DataFrame | None) -> None:
    """The heads' and the pairs' tables with their CSV; in presentation mode the first rows as plain tables (a
    room reads them), each pair's link beside."""
    presenting, shown = bool(st.session_state.get("presentation")), PRESENTED_ROWS
    pairs = pairs_table(explored, runs, settings)
    if heads is not None:
        if presenting and len(heads) > shown:
            st.caption(f"The {shown} heads of the largest mean share; the CSV holds every head.")
        table(heads.head(shown).round(3).set_index("head") if presenting else heads, hide_index=True, key="sets_heads")
        download(heads, "Heads as CSV", "pair-set-heads.csv")
    if presenting:
        table(pairs.drop(columns=["Cause", "why"]).head(shown).round(3).set_index("id"))
        links = [f"[{literal(row.id)}]({row.Cause})" for row in pairs.head(shown).itertuples()]
        st.markdown("Open on the Cause page: " + " · ".join(links))
    else:
        link = st.column_config.LinkColumn("Cause", display_text="open on Cause")
        table(pairs, hide_index=True, column_config={"Cause": link}, key="sets_pairs_table")
    download(pairs, "Pairs as CSV", "pair-set-pairs.csv")


def download(table: pd.DataFrame, label: str, name: str) -> None:
    st.download_button(label, csv_text(table, index=False), file_name=name, mime="text/csv", on_click="ignore")


def page(explored: Explored) -> None:
    st.markdown(INTRO)
    read = chosen_set()
    if read is not None:
        settings, count, expectation = the_form(explored, len(read.pairs))
        runs = ran(explored, read.pairs[:count], settings)
        if len(runs) == count:
            expectation.empty()  # said before the run; above its results it read as if they were still to come
        if runs:
            results(explored, runs, settings)
    write_link()


def write_link() -> None:
    """The page's link: the built-in set (or "own"), the count, the method and the direction and ablation where
    they are not the defaults (the form's values, where it is drawn)."""
    session = st.session_state
    linked = {"set": session.sets_builtin if session.sets_source == BUILT else "own"}
    linked |= {"method": session.get("sets_method", "exact")}
    linked |= {"pairs": str(session.sets_pairs)} if session.get("sets_pairs") else {}
    linked |= {"noising": "1"} if session.get("sets_noising") else {}
    linked |= {} if session.get("sets_ablation", True) else {"ablation": "0"}
    url.write_url(linked)


page(frame.draw(__file__))
