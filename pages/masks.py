"""Masks (section 3.2.3): padding and look-ahead, as matrices, and what masking does to one head's scores."""

import numpy as np
import streamlit as st
import torch

from transformer.analysis.views import attention_view
from transformer.analysis.walkthrough import attention_stages
from transformer.decoding.result import DecodeInputError
from transformer.decoding.strategies import DecodeSettings
from transformer.model.kinds import AttentionKind
from transformer.model.masks import padding_mask, subsequent_mask, target_mask
from transformer.training.batches import collate
from transformer.viz.matrices import mask_heatmap, matrix_heatmap
from ui.services import models
from ui.services.explorer import Explored
from ui.state import url
from ui.widgets import frame
from ui.widgets.charts import show
from ui.widgets.controls import kind_layer_head
from ui.widgets.text import literal

INTRO = (
    "A mask says, for each query, which keys it may look at. Sentences in a batch are padded to one length, and "
    "nobody may look at **padding** (the source padding mask). While producing token t the decoder must not see "
    "tokens after t, which it is being trained to predict: the **look-ahead** (subsequent) mask (section 3.2.3). "
    "Masked scores are set to −∞ before the softmax, so they get a weight of exactly 0."
)


def batch_masks(explored: Explored) -> None:
    """The masks of the visitor's sentence batched with a second one, as matrices, one tab a sentence."""
    config, tokenizer = explored.checkpoint.config, explored.checkpoint.tokenizer
    second = st.text_input(
        "A second sentence, to batch with yours", value="A dog runs.", key="mask_second", max_chars=500
    )
    try:
        other = models.decode_cached(explored.checkpoint, explored.checkpoint_key, second, DecodeSettings())
    except DecodeInputError as error:
        st.warning(literal(str(error)))
        st.stop()
    batch = [explored.result, other]
    src, decoder_input, _ = collate([(r.src_ids, r.tgt_ids) for r in batch], [0, 1], config.pad_id, config.start_id)
    src_keep = padding_mask(src, config.pad_id)  # (2, 1, 1, S)
    tgt_keep = target_mask(decoder_input, config.pad_id)  # (2, 1, T, T)
    look_ahead = subsequent_mask(decoder_input.size(1))[0, 0]
    src_pieces = [[tokenizer.id_to_piece(i) for i in row] for row in src.tolist()]
    tgt_pieces = [[tokenizer.id_to_piece(i) for i in row] for row in decoder_input.tolist()]
    st.caption(
        f"The batch: source {tuple(src.shape)}, decoder input {tuple(decoder_input.shape)}; <pad> fills the shorter "
        "rows."
    )
    for index, tab in enumerate(st.tabs(["your sentence", "the second sentence"])):
        with tab:
            one_sentence(
                index, src_pieces[index], tgt_pieces[index], src_keep[index, 0, 0].numpy(), tgt_keep, look_ahead
            )


def one_sentence(
    index: int,
    s_pieces: list[str],
    t_pieces: list[str],
    keep_src: np.ndarray,
    tgt_keep: torch.Tensor,
    look_ahead: torch.Tensor,
) -> None:
    """The masks each attention kind uses for the batch's sentence `index`."""
    columns = st.columns(2)
    with columns[0]:
        show(mask_heatmap(keep_src[None], ["any query"], s_pieces, "source padding mask"), key=f"pad_{index}")
        encoder = np.broadcast_to(keep_src, (len(s_pieces), len(s_pieces)))
        show(mask_heatmap(encoder, s_pieces, s_pieces, "encoder self-attention uses: padding"), key=f"enc_{index}")
    with columns[1]:
        show(mask_heatmap(look_ahead.numpy(), t_pieces, t_pieces, "look-ahead (subsequent) mask"), key=f"sub_{index}")
        show(
            mask_heatmap(
                tgt_keep[index, 0].numpy(), t_pieces, t_pieces, "decoder self-attention uses: look-ahead and padding"
            ),
            key=f"dec_{index}",
        )
    cross = np.broadcast_to(keep_src, (len(t_pieces), len(s_pieces)))
    show(
        mask_heatmap(cross, t_pieces, s_pieces, "encoder-decoder attention uses: source padding"), key=f"cross_{index}"
    )


def one_head(explored: Explored) -> None:
    """One head's scores before masking, after it and after the softmax: masked cells get exactly 0."""
    st.subheader("What the mask does to one head")
    # Opens on the one kind whose mask shows on a single sentence, until a kind is chosen; other pages keep theirs.
    kind, layer, head = kind_layer_head(explored.result, page_default=AttentionKind.DECODER)
    inputs = models.sublayer_inputs_cached(explored.checkpoint, explored.identity, kind.value, layer)
    stages = attention_stages(inputs, head)
    view = attention_view(explored.result, kind)
    stage_views = (
        ("scores Q·Kᵀ/√d_k", stages.scaled, False),
        ("after masking (grey: −∞)", stages.masked, False),
        ("after softmax: p_attn", stages.p_attn, True),
    )
    for column, (name, matrix, probabilities) in zip(st.columns(3), stage_views):
        with column:
            figure = matrix_heatmap(
                matrix.cpu().numpy(), name, view.query_pieces, view.key_pieces, probabilities=probabilities
            )
            show(figure, key=f"stage_{name}")
    hidden = ~np.isfinite(stages.masked.cpu().numpy())
    if hidden.any():
        weight = float(stages.p_attn.cpu().numpy()[hidden].max())
        st.success(f"{int(hidden.sum())} masked cells; the largest weight any of them got after the softmax: {weight}.")
    else:
        st.info(
            "Nothing is masked here: one sentence alone has no padding, and this attention kind has no look-ahead. "
            "Choose the decoder's masked self-attention to see the mask at work."
        )


def page(explored: Explored) -> None:
    st.markdown(INTRO)
    batch_masks(explored)
    one_head(explored)
    url.write_url()


page(frame.draw(__file__))
