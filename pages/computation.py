"""Attention, step by step (sections 3.2.1, 3.2.2): every stage computed again on the model's real tensors."""

from dataclasses import dataclass

import streamlit as st
import torch

from transformer.analysis.views import attention_view
from transformer.analysis.walkthrough import AttentionStages, SublayerInputs, attention_stages
from transformer.model.attention import MultiHeadAttention
from transformer.model.heads import head_name
from transformer.model.kinds import AttentionKind
from transformer.text.pieces import readable_label
from transformer.viz.matrices import matrix_heatmap
from ui.services import models
from ui.services.explorer import Explored
from ui.state import keys as session_keys
from ui.state import url
from ui.widgets import frame
from ui.widgets.charts import show
from ui.widgets.controls import kind_layer_head
from ui.widgets.text import literal

WEIGHT_ROWS_SHOWN = 32  # rows of a d_model × d_k weight drawn by default: a 512-row one took several screens


def formulas() -> None:
    """The two formulas the page works through."""
    st.markdown(
        "One layer and head of the model, worked through with plain matrix products on its own weights, for your "
        "sentence (the decoder reads the output the model produced). Scaled dot-product attention (section 3.2.1):"
    )
    st.latex(r"\mathrm{Attention}(Q, K, V) = \mathrm{softmax}\!\Big(\frac{QK^\top}{\sqrt{d_k}}\Big)V")
    st.markdown(
        "and multi-head attention (section 3.2.2) runs h of them side by side on learned projections, then joins them: "
    )
    st.latex(  # two lines: one was cut at a projector's width
        r"\begin{aligned} \mathrm{head}_i &= \mathrm{Attention}(XW_i^Q, CW_i^K, CW_i^V) \\ "
        r"\mathrm{MultiHead} &= \mathrm{Concat}(\mathrm{head}_1,\dots,\mathrm{head}_h)\,W^O \end{aligned}"
    )
    st.caption(
        "X: the sublayer's input (queries); C: what keys and values come from (X itself for self-attention, "
        "the encoder output for encoder-decoder attention)."
    )


@dataclass(frozen=True)
class Walk:
    """One head's sublayer worked through: its inputs, its stages, and the query row followed."""

    kind: AttentionKind
    layer: int
    head: int
    inputs: SublayerInputs
    stages: AttentionStages
    queries: list[str]
    keys: list[str]
    row: int

    def draw(
        self,
        matrix: torch.Tensor,
        name: str,
        rows: list[str] | None,
        columns: list[str] | None = None,
        highlight: bool = True,
        probabilities: bool = False,
    ) -> None:
        figure = matrix_heatmap(
            matrix.float().cpu().numpy(),
            name,
            rows,
            columns,
            self.row if highlight else None,
            probabilities=probabilities,
            upright_columns=columns is not None,  # tokens upright: at an angle "sleeping" and "on" ran together
        )
        show(figure, key=f"walk_{name}")


def chosen_walk(explored: Explored) -> Walk:
    """The head and the query row the visitor follows, and that head's stages recomputed."""
    result = explored.result
    kind, layer, head = kind_layer_head(result)
    view = attention_view(result, kind)
    queries, keys = view.query_pieces, view.key_pieces
    if kind.queries_from_source:
        row = st.selectbox(
            "Follow the query token",
            range(len(queries)),
            format_func=lambda i: f"{i + 1}: {readable_label(queries[i])}",
            key=f"query_row_{kind}",
        )
    else:  # a decoder row is a decoding step: the shared one, so the explorer, the other pages and a link follow it
        session_keys.clamp_index("step", len(queries))
        row = st.selectbox(
            "Follow the query token (the decoding step)",
            range(len(queries)),
            format_func=lambda i: f"{i + 1}: {readable_label(queries[i])}",
            **session_keys.shared("step"),
        )
    inputs = models.sublayer_inputs_cached(explored.checkpoint, explored.identity, kind.value, layer)
    return Walk(kind, layer, head, inputs, attention_stages(inputs, head), queries, keys, row)


def scaled_title(module: MultiHeadAttention, biased: bool, d_k: int) -> str:
    """The scores as the softmax reads them: divided by √d_k (the paper's) or not (T5's), plus T5's relative
    position bias."""
    title = f"Q Kᵀ / √d_k (√{d_k} = {d_k**0.5:.2f})" if module.scaled else "Q Kᵀ (this model does not divide by √d_k)"
    return f"{title} + relative position bias" if biased else title


def projections(walk: Walk, d_model: int) -> bool:
    """Stage 1: the input, the head's weights (whole or a slice, as chosen) and Q, K, V; whether drawn whole."""
    stages, queries, keys = walk.stages, walk.queries, walk.keys
    st.subheader("1 · Input and projections")
    left, right = st.columns(2)
    with left:
        walk.draw(walk.inputs.queries, "X (queries' input)", queries)
    with right:
        if walk.kind is AttentionKind.CROSS:
            walk.draw(walk.inputs.context, "C (encoder output)", keys, highlight=False)
        else:
            st.info("Self-attention: keys and values come from X itself (C = X).")
    url.from_link("walk_whole_weights", "weights", [True, False], lambda whole: "whole" if whole else "slice")
    whole_weights = d_model <= WEIGHT_ROWS_SHOWN or st.toggle(
        f"Whole weight matrices (all {d_model} rows each; a readable slice otherwise)", key="walk_whole_weights"
    )
    weights = (("W_Q", stages.w_query), ("W_K", stages.w_key), ("W_V", stages.w_value))
    for column, (name, weight) in zip(st.columns(3), weights):
        with column:
            whole = (weight, " (d_model × d_k)")  # a slice's title says its rows, short enough for a third of the width
            shown, part = whole if whole_weights else (weight[:WEIGHT_ROWS_SHOWN], f", rows 0–{WEIGHT_ROWS_SHOWN - 1}")
            walk.draw(shown, f"{name} of {head_name(walk.head)}{part}", None, highlight=False)
    columns = st.columns(3)
    with columns[0]:
        walk.draw(stages.query, "Q = X W_Q", queries)
    with columns[1]:
        walk.draw(stages.key, "K = C W_K", keys, highlight=False)
    with columns[2]:
        walk.draw(stages.value, "V = C W_V", keys, highlight=False)
    return whole_weights


def scores(walk: Walk, d_k: int) -> None:
    """Stage 2: the scores, scaled, masked and through the softmax, and where the followed query looks."""
    stages, queries, keys, row = walk.stages, walk.queries, walk.keys, walk.row
    st.subheader("2 · Scores, scaling, mask, softmax")
    columns = st.columns(2)
    with columns[0]:
        walk.draw(stages.scores, "Q Kᵀ", queries, keys)
    with columns[1]:
        title = scaled_title(walk.inputs.module, walk.inputs.position_bias is not None, d_k)
        walk.draw(stages.scaled, title, queries, keys)
    columns = st.columns(2)
    with columns[0]:
        walk.draw(stages.masked, "masked (grey: −∞)", queries, keys)
    with columns[1]:
        walk.draw(stages.p_attn, "softmax = p_attn", queries, keys, probabilities=True)
    weights = ", ".join(
        f"{literal(readable_label(keys[k]))} {float(w):.3f}" for k, w in enumerate(stages.p_attn[row]) if w >= 0.05
    )
    looked_at = weights or "no key above 0.05"
    st.markdown(f"Query **{literal(readable_label(queries[row]))}** puts its weight on: {looked_at}")


def output(walk: Walk, explored: Explored) -> None:
    """Stage 3: the weighted values, every head's joined and projected; checked against the model's own."""
    stages, queries = walk.stages, walk.queries
    st.subheader("3 · Weighted values, all heads, output projection")
    columns = st.columns(3)
    with columns[0]:
        walk.draw(stages.head_output, f"{head_name(walk.head)}: p_attn V", queries)
    with columns[1]:
        walk.draw(stages.concat, f"Concat of all {explored.checkpoint.config.n_heads} heads", queries)
    with columns[2]:
        walk.draw(stages.output, "Concat W_O + b", queries)
    output_gap = float((stages.output - walk.inputs.output).abs().max())
    shown_map = attention_view(explored.result, walk.kind).maps[walk.layer, walk.head]
    p_attn_gap = float(abs(stages.p_attn.cpu().numpy() - shown_map).max())
    if output_gap < 1e-4 and p_attn_gap < 1e-4:
        st.success(
            f"The numbers match: this output equals the model's own attention sublayer output (largest difference "
            f"{output_gap:.1e}), and p_attn equals the map the other pages show (largest difference "
            f"{p_attn_gap:.1e})."
        )
    else:
        st.error(f"Mismatch with the model: output differs by {output_gap:.3g}, p_attn by {p_attn_gap:.3g}.")


def page(explored: Explored) -> None:
    config = explored.checkpoint.config
    formulas()
    walk = chosen_walk(explored)
    whole_weights = projections(walk, config.d_model)
    scores(walk, config.d_head)
    output(walk, explored)
    url.write_url({"weights": "whole"} if config.d_model > WEIGHT_ROWS_SHOWN and whole_weights else None)


page(frame.draw(__file__))
