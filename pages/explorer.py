"""The decode explorer: step through the output token by token, branch with "what if", teacher-force a target."""

import streamlit as st

from transformer.analysis.views import attention_view
from transformer.analysis.words import over_words
from transformer.decoding.forcing import branch
from transformer.decoding.result import DecodeInputError, DecodeResult
from transformer.text.pieces import readable
from transformer.viz.attention import attention_heatmap, step_attention
from transformer.viz.charts import probability_bars, token_probabilities
from ui import keys, models, url
from ui.charts import show
from ui.controls import step as step_slider
from ui.controls import words_toggle
from ui.sidebar import Explored, page_frame
from ui.text import literal

PLAY_SECONDS = 0.8  # between steps when playing

explored = page_frame()
session = st.session_state
st.title("Decode explorer")
for note in explored.notes:
    st.warning(literal(note))
st.markdown(f"**Source** · {literal(explored.text)}")
if session.get("branch") is not None:
    st.radio(
        "Showing",
        [False, True],
        format_func=lambda b: "what-if branch: " + session.branch.text if b else "original: " + explored.original.text,
        **keys.shared("show_branch"),
    )
st.markdown(f"**Output** ({literal(explored.result.strategy)}) · {literal(explored.result.text)}")


def _go(step: int) -> None:
    session.step = step
    session.stepped = True
    session.playing = False


def _navigation(result: DecodeResult, step: int) -> None:
    steps = result.steps
    row = st.container(horizontal=True)
    row.button("First", icon=":material/first_page:", on_click=_go, args=(0,), disabled=step == 0, key="first")
    row.button(
        "Previous",
        icon=":material/chevron_left:",
        on_click=_go,
        args=(max(step - 1, 0),),
        disabled=step == 0,
        key="previous",
    )
    row.button(
        "Next",
        icon=":material/chevron_right:",
        on_click=_go,
        args=(min(step + 1, steps - 1),),
        disabled=step == steps - 1,
        key="next",
    )
    row.button(
        "Last", icon=":material/last_page:", on_click=_go, args=(steps - 1,), disabled=step == steps - 1, key="last"
    )
    if session.get("playing"):
        row.button("Pause", icon=":material/pause:", on_click=_go, args=(step,), key="pause")
    elif row.button("Play", icon=":material/play_arrow:", disabled=step == steps - 1, key="play"):
        session.playing = session.stepped = True
        st.rerun()
    step_slider(result, "Step", label_visibility="collapsed")


def _what_if(explored: Explored, step: int) -> None:
    result = explored.result
    tokenizer = explored.checkpoint.tokenizer
    candidates = [i for i in result.topk_ids[step].tolist() if i != result.tgt_ids[step]]
    with st.form("what_if", border=False):
        token = st.selectbox(
            "What if the model had taken",
            candidates,
            format_func=lambda i: readable(tokenizer.id_to_piece(i)),
            key="what_if_token",
        )
        if st.form_submit_button("Continue from this token"):
            with st.spinner("Decoding the branch ..."):
                session.branch = branch(explored.checkpoint.model, tokenizer, result, step, token)
            session.show_branch = True
            st.rerun(scope="app")


TICKING = bool(session.get("playing"))  # this run of the page started the step view's timer


@st.fragment(run_every=PLAY_SECONDS if TICKING else None)
def step_view(explored: Explored) -> None:
    """Redrawn alone on a step click: reads the kept result, never runs the model."""
    if TICKING and not session.get("playing"):
        st.rerun(scope="app")  # paused: only a run of the whole page stops the timer, so draw nothing before it
    result = explored.result
    steps = result.steps
    reached_end = False
    if session.get("playing"):
        session.step = min(session.get("step", 0) + 1, steps - 1)
        reached_end = session.step == steps - 1
        session.playing = not reached_end
    step = keys.clamp_index("step", steps)
    _navigation(result, step)
    piece = result.tgt_pieces[step]
    so_far = explored.checkpoint.tokenizer.decode(result.tgt_ids[:step])
    st.markdown(
        f"**Step {step + 1} of {steps}** · so far: {literal(so_far) or '(nothing yet)'} → next token "
        f"**{literal(readable(piece))}** (probability {float(result.token_probs[step]):.3f})"
    )
    words = words_toggle()
    left, right = st.columns([2, 3])
    with left:
        tokenizer = explored.checkpoint.tokenizer
        ids = result.topk_ids[step].tolist()
        chosen = ids.index(result.tgt_ids[step]) if result.tgt_ids[step] in ids else None
        pieces = [tokenizer.id_to_piece(i) for i in ids]
        title = f"top {len(ids)} candidates for step {step + 1}"
        show(probability_bars(pieces, result.topk_probs[step].numpy(), chosen, title), key="topk_chart")
        _what_if(explored, step)
    with right:
        title = f"encoder-decoder attention of step {step + 1} over the source"
        cross = over_words(result.cross[:, :, step].numpy(), result.src_pieces, words)
        show(step_attention(*cross, title), key="cross_step_chart")
        rows = result.decoder_self[:, :, step, : step + 1].numpy()
        title = f"masked self-attention of step {step + 1} over the output so far"
        show(step_attention(*over_words(rows, result.decoder_input_pieces[: step + 1], words), title),
             key="self_step_chart")  # fmt: skip
    url.write_url()
    if reached_end:
        st.rerun(scope="app")  # a full run redefines the fragment without its timer


step_view(explored)

with st.expander("Teacher forcing: run the model on a translation you give", expanded=bool(session.get("target"))):
    with st.form("teacher_forcing", border=False):
        st.text_input("Target translation (a reference, or a wrong one)", key="target", max_chars=keys.MAX_CHARACTERS)
        st.form_submit_button("Run on this target")
    target = session.get("target", "")
    if target.strip():
        try:
            forced = models.teacher_force_cached(explored.checkpoint, explored.checkpoint_key, explored.text, target)
        except DecodeInputError as error:
            st.warning(literal(str(error)))
        else:
            layer = (
                st.slider("Layer (mean over its heads)", 1, len(forced.cross), len(forced.cross), key="tf_layer") - 1
            )
            free_column, forced_column = st.columns(2)
            runs = ((free_column, explored.result, "free decoding"), (forced_column, forced, "teacher forcing"))
            for column, result, name in runs:
                with column:
                    st.markdown(f"**{name}** · {literal(result.text)}")
                    probabilities = result.token_probs.numpy()
                    show(token_probabilities(result.tgt_pieces, probabilities, f"{name}: probability of each token"),
                         key=f"tf_probs_{name}")  # fmt: skip
                    view = attention_view(result, "cross", words=session.get("words", False))
                    title = f"{name}: cross-attention, layer {layer + 1}, mean over heads"
                    show(attention_heatmap(view.mean_over_heads()[layer], view.query_pieces, view.key_pieces, title),
                         key=f"tf_cross_{name}")  # fmt: skip
