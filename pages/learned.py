"""How it learned: the model's training run, epoch by epoch, on probe sentences: attention forming as it trained."""

import re

import streamlit as st

from transformer.analysis.timeline import Timeline
from transformer.io.checkpoint import DEFAULT_CHECKPOINT
from transformer.io.timeline_file import TimelineError
from transformer.model.kinds import AttentionKind
from ui.players.epoch_player import EpochView, epoch_player, within_budget
from ui.services import checkpoints, models
from ui.services.explorer import Explored
from ui.state import keys
from ui.state.url import url_text
from ui.widgets import frame
from ui.widgets.text import literal

INTRO = (
    "The same model after each epoch of its training reads one sentence and its reference (teacher forcing: every "
    "epoch's maps have the same rows and columns). Press Play, or step with the buttons or the arrow keys, and watch "
    "attention form, from the blur of the untrained weights to each word finding the word it translates."
)


def shown_timeline(explored: Explored) -> tuple[str, Timeline]:
    """The checkpoint's timeline, or the default model's where it has none (said); stops where there is none."""
    name = explored.checkpoint_name
    try:
        timeline = checkpoints.timeline(name)
        if timeline is None and name != DEFAULT_CHECKPOINT.stem:
            st.info(
                f"{literal(name)} has no timeline (`python -m transformer timeline` makes one from a run's epoch "
                "checkpoints): this is the default model's."
            )
            name = DEFAULT_CHECKPOINT.stem
            timeline = checkpoints.timeline(name)
    except TimelineError as error:
        st.error(f"The timeline of {literal(name)} cannot be read: {literal(str(error))}")
        st.stop()
    if timeline is None:
        st.info(
            "No timeline is shipped with the checkpoints: `python -m transformer timeline` makes one from a training "
            "run's epoch checkpoints (see docs/command-line.md)."
        )
        st.stop()
    return name, timeline


def chosen_probe(timeline: Timeline) -> int:
    """The probe sentence chosen (0-based), from the link on a session's first visit."""
    session, probes, linked = st.session_state, timeline.probes, st.query_params.get("probe", "")
    if "probe" not in session and re.fullmatch(r"[0-9]{1,3}", linked) and 1 <= int(linked) <= len(probes):
        session.probe = int(linked) - 1
    session.probe = min(session.get("probe", 0), len(probes) - 1)
    probe = st.selectbox(
        "Probe sentence",
        range(len(probes)),
        index=session.probe,
        key="widget_probe",
        format_func=lambda i: probes[i].source,
    )
    session.probe = probe
    return probe


def typed_sentence() -> str:
    """The visitor's own sentence, read through the run in place of a probe ("" for none)."""
    session = st.session_state
    if "learned_text" not in session:
        session.learned_text = st.query_params.get("sentence", "")[: keys.MAX_CHARACTERS]
    return st.text_input(
        "Or type a sentence of your own",
        key="learned_text",
        max_chars=keys.MAX_CHARACTERS,
        help="Read at every epoch whose checkpoint is here, on the final model's own translation.",
    ).strip()


def read_through_the_run(name: str, run: Timeline, typed: str) -> Timeline:
    """`typed` read by every epoch's checkpoint found here, as a timeline of its own; stops where it cannot be."""
    try:
        with st.spinner("Reading the sentence with every epoch's checkpoint ..."):
            timeline, _ = models.typed_timeline(name, run, typed)
    except ValueError as error:
        st.error(f"The sentence cannot be read through the run: {literal(str(error))}")
        st.stop()
    read = [s.label for s in timeline.snapshots]
    missing = [s.label for s in run.snapshots if s.label not in read]
    st.caption(
        literal(
            f"Read on {name}'s own translation, “{timeline.probes[0].reference}”, teacher forced at every epoch; with "
            f"the checkpoints here: {', '.join(read)}."
            + (
                f" Not here: {', '.join(missing)} (put the run's epoch checkpoints in checkpoints/ to see them too)."
                if missing
                else ""
            )
        )
    )
    return timeline


def _linked_number(name: str) -> int | None:
    value = st.query_params.get(name, "")
    return int(value) if re.fullmatch(r"[0-9]{1,4}", value) else None


def linked_view(timeline: Timeline) -> EpochView:
    """The snapshot, kind, layer and head the link names (0-based; -1 and "mean" where it names none)."""
    params = st.query_params
    epoch, layer, head = _linked_number("epoch"), _linked_number("layer"), params.get("head", "mean")
    snapshot = next((i for i, s in enumerate(timeline.snapshots) if s.epoch == epoch), -1)
    kinds = [kind.value for kind in AttentionKind]
    return EpochView(
        snapshot,
        params.get("kind") if params.get("kind") in kinds else AttentionKind.CROSS.value,
        layer - 1 if layer else -1,
        head if head in ("mean", "all") else (int(head) - 1 if re.fullmatch(r"[1-9][0-9]{0,2}", head) else "mean"),
    )


def player(timeline: Timeline, probe: int, shown_name: str) -> None:
    """The epoch player, on as much of the run as one page can carry."""
    whole = len(timeline.snapshots)
    timeline, every_head = within_budget(timeline, probe)
    if len(timeline.snapshots) < whole:
        st.caption(
            f"This run is long: the player shows {len(timeline.snapshots)} of its {whole} snapshots, evenly spaced "
            "(what one page can carry to the browser); `python -m transformer timeline --table` lists every one."
        )
    if not every_head:
        st.caption(
            "This model's maps are large: the player shows each layer's mean of the heads, not every head's own map "
            "(what one page can carry to the browser); the table still follows every head."
        )
    presenting = bool(st.session_state.get("presentation"))
    epoch_player(timeline, probe, linked_view(timeline), presenting, shown_name, every_head)
    first = timeline.snapshots[0]
    if first.label == "before training":
        rebuilt = " (rebuilt from the run's seed: the very weights its training started from)" if not first.file else ""
        st.caption(
            f"“Before training” is the run's untrained start{rebuilt}: random weights, and attention spread nearly "
            "evenly over every word."
        )


def page(explored: Explored) -> None:
    name, timeline = shown_timeline(explored)
    st.markdown(INTRO)
    probe_column, typed_column = st.columns(2)  # side by side: the player's map starts on a 768-pixel screen
    with probe_column:
        probe, shown_name = chosen_probe(timeline), name
    with typed_column:
        typed = typed_sentence()
    if typed:
        timeline, probe, shown_name = read_through_the_run(name, timeline, typed), 0, f"{name}\n{typed}"
    player(timeline, probe, shown_name)
    params = st.query_params
    params["ckpt"] = name
    params["probe"] = str(st.session_state.probe + 1)
    if typed:
        params["sentence"] = url_text(typed)
    elif "sentence" in params:
        del params["sentence"]


page(frame.draw(__file__))
