"""Two checkpoints on the same sentence: outputs, the same head side by side, the difference, divergence per head."""

import numpy as np
import streamlit as st

from transformer.analysis.heads.statistics import js_divergence
from transformer.analysis.views import AttentionView, attention_view, matching_rows
from transformer.decoding.result import DecodeInputError, DecodeResult
from transformer.model.heads import head_name, head_names, layer_name, layer_names
from transformer.text.pieces import readable_label
from transformer.viz.attention import attention_heatmap
from transformer.viz.matrices import matrix_heatmap
from ui.services import checkpoints, models
from ui.services.checkpoints import KeyedCheckpoint
from ui.services.explorer import Explored
from ui.state import url
from ui.widgets import frame
from ui.widgets.charts import show
from ui.widgets.controls import kind_layer_head, words_toggle
from ui.widgets.notices import open_or_explain
from ui.widgets.text import literal

INTRO = (
    "The sidebar's sentence read by two checkpoints side by side: each one's translation and the probability of "
    "each token, and, where the two share a tokenizer, the same attention map of each and their difference."
)


def other_checkpoint(explored: Explored) -> tuple[str, KeyedCheckpoint]:
    """The checkpoint compared with the sidebar's, opened (by default the same run after its first epoch)."""
    session = st.session_state
    files, uploads = checkpoints.checkpoint_files(), session.get("uploads", {})
    others = [name for name in [*files, *uploads] if name != explored.checkpoint_name]
    if not others:
        st.info("There is only one checkpoint to choose from: upload another on the Checkpoints page.")
        st.stop()
    early = f"{explored.checkpoint_name}-epoch1"  # the same run after its first epoch, where one is shipped
    default = early if early in others else others[0]
    url.from_link("compare_with", "with", others)
    if session.get("compare_with") not in others:  # first here, or the sidebar now shows the one compared with
        session.compare_with = default
    other_name = st.selectbox("Compare the sidebar's checkpoint with", others, key="compare_with")
    url.write_url({"with": other_name})  # now: the page may stop below
    opened = open_or_explain(other_name)
    if opened is None:
        st.stop()
    return other_name, opened


def both_outputs(explored: Explored, other_name: str, opened: KeyedCheckpoint) -> None:
    """Each checkpoint's own translation of the sentence; stops where there is no output to compare on."""
    try:
        with st.spinner(f"Translating the sentence with {other_name} ..."):
            other_free = models.decode_cached(
                opened.checkpoint, opened.key, explored.text, st.session_state.applied_settings
            )
    except DecodeInputError as error:  # a text the other checkpoint's tokenizer refuses
        st.error(literal(f"{other_name} cannot read this sentence: {error}"))
        st.stop()
    first = explored.result
    columns = st.columns(2)
    columns[0].markdown(f"**{literal(explored.checkpoint_name)}** · {literal(first.text)}")
    columns[1].markdown(f"**{literal(other_name)}** · {literal(other_free.text)}")
    if not first.text.strip():
        st.info(
            f"{explored.checkpoint_name} wrote nothing for this sentence: there is no output to run {other_name} on. "
            "Try another sentence."
        )
        st.stop()


def run_on_first_output(explored: Explored, other_name: str, opened: KeyedCheckpoint) -> tuple[DecodeResult, bool]:
    """The other checkpoint teacher-forced on the first one's output, and whether both read the same tokens."""
    first, other, other_key = explored.result, opened.checkpoint, opened.key
    same_tokens = other.tokenizer.same_as(explored.checkpoint.tokenizer)
    if same_tokens:  # the same tokens on both sides: the second model is run (teacher-forced) on the first's output
        second = models.teacher_force_ids_cached(
            other, other_key, tuple(first.src_ids), tuple(first.tgt_ids), first.truncated
        )
        st.caption(
            f"Maps below: {literal(other_name)} is run on the output of {literal(explored.checkpoint_name)} "
            "(teacher forcing), so both maps have the same rows and columns."
        )
        return second, True
    try:  # each reads the text in its own pieces: compared over the words they make of it
        second = models.teacher_force_cached(other, other_key, explored.text, first.text)
    except DecodeInputError as error:
        st.error(literal(f"{other_name} cannot read this sentence or its translation: {error}"))
        st.stop()
    st.caption(
        f"These checkpoints have different tokenizers, so each reads the sentence in its own pieces: both maps are "
        f"drawn over words (a word's pieces merged), {literal(other_name)} run on the output of "
        f"{literal(explored.checkpoint_name)} (teacher forcing)."
    )
    return second, False


def compared_maps(explored: Explored, other_name: str, second: DecodeResult, same_tokens: bool) -> None:
    """One head's maps side by side, then, where their rows read the same words, their difference and every
    head's divergence."""
    first = explored.result
    kind, layer, head = kind_layer_head(first)
    words = words_toggle() if same_tokens else True
    view_a, view_b = attention_view(first, kind, words=words), attention_view(second, kind, words=words)
    rows = list(range(len(view_a.query_pieces))) if same_tokens else matching_rows(view_a, view_b)
    layers = min(view_a.maps.shape[0], view_b.maps.shape[0])
    heads = min(view_a.maps.shape[1], view_b.maps.shape[1])
    if (view_a.maps.shape[:2]) != (view_b.maps.shape[:2]):
        st.info(f"Different sizes: comparing the first {layers} layers and {heads} heads they share.")
    layer, head = min(layer, layers - 1), min(head, heads - 1)
    columns = st.columns(2)  # two to a row: three left too little width for a sentence's token labels
    for column, (view, name, key) in zip(
        columns, ((view_a, explored.checkpoint_name, "cmp_a"), (view_b, other_name, "cmp_b"))
    ):
        with column:
            title = f"{name}: {layer_name(layer)}, {head_name(head)}"
            maps = attention_heatmap(view.maps[layer, head], view.query_pieces, view.key_pieces, title, view.mask)
            show(maps, key=key)
    if rows is None:
        st.info(
            "The two tokenizers make different words of this text (the first's: "
            f"{literal(' '.join(readable_label(k) for k in view_a.key_pieces))}; the second's: "
            f"{literal(' '.join(readable_label(k) for k in view_b.key_pieces))}), so their maps are not compared "
            "cell by cell."
        )
        return
    differences(view_a, view_b, rows, (layer, head), (layers, heads))


def differences(
    view_a: AttentionView, view_b: AttentionView, rows: list[int], shown: tuple[int, int], shared: tuple[int, int]
) -> None:
    """The shown head's difference over `rows`, and each of the `shared` layers' and heads' divergence."""
    (layer, head), (layers, heads) = shown, shared
    if len(rows) < len(view_a.query_pieces):
        st.caption(
            f"The difference and divergence below are over the {len(rows)} rows that read the same word in both."
        )
    query_labels = [view_a.query_pieces[row] for row in rows]
    columns = st.columns(2)
    with columns[0]:
        difference = view_a.maps[layer, head][rows] - view_b.maps[layer, head][rows]
        show(
            matrix_heatmap(difference, "difference (first − second)", query_labels, view_a.key_pieces),
            key="cmp_diff",
        )
    divergence = js_divergence(view_a.maps[:layers, :heads, rows], view_b.maps[:layers, :heads, rows])
    # Natural log: the divergence runs from 0 (the same rows) to ln 2 (disjoint), and so does the colour scale.
    figure = matrix_heatmap(
        divergence,
        f"JS divergence per head (0 same, {np.log(2):.2f} disjoint)",
        layer_names(layers),
        head_names(heads),
        value_range=(0.0, float(np.log(2))),
    )
    with columns[1]:
        show(figure, key="cmp_js")
    top = np.unravel_index(np.argmax(divergence), divergence.shape)
    st.markdown(f"They differ most at {layer_name(top[0])}, {head_name(top[1])} (divergence {divergence[top]:.3f}).")


def page(explored: Explored) -> None:
    st.markdown(INTRO)
    other_name, opened = other_checkpoint(explored)
    both_outputs(explored, other_name, opened)
    second, same_tokens = run_on_first_output(explored, other_name, opened)
    compared_maps(explored, other_name, second, same_tokens)
    url.write_url({"with": other_name})


page(frame.draw(__file__))
