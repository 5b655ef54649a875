"""The attention of one layer and head recomputed stage by stage from the model's own weights.

Sections 3.2.1 (scaled dot-product attention) and 3.2.2 (multi-head attention): the teaching
pages show each stage, and `AttentionStages.output` is checked against what the model's
module computes, so the walk-through is the model's real computation.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from transformer.model.attention import MultiHeadAttention
from transformer.model.encoder_decoder import Transformer
from transformer.model.kinds import AttentionKind
from transformer.model.probes import Probe


@dataclass(frozen=True)
class SublayerInputs:
    """What one attention sublayer received in a teacher-forced pass, and what the model made of it."""

    module: MultiHeadAttention
    queries: torch.Tensor  # (T_q, d_model) the sublayer's input X
    context: torch.Tensor  # (T_k, d_model) what keys and values are projected from
    mask: torch.Tensor  # (T_q, T_k) True where the query may look
    output: torch.Tensor  # (T_q, d_model) the module's own output
    p_attn: torch.Tensor  # (H, T_q, T_k) the module's own weights
    position_bias: torch.Tensor | None = None  # (H, T_q, T_k) added to the scores (T5's relative positions)


@dataclass(frozen=True)
class AttentionStages:
    """Each stage for one head (Q..head_output) and for the whole layer (concat, output)."""

    w_query: torch.Tensor  # (d_model, d_k): the head's slice of W_Q
    w_key: torch.Tensor
    w_value: torch.Tensor
    query: torch.Tensor  # (T_q, d_k)
    key: torch.Tensor  # (T_k, d_k)
    value: torch.Tensor  # (T_k, d_k)
    scores: torch.Tensor  # (T_q, T_k) Q K^T
    scaled: torch.Tensor  # scores / sqrt(d_k) (not divided in T5), plus the relative positions' bias where there is one
    masked: torch.Tensor  # -inf where the mask hides a key
    p_attn: torch.Tensor  # softmax of masked
    head_output: torch.Tensor  # (T_q, d_k) p_attn V
    concat: torch.Tensor  # (T_q, d_model) every head's output side by side
    output: torch.Tensor  # (T_q, d_model) concat W_O + b


@torch.inference_mode()
def sublayer_inputs(
    model: Transformer, src_ids: list[int], tgt_ids: list[int], kind: AttentionKind | str, layer: int
) -> SublayerInputs:
    """What the chosen attention sublayer received in one ordinary teacher-forced pass (eval mode) on tgt_ids."""
    kind = AttentionKind(kind)
    layers = model.encoder_layers if kind.queries_from_source else model.decoder_layers
    if not 0 <= layer < len(layers):
        raise ValueError(f"no {kind} attention at layer {layer}")
    device = next(model.parameters()).device
    decoder_input = torch.tensor([[model.config.start_id, *tgt_ids[:-1]]], device=device)
    probe = Probe.recording(kind, layer)
    model(torch.tensor([src_ids], device=device), decoder_input, probe=probe)
    seen = probe.records[(kind, layer)]
    queries, context = seen.queries[0], seen.context[0]
    return SublayerInputs(
        kind.module(model, layer),
        queries,
        context,
        seen.mask[0, 0].expand(len(queries), len(context)),
        seen.output[0],
        seen.p_attn[0],
        None if seen.position_bias is None else seen.position_bias[0],
    )


@torch.inference_mode()
def attention_stages(inputs: SublayerInputs, head: int) -> AttentionStages:
    """The computation written out with plain matrix products on the module's weights."""
    module = inputs.module
    d_k, n_heads = module.d_head, module.n_heads
    heads = slice(head * d_k, (head + 1) * d_k)

    def per_head(linear: torch.nn.Linear, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, linear.weight, linear.bias).view(len(x), n_heads, d_k).transpose(0, 1)  # (H, T, d_k)

    query, key, value = (
        per_head(p, x)
        for p, x in ((module.q_proj, inputs.queries), (module.k_proj, inputs.context), (module.v_proj, inputs.context))
    )
    scores = query @ key.transpose(1, 2)  # (H, T_q, T_k)
    scaled = scores / math.sqrt(d_k) if module.scaled else scores
    if inputs.position_bias is not None:
        scaled = scaled + inputs.position_bias
    masked = scaled.masked_fill(~inputs.mask, float("-inf"))
    p_attn = masked.softmax(dim=-1)
    head_outputs = p_attn @ value  # (H, T_q, d_k)
    concat = head_outputs.transpose(0, 1).reshape(len(inputs.queries), n_heads * d_k)  # (T_q, d_model)
    return AttentionStages(
        w_query=module.q_proj.weight[heads].T,
        w_key=module.k_proj.weight[heads].T,
        w_value=module.v_proj.weight[heads].T,
        query=query[head],
        key=key[head],
        value=value[head],
        scores=scores[head],
        scaled=scaled[head],
        masked=masked[head],
        p_attn=p_attn[head],
        head_output=head_outputs[head],
        concat=concat,
        output=F.linear(concat, module.out_proj.weight, module.out_proj.bias),
    )
