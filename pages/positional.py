"""Positional encoding (section 3.5): the sinusoids, their similarity, and what enters the first layer; for a model
with relative positions (T5), the bias each head adds to its scores instead."""

import numpy as np
import streamlit as st
import torch

from transformer.model.heads import head_name
from transformer.viz.charts import curves, grouped_bars, lines
from transformer.viz.matrices import matrix_heatmap
from ui.services import models
from ui.services.explorer import Explored
from ui.state import url
from ui.widgets import frame
from ui.widgets.charts import show

MAX_POSITIONS_DRAWN = 512


def relative_positions(explored: Explored) -> None:
    """T5's relative positions: nothing is added to the embeddings; each self-attention head adds a learned number
    to the score of every query and key, chosen by the bucket of their distance."""
    model, config, result = explored.checkpoint.model, explored.checkpoint.config, explored.result
    st.markdown(
        "This model adds **no position vector** to its embeddings: its encoder and decoder self-attentions add, to "
        "the score of each query and key, a learned number per head chosen by the key's distance from the query "
        "(T5's relative position bias, Raffel et al. 2020; Shaw et al. 2018). Distances are grouped in "
        f"{config.relative_buckets} buckets: one per distance for near tokens, then logarithmically wider ones up "
        f"to {config.relative_max_distance} tokens, beyond which all distances share the last bucket. The "
        "encoder's buckets tell before from after; the decoder sees only the past. Cross-attention has no bias. "
        "These numbers join the scores before the softmax, so they shape every map on the other pages."
    )
    side = st.radio("Self-attention of the", ["encoder", "decoder"], horizontal=True, key="relative_side")
    module = model.src_position if side == "encoder" else model.tgt_position
    reach = min(config.relative_max_distance + 16, MAX_POSITIONS_DRAWN)
    distances = np.arange(-reach, reach + 1) if side == "encoder" else np.arange(-reach, 1)
    with torch.no_grad():
        by_distance = module.attention_bias(torch.zeros(1, 1, dtype=torch.long), torch.tensor(distances)[None])
    by_distance = by_distance[0, :, 0].float().cpu().numpy()  # (H, distances)
    series = {f"{head_name(h)}": (distances.tolist(), by_distance[h].tolist()) for h in range(config.n_heads)}
    title = f"what each head adds to a score, by distance ({side})"
    show(lines(series, title, "key position − query position", "added to the score"), key="relative_curves")
    head = st.selectbox("Head", range(config.n_heads), format_func=head_name, key="relative_head")
    if side == "encoder":
        pieces = result.src_pieces
    else:
        pieces = [result.start_piece, *result.tgt_pieces[:-1]]  # the decoder's input
    positions = torch.arange(len(pieces))[None]
    with torch.no_grad():
        matrix = module.attention_bias(positions, positions)[0, head].float().cpu()
    if side == "decoder":
        matrix = matrix.masked_fill(torch.ones_like(matrix, dtype=torch.bool).triu(1), float("-inf"))
    title = f"{head_name(head)}'s bias over your sentence (query × key; grey: a key the decoder cannot see)"
    show(matrix_heatmap(matrix.numpy(), title, row_pieces=pieces, column_pieces=pieces), key="relative_matrix")


def introduction(explored: Explored) -> np.ndarray:
    """What a position vector is, from the model's own kind (sinusoids or learned); its table of the first positions."""
    model, config = explored.checkpoint.model, explored.checkpoint.config
    learned = config.positional == "learned"
    shown = min(config.max_len, MAX_POSITIONS_DRAWN)  # the similarity matrix grows with its square
    table = model.src_position.rows(0, shown).detach().float().cpu().numpy()  # the model's own, sinusoids or learned
    if learned:
        st.markdown(
            "Attention by itself ignores order: shuffle the words and every weight moves with them. So a vector per "
            "position is added to each token's embedding. This checkpoint **learned** its position vectors "
            f"(a {config.max_len}×{config.d_model} table trained with the rest); the paper found such a table works "
            "about as well as its sine formula (section 3.5). Below is the learned table itself."
        )
    else:
        st.markdown(
            "Attention by itself ignores order: shuffle the words and every weight moves with them. So a vector per "
            "position is added to each token's embedding (section 3.5 of the paper):"
        )
        # Two lines (one was cut at a projector's width), and d_model out of the exponent (a subscript there is a
        # script's script, too small to read from the back of a room).
        st.latex(
            r"\begin{aligned} PE_{(pos,\,2i)} &= \sin\!\big(pos / 10000^{2i/d}\big) \\ "
            r"PE_{(pos,\,2i+1)} &= \cos\!\big(pos / 10000^{2i/d}\big), \qquad d = d_{model} \end{aligned}"
        )
        st.markdown(
            "Each pair of dimensions is a sine and a cosine of one frequency; the frequencies fall geometrically from "
            "one cycle every 2π positions (dimensions 0, 1) to one every 10000·2π. Low dimensions tell near positions "
            f"apart, high ones far positions. This model: d_model = {config.d_model}, up to {config.max_len} positions."
        )
    return table


def table_views(explored: Explored, table: np.ndarray) -> tuple[list[int], list[int]]:
    """The chosen dimensions' curves, the table and the positions' similarity; the dimensions drawn and the
    default ones."""
    config = explored.checkpoint.config
    if len(table) < config.max_len:
        st.caption(f"The figures show the first {len(table)} of the model's {config.max_len:,} positions.")
    defaults = [d for d in (0, 1, 4, 5, 16, 17, 64) if d < config.d_model]
    url.many_from_link("pe_dims", "dims", list(range(config.d_model)))
    st.session_state.setdefault("pe_dims", defaults)
    dims = st.multiselect("Dimensions to draw", list(range(config.d_model)), key="pe_dims")
    show(curves(table, dims, "PE(pos, i) for the chosen dimensions i"), key="pe_curves")
    left, right = st.columns(2)
    with left:
        show(
            matrix_heatmap(table, "the positional encoding matrix", x_title="dimension", y_title="position"),
            key="pe_matrix",
        )
    with right:
        similarity = table @ table.T
        show(
            matrix_heatmap(similarity, "similarity of positions: PE(p) · PE(q)", x_title="q", y_title="p"),
            key="pe_similarity",
        )
    st.caption(
        "The similarity depends mostly on the offset p − q (bands parallel to the diagonal), not on where the pair "
        "sits: PE(p + k) is a fixed rotation of PE(p) for each offset k, which is why relative positions are easy "
        "for attention to pick up."
    )
    return dims, defaults


def sentence_entering(explored: Explored) -> None:
    """The visitor's sentence as the first encoder layer reads it: embedding plus position, and their norms."""
    model, config, result = explored.checkpoint.model, explored.checkpoint.config, explored.result
    st.subheader("Your sentence entering the encoder")
    embedded = models.source_embeddings_cached(explored.checkpoint, explored.identity)
    positions = model.src_position.rows(0, len(result.src_ids)).detach().float().cpu().numpy()  # what the model adds
    total = embedded + positions
    word, place = (
        float(np.median(np.linalg.norm(embedded, axis=1))),
        float(np.median(np.linalg.norm(positions, axis=1))),
    )
    ratio = word / max(place, 1e-12)
    balance = (
        "the word outweighs its position"
        if ratio > 1.5
        else "the position outweighs the word"
        if ratio < 1 / 1.5
        else "word and position weigh about the same"
    )
    scaling = (
        f"multiplied by √d_model = {np.sqrt(config.d_model):.1f} (section 3.4)"
        if config.scale_embedding
        else "not scaled (this model's scale_embedding is off)"
    )
    st.markdown(
        f"The embedding of each token is {scaling} before the position vector is added. In this model the "
        f"embeddings' median norm is {word:.1f} against {place:.1f} for the positions: in the sum, {balance}. "
        "The norms per token:"
    )
    norms = {
        "embedding × √d_model": np.linalg.norm(embedded, axis=1),
        "positional encoding": np.linalg.norm(positions, axis=1),
        "sum (input of layer 1)": np.linalg.norm(total, axis=1),
    }
    show(grouped_bars(result.src_pieces, norms, "vector norms per source token", "L2 norm"), key="pe_norms")
    with st.expander("The three matrices (tokens × dimensions)"):
        for name, matrix in (("embedding × √d_model", embedded), ("positional encoding", positions), ("sum", total)):
            show(matrix_heatmap(matrix, name, row_pieces=result.src_pieces, x_title="dimension"), key=f"pe_{name}")


def page(explored: Explored) -> None:
    if explored.checkpoint.config.positional == "relative":
        relative_positions(explored)
        url.write_url()
        return
    dims, defaults = table_views(explored, introduction(explored))
    sentence_entering(explored)
    url.write_url({"dims": "" if dims == defaults else ",".join(map(str, dims))})


page(frame.draw(__file__))
