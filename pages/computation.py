"""Attention, step by step (sections 3.2.1, 3.2.2): every stage computed again on the model's real tensors."""

import streamlit as st
import torch

from transformer.analysis.views import attention_view
from transformer.analysis.walkthrough import attention_stages
from transformer.model.attention import MultiHeadAttention
from transformer.model.kinds import AttentionKind
from transformer.text.pieces import readable_label
from transformer.viz.matrices import matrix_heatmap
from ui.services import models
from ui.state import keys as session_keys
from ui.state import url
from ui.widgets.charts import show
from ui.widgets.controls import kind_layer_head
from ui.widgets.sidebar import page_frame
from ui.widgets.text import literal

explored = page_frame("Attention, step by step")
checkpoint, result = explored.checkpoint, explored.result
config = checkpoint.config
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

inputs = models.sublayer_inputs_cached(checkpoint, explored.identity, kind.value, layer)
stages = attention_stages(inputs, head)
d_k = config.d_head
WEIGHT_ROWS_SHOWN = 32  # rows of a d_model × d_k weight drawn by default: a 512-row one took several screens


def scaled_title(module: MultiHeadAttention, biased: bool, d_k: int) -> str:
    """The scores as the softmax reads them: divided by √d_k (the paper's) or not (T5's), plus T5's relative
    position bias."""
    title = f"Q Kᵀ / √d_k (√{d_k} = {d_k**0.5:.2f})" if module.scaled else "Q Kᵀ (this model does not divide by √d_k)"
    return f"{title} + relative position bias" if biased else title


def draw(
    matrix: torch.Tensor,
    name: str,
    rows: list[str] | None,
    columns: list[str] | None = None,
    highlight: bool = True,
    probabilities: bool = False,
) -> None:
    figure = matrix_heatmap(
        matrix.float().cpu().numpy(), name, rows, columns, row if highlight else None, probabilities=probabilities
    )
    show(figure, key=f"walk_{name}")


st.subheader("1 · Input and projections")
left, right = st.columns(2)
with left:
    draw(inputs.queries, "X (queries' input)", queries)
with right:
    if kind is AttentionKind.CROSS:
        draw(inputs.context, "C (encoder output)", keys, highlight=False)
    else:
        st.info("Self-attention: keys and values come from X itself (C = X).")
url.from_link("walk_whole_weights", "weights", [True, False], lambda whole: "whole" if whole else "slice")
whole_weights = config.d_model <= WEIGHT_ROWS_SHOWN or st.toggle(
    f"Whole weight matrices (all {config.d_model} rows each; a readable slice otherwise)", key="walk_whole_weights"
)
columns = st.columns(3)
for column, (name, weight) in zip(columns, (("W_Q", stages.w_query), ("W_K", stages.w_key), ("W_V", stages.w_value))):
    with column:
        whole = (weight, " (d_model × d_k)")  # a slice's title says its rows, short enough for a third of the width
        shown, part = whole if whole_weights else (weight[:WEIGHT_ROWS_SHOWN], f", rows 0–{WEIGHT_ROWS_SHOWN - 1}")
        draw(shown, f"{name} of head {head + 1}{part}", None, highlight=False)
columns = st.columns(3)
with columns[0]:
    draw(stages.query, "Q = X W_Q", queries)
with columns[1]:
    draw(stages.key, "K = C W_K", keys, highlight=False)
with columns[2]:
    draw(stages.value, "V = C W_V", keys, highlight=False)

st.subheader("2 · Scores, scaling, mask, softmax")
columns = st.columns(2)
with columns[0]:
    draw(stages.scores, "Q Kᵀ", queries, keys)
with columns[1]:
    draw(stages.scaled, scaled_title(inputs.module, inputs.position_bias is not None, d_k), queries, keys)
columns = st.columns(2)
with columns[0]:
    draw(stages.masked, "masked (grey: −∞)", queries, keys)
with columns[1]:
    draw(stages.p_attn, "softmax = p_attn", queries, keys, probabilities=True)
weights = ", ".join(
    f"{literal(readable_label(keys[k]))} {float(w):.3f}" for k, w in enumerate(stages.p_attn[row]) if w >= 0.05
)
st.markdown(f"Query **{literal(readable_label(queries[row]))}** puts its weight on: {weights or 'no key above 0.05'}")

st.subheader("3 · Weighted values, all heads, output projection")
columns = st.columns(3)
with columns[0]:
    draw(stages.head_output, f"head {head + 1}: p_attn V", queries)
with columns[1]:
    draw(stages.concat, f"Concat of all {config.n_heads} heads", queries)
with columns[2]:
    draw(stages.output, "Concat W_O + b", queries)

output_gap = float((stages.output - inputs.output).abs().max())
p_attn_gap = float(abs(stages.p_attn.cpu().numpy() - view.maps[layer, head]).max())
if output_gap < 1e-4 and p_attn_gap < 1e-4:
    st.success(
        f"The numbers match: this output equals the model's own attention sublayer output (largest difference "
        f"{output_gap:.1e}), and p_attn equals the map the other pages show (largest difference {p_attn_gap:.1e})."
    )
else:
    st.error(f"Mismatch with the model: output differs by {output_gap:.3g}, p_attn by {p_attn_gap:.3g}.")
url.write_url({"weights": "whole"} if config.d_model > WEIGHT_ROWS_SHOWN and whole_weights else None)
