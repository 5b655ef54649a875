"""Scaled dot-product and multi-head attention (sections 3.2.1 and 3.2.2)."""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn

from transformer.model.config import TransformerConfig
from transformer.model.linear import DerivedWeights, wants_gradient


def attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout: nn.Dropout | None = None,
    scaled: bool = True,
    bias: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q K^T / sqrt(d_k)) V, returning the output and the weights p_attn; unscaled and with a position
    bias added to the scores where the model has them (T5)."""
    scores = query @ key.transpose(-2, -1)
    if scaled:
        scores = scores / math.sqrt(query.size(-1))
    if bias is not None:
        scores = scores + bias
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))  # masked keys get exactly 0 weight
    p_attn = scores.softmax(dim=-1)
    if dropout is not None:
        p_attn = dropout(p_attn)
    return p_attn @ value, p_attn


EXPLICIT_KEYS = 64  # on the CPU, up to this many keys, a differentiated pass takes the explicit products


def explicit_is_faster(query: torch.Tensor, key: torch.Tensor) -> bool:
    """Whether this attention, which will be differentiated, is faster as explicit products than as PyTorch's fused
    kernel. On the 2-core CPU, the fused kernel's forward and backward took about twice the products' time for 22-30
    keys and 1.2x for 60, but 0.7x for 128 (the attention rows of `python -m benchmarks`). Training's sentences and
    attribution's are mostly short."""
    return (
        query.requires_grad and torch.is_grad_enabled() and query.device.type == "cpu" and key.size(-2) <= EXPLICIT_KEYS
    )


def side_by_side(*parameters: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Linear layers' weights (2-D) and biases (1-D, where the layers have them) as one: the weights transposed side
    by side (d_in, sum of d_out) and the biases end to end, or None."""
    weights = [p for p in parameters if p.dim() == 2]
    biases = [p for p in parameters if p.dim() == 1]
    return torch.cat(weights).t().contiguous(), torch.cat(biases) if biases else None


class MultiHeadAttention(nn.Module):
    """h heads of attention over learned projections, concatenated and projected by W_O."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.n_heads = config.n_heads
        self.d_head = config.d_head
        self.q_proj = nn.Linear(config.d_model, config.d_model, bias=config.bias)
        self.k_proj = nn.Linear(config.d_model, config.d_model, bias=config.bias)
        self.v_proj = nn.Linear(config.d_model, config.d_model, bias=config.bias)
        self.out_proj = nn.Linear(config.d_model, config.d_model, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)
        self.scaled = config.attention_scale
        self._fused = DerivedWeights(side_by_side)

    def query_key_value_parameters(self) -> list[torch.Tensor]:
        linears = (self.q_proj, self.k_proj, self.v_proj)
        return [p for linear in linears for p in (linear.weight, linear.bias) if p is not None]

    def split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.n_heads, self.d_head).transpose(1, 2)  # (B, H, T, d_head)

    def project_key_value(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Keys and values of x, split into heads; a cache keeps these between decode steps."""
        return self.split_heads(self.k_proj(x)), self.split_heads(self.v_proj(x))

    def project_query_key_value(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """Queries, keys and values of x for self-attention, split into heads.

        Without gradients, one product with the three weights side by side: a decode step then makes one
        call where it made three.
        """
        parameters = self.query_key_value_parameters()
        if wants_gradient(x, *parameters):
            return self.split_heads(self.q_proj(x)), *self.project_key_value(x)
        weight_t, bias = self._fused.of(*parameters)
        batch, length, d_model = x.shape
        rows = x.reshape(-1, d_model)
        fused = rows @ weight_t if bias is None else torch.addmm(bias, rows, weight_t)
        query, key, value = fused.view(batch, length, 3, self.n_heads, self.d_head).permute(2, 0, 3, 1, 4)
        return query, key, value  # each (B, H, T, d_head)

    def attend(
        self,
        x: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        mask: torch.Tensor | None,
        need_weights: bool,
        keep: torch.Tensor | None = None,
        query: torch.Tensor | None = None,
        position_bias: torch.Tensor | None = None,
        edit: Callable[[torch.Tensor], torch.Tensor] | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Attends from queries x (B, T_q, d_model) over projected keys/values (B, H, T_k, d_head), the relative
        positions' bias (B, H, T_q, T_k) added to the scores where the model has one.

        query, if given, is x already projected and split into heads (self-attention projects all three at
        once). With need_weights, and where `explicit_is_faster`, the explicit path runs (and with need_weights
        returns p_attn); otherwise the fused kernel, which gives the same output (a test holds the two together).
        keep (1, H, 1, 1) scales each head's output before W_O: 0 switches a head off. edit, if given, is handed
        the heads' outputs (B, H, T_q, d_head) there and returns those to carry on (activation patching).
        """
        if query is None:
            query = self.split_heads(self.q_proj(x))
        if need_weights or explicit_is_faster(query, key):
            dropout = self.dropout if self.training else None
            heads, p_attn = attention(query, key, value, mask, dropout, self.scaled, position_bias)
            p_attn = p_attn if need_weights else None
        else:
            if position_bias is not None:  # one additive mask: the bias, and -inf where the mask hides a key
                mask = position_bias if mask is None else position_bias.masked_fill(~mask, float("-inf"))
            heads = F.scaled_dot_product_attention(
                query,
                key,
                value,
                attn_mask=mask,
                dropout_p=self.dropout.p if self.training else 0.0,
                scale=None if self.scaled else 1.0,
            )
            p_attn = None
        if keep is not None:
            heads = heads * keep.to(heads)
        if edit is not None:
            heads = edit(heads)
        return self.output_of_heads(heads), p_attn

    def output_of_heads(self, heads: torch.Tensor) -> torch.Tensor:
        """The heads' outputs (B, H, T_q, d_head) concatenated and projected by W_O: (B, T_q, d_model)."""
        batch, _, length, _ = heads.shape
        return self.out_proj(heads.transpose(1, 2).reshape(batch, length, self.n_heads * self.d_head))

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor,
        mask: torch.Tensor | None = None,
        need_weights: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        key, value = self.project_key_value(context)
        return self.attend(x, key, value, mask, need_weights)
