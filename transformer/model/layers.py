"""The encoder and decoder layers (sections 3.1-3.3): their norms, feed-forward and residual blocks, and the
decoder's key/value cache."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from transformer.model.attention import MultiHeadAttention
from transformer.model.config import TransformerConfig
from transformer.model.probes import SublayerProbe, SublayerRecord


def make_norm(config: TransformerConfig) -> nn.Module:
    """A layer norm (section 3.1's, Ba et al.) or, where the config says so, an RMS norm (T5's: a scale, no mean, no
    bias; Zhang and Sennrich 2019)."""
    if config.norm == "rms":
        return nn.RMSNorm(config.d_model, eps=config.layer_norm_eps)
    return nn.LayerNorm(config.d_model, eps=config.layer_norm_eps)


ACTIVATIONS: dict[str, Callable[[torch.Tensor], torch.Tensor]] = {
    "relu": F.relu,
    "gelu": F.gelu,
    "gelu_tanh": lambda x: F.gelu(x, approximate="tanh"),
    "swish": F.silu,
}


class FeedForward(nn.Module):
    """FFN(x) = max(0, x W1 + b1) W2 + b2 (section 3.3), or with GELU or SiLU (swish) in place of max(0, .);
    gated (T5 v1.1's): (act(x W1) * x W_gate) W2."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.inner = nn.Linear(config.d_model, config.d_ff, bias=config.bias)
        self.gate = nn.Linear(config.d_model, config.d_ff, bias=config.bias) if config.feed_forward == "gated" else None
        self.outer = nn.Linear(config.d_ff, config.d_model, bias=config.bias)
        self.dropout = nn.Dropout(config.dropout)
        self.activation = ACTIVATIONS[config.activation]

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        hidden = self.activation(self.inner(x))
        if self.gate is not None:
            hidden = hidden * self.gate(x)
        return self.outer(self.dropout(hidden))


class Residual(nn.Module):
    """A sublayer wrapped in dropout, a residual connection and layer norm, before or after."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.norm = make_norm(config)
        self.dropout = nn.Dropout(config.dropout)
        self.norm_first = config.norm_first

    def sublayer_input(self, x: torch.Tensor) -> torch.Tensor:
        """What the sublayer sees: the normalised stream (pre-norm) or the stream itself (post-norm)."""
        return self.norm(x) if self.norm_first else x

    def forward(self, x: torch.Tensor, sublayer: Callable[[torch.Tensor], tuple]) -> tuple:
        """Returns the new stream and whatever else the sublayer returned."""
        out, *extra = sublayer(self.sublayer_input(x))
        if self.norm_first:
            return x + self.dropout(out), *extra
        return self.norm(x + self.dropout(out)), *extra


def probed_attend(
    module: MultiHeadAttention,
    h: torch.Tensor,
    context: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    need_weights: bool,
    probe: SublayerProbe | None,
    query: torch.Tensor | None = None,
    position_bias: torch.Tensor | None = None,
    stream: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """The module's attention of queries h over keys/values projected from context, as the probe asks; `stream`, the
    residual stream entering the block, is recorded with it."""
    if probe is None:
        return module.attend(h, key, value, mask, need_weights, query=query, position_bias=position_bias)
    recording = probe.records is not None
    if probe.allowed is not None:
        allowed = probe.allowed.to(h.device)
        mask = allowed if mask is None else mask & allowed
    out, p_attn = module.attend(
        h, key, value, mask, need_weights or recording, probe.keep, query, position_bias, probe.edit
    )
    if recording:
        probe.record(SublayerRecord(h, context, mask, out, p_attn, position_bias, stream))
    return out, p_attn


class EncoderLayer(nn.Module):
    """Self-attention then feed-forward, each in a residual block."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(config)
        self.feed_forward = FeedForward(config)
        self.attn_block = Residual(config)
        self.ff_block = Residual(config)

    def forward(
        self,
        x: torch.Tensor,
        src_mask: torch.Tensor,
        need_weights: bool,
        probe: SublayerProbe | None = None,
        position_bias: torch.Tensor | None = None,
    ) -> tuple[torch.Tensor, torch.Tensor | None]:
        def self_attend(h: torch.Tensor) -> tuple:
            query, key, value = self.self_attn.project_query_key_value(h)
            return probed_attend(
                self.self_attn, h, h, key, value, src_mask, need_weights, probe, query, position_bias, stream=x
            )

        x, p_attn = self.attn_block(x, self_attend)
        return self.ff_block(x, lambda h: (self.feed_forward(h),))[0], p_attn

    def output_from_heads(self, x: torch.Tensor, heads: torch.Tensor) -> torch.Tensor:
        """The layer's output at positions whose heads' outputs (B, H, T, d_head) are given, x the stream entering
        it there (B, T, d_model). Past its attention a layer works on each position alone: where a head's output
        is patched at some positions, these are all the layer's output changes at (activation patching)."""
        x, *_ = self.attn_block(x, lambda h: (self.self_attn.output_of_heads(heads),))
        return self.ff_block(x, lambda h: (self.feed_forward(h),))[0]


@dataclass
class KeyValueBuffer:
    """Room for a decoder layer's self-attention keys and values, (B, H, capacity, d_head) each, filled up to
    `filled`: a decode step writes its key and value in place instead of concatenating the whole cache anew.

    Only LayerCache writes here, and only past `filled`, so every cache that reads a prefix keeps its values.
    """

    key: torch.Tensor
    value: torch.Tensor
    filled: int = 0

    @classmethod
    def empty_like(cls, like: torch.Tensor, capacity: int) -> KeyValueBuffer:
        """Room for `capacity` positions of tensors shaped like `like` (B, H, *, d_head)."""
        batch, heads, _, d_head = like.shape
        return cls(*(like.new_empty(batch, heads, capacity, d_head) for _ in range(2)))

    @property
    def capacity(self) -> int:
        return self.key.size(2)


@dataclass(frozen=True)
class LayerCache:
    """One decoder layer's keys and values so far, each (B, H, T, d_head): a value, never module state.

    The self-attention keys and values are the first `length` positions of a buffer that later steps fill.
    """

    buffer: KeyValueBuffer
    length: int
    cross_key: torch.Tensor
    cross_value: torch.Tensor

    @property
    def self_key(self) -> torch.Tensor:
        return self.buffer.key[:, :, : self.length]

    @property
    def self_value(self) -> torch.Tensor:
        return self.buffer.value[:, :, : self.length]

    def extended(self, key: torch.Tensor, value: torch.Tensor) -> LayerCache:
        """This cache with the keys and values of new positions (B, H, T, d_head) after it.

        Written into the buffer's free room; into a new buffer (twice as large) when it is full, or when
        another continuation of this cache has already written there (a branch: both keep their own values).
        """
        end = self.length + key.size(2)
        buffer = self.buffer
        if buffer.filled != self.length or end > buffer.capacity:
            buffer = KeyValueBuffer.empty_like(key, max(end, 2 * buffer.capacity))
            buffer.key[:, :, : self.length] = self.self_key
            buffer.value[:, :, : self.length] = self.self_value
        buffer.key[:, :, self.length : end] = key
        buffer.value[:, :, self.length : end] = value
        buffer.filled = end
        return LayerCache(buffer, end, self.cross_key, self.cross_value)

    def select(self, index: torch.Tensor) -> LayerCache:
        """The cache rows of the given batch entries (beam search reorders its hypotheses)."""
        key, value = self.buffer.key.index_select(0, index), self.buffer.value.index_select(0, index)
        return LayerCache(
            KeyValueBuffer(key, value, self.length),
            self.length,
            self.cross_key.index_select(0, index),
            self.cross_value.index_select(0, index),
        )


class DecoderLayer(nn.Module):
    """Masked self-attention, encoder-decoder attention, feed-forward, each in a residual block."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.self_attn = MultiHeadAttention(config)
        self.cross_attn = MultiHeadAttention(config)
        self.feed_forward = FeedForward(config)
        self.self_block = Residual(config)
        self.cross_block = Residual(config)
        self.ff_block = Residual(config)

    def start_cache(self, memory: torch.Tensor, capacity: int) -> LayerCache:
        """An empty self-attention cache with room for `capacity` positions, and the cross-attention
        keys/values of memory."""
        cross_key, cross_value = self.cross_attn.project_key_value(memory)
        return LayerCache(KeyValueBuffer.empty_like(cross_key, capacity), 0, cross_key, cross_value)

    def forward(
        self,
        x: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor,
        tgt_mask: torch.Tensor | None,
        need_weights: bool,
        cache: LayerCache | None = None,
        self_probe: SublayerProbe | None = None,
        cross_probe: SublayerProbe | None = None,
        position_bias: torch.Tensor | None = None,
        queries_from: int = 0,
    ) -> tuple[torch.Tensor, torch.Tensor | None, torch.Tensor | None, LayerCache | None]:
        """With a cache, x holds only the new positions and tgt_mask covers them over all keys; position_bias, the
        relative positions' bias of those queries over all keys. queries_from, if given, is the first of x's
        positions whose output is wanted: the ones before it give only their self-attention keys and values, and
        the output holds the positions from it on (a caller that reads one position computes the rest once)."""
        every_position = x
        if queries_from and (self_probe, cross_probe) != (None, None):
            raise ValueError("a layer computed at its last positions only is not probed: the probe would see those")
        if queries_from:
            x = x[:, queries_from:]
            tgt_mask = None if tgt_mask is None else tgt_mask[..., queries_from:, :]
            position_bias = None if position_bias is None else position_bias[..., queries_from:, :]

        def self_attend(h: torch.Tensor) -> tuple:
            if queries_from:
                query = self.self_attn.split_heads(self.self_attn.q_proj(h))
                key, value = self.self_attn.project_key_value(self.self_block.sublayer_input(every_position))
            else:
                query, key, value = self.self_attn.project_query_key_value(h)
            extended = None
            if cache is not None:
                extended = cache.extended(key, value)
                key, value = extended.self_key, extended.self_value
            out, p_attn = probed_attend(
                self.self_attn, h, h, key, value, tgt_mask, need_weights, self_probe, query, position_bias, stream=x
            )
            return out, p_attn, extended

        def cross_attend(h: torch.Tensor) -> tuple:
            if cache is None:
                key, value = self.cross_attn.project_key_value(memory)
            else:
                key, value = cache.cross_key, cache.cross_value
            return probed_attend(self.cross_attn, h, memory, key, value, src_mask, need_weights, cross_probe, stream=x)

        # Each block's sublayer is called while `x` is that block's input (the cross block's is the self block's
        # output): the stream its record keeps.
        x, self_weights, new_cache = self.self_block(x, self_attend)
        x, cross_weights = self.cross_block(x, cross_attend)
        x, *_ = self.ff_block(x, lambda h: (self.feed_forward(h),))
        return x, self_weights, cross_weights, new_cache
