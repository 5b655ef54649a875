"""How it learned: the model's training run, epoch by epoch, on probe sentences: attention forming as it trained."""

import re

import streamlit as st

from transformer.io.checkpoint import DEFAULT_CHECKPOINT
from transformer.io.timeline_file import TimelineError
from transformer.model.kinds import AttentionKind
from ui.players.epoch_player import EpochView, epoch_player, within_budget
from ui.services import checkpoints, models
from ui.state import keys
from ui.state.url import url_text
from ui.widgets.sidebar import page_frame
from ui.widgets.text import literal

explored = page_frame("How it learned")
session, params = st.session_state, st.query_params
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

st.markdown(
    "The same model, saved after each epoch of its training, reads the same sentence and its reference translation "
    "(teacher forcing, so every epoch's maps have the same rows and columns). Step through the epochs, or press "
    "Play, and watch attention form: the blur of the untrained weights, then each word of the translation finding "
    "the word it translates. The arrow keys step too."
)
probes = timeline.probes
linked = params.get("probe", "")
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
if "learned_text" not in session:
    session.learned_text = params.get("sentence", "")[: keys.MAX_CHARACTERS]
typed = st.text_input(
    "Or type a sentence of your own (read at every epoch whose checkpoint is here)",
    key="learned_text",
    max_chars=keys.MAX_CHARACTERS,
).strip()
shown_name = name
if typed:
    try:
        with st.spinner("Reading the sentence with every epoch's checkpoint ..."):
            run, (timeline, files) = timeline, models.typed_timeline(name, timeline, typed)
    except ValueError as error:
        st.error(f"The sentence cannot be read through the run: {literal(str(error))}")
        st.stop()
    probe, shown_name = 0, f"{name}\n{typed}"
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


def _linked_number(name: str) -> int | None:
    value = params.get(name, "")
    return int(value) if re.fullmatch(r"[0-9]{1,4}", value) else None


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
epoch, layer, head = _linked_number("epoch"), _linked_number("layer"), params.get("head", "mean")
snapshot = next((i for i, s in enumerate(timeline.snapshots) if s.epoch == epoch), -1)
view = EpochView(
    snapshot,
    params.get("kind") if params.get("kind") in [kind.value for kind in AttentionKind] else AttentionKind.CROSS.value,
    layer - 1 if layer else -1,
    head if head in ("mean", "all") else (int(head) - 1 if re.fullmatch(r"[1-9][0-9]{0,2}", head) else "mean"),
)
epoch_player(timeline, probe, view, bool(session.get("presentation")), shown_name, every_head)
first = timeline.snapshots[0]
if first.label == "before training":
    rebuilt = " (rebuilt from the run's seed: the very weights its training started from)" if not first.file else ""
    st.caption(
        f"“Before training” is the run's untrained start{rebuilt}: random weights, and attention spread nearly "
        "evenly over every word."
    )
params["ckpt"] = name
params["probe"] = str(session.probe + 1)
if typed:
    params["sentence"] = url_text(typed)
elif "sentence" in params:
    del params["sentence"]
