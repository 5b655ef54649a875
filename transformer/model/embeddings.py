"""Token embeddings and positions (sections 3.4 and 3.5): the fixed sinusoids, a learned table, or T5's relative
positions' buckets."""

from __future__ import annotations

import math

import torch
from torch import nn

from transformer.model.config import PRECOMPUTED_POSITIONS, TransformerConfig
from transformer.model.layers import make_norm


def sinusoidal_table(
    max_len: int, d_model: int, layout: str = "interleaved", start: int = 0, frequencies: str = "paper"
) -> torch.Tensor:
    """PE(pos, 2i) = sin(pos / 10000^(2i/d)), PE(pos, 2i+1) = cos(...) for pos in [start, max_len): (rows, d_model).

    The "halves" layout (Marian's, M2M100's) holds the same sines in the first ceil(d/2) dimensions, the cosines
    after; "tensor2tensor" frequencies (M2M100's) are 10000^(-i/(k-1)) for the k = ceil(d/2) sines.
    Computed in float64 and rounded once, so that every implementation of FORMAT.md agrees to the last bit
    (each element on its own: a row is the same whichever range it is computed in).
    """
    position = torch.arange(start, max_len, dtype=torch.float64)[:, None]
    if frequencies == "tensor2tensor":
        count = (d_model + 1) // 2
        frequency = torch.exp(torch.arange(count, dtype=torch.float64) * (-math.log(10000.0) / (count - 1)))
    else:
        frequency = torch.exp(torch.arange(0, d_model, 2, dtype=torch.float64) * (-math.log(10000.0) / d_model))
    sines, cosines = torch.sin(position * frequency), torch.cos(position * frequency[: d_model // 2])
    if layout == "halves":
        return torch.cat([sines, cosines], dim=1).float()
    table = torch.zeros(len(position), d_model, dtype=torch.float64)
    table[:, 0::2] = sines
    table[:, 1::2] = cosines
    return table.float()


def relative_buckets(relative: torch.Tensor, bidirectional: bool, buckets: int, max_distance: int) -> torch.Tensor:
    """T5's bucket of each relative position (key position minus query position): exact for small distances, then
    logarithmically wider up to max_distance, the last bucket beyond; a decoder's (not bidirectional) sees the past
    only. Computed as Mesh TensorFlow and transformers do, so that every bucket agrees with theirs."""
    bucket = torch.zeros_like(relative)
    if bidirectional:
        buckets //= 2
        bucket += (relative > 0).long() * buckets
        distance = relative.abs()
    else:
        distance = -torch.minimum(relative, torch.zeros_like(relative))
    exact = buckets // 2
    large = exact + (torch.log(distance.float() / exact) / math.log(max_distance / exact) * (buckets - exact)).long()
    large = torch.minimum(large, torch.full_like(large, buckets - 1))
    return bucket + torch.where(distance < exact, distance, large)


class Embeddings(nn.Module):
    """Token embeddings scaled by sqrt(d_model) (section 3.4), unless the config says otherwise."""

    def __init__(self, vocab_size: int, config: TransformerConfig) -> None:
        super().__init__()
        self.lookup = nn.Embedding(vocab_size, config.d_model)
        self.scale = math.sqrt(config.d_model) if config.scale_embedding else 1.0

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        return self.lookup(ids) * self.scale


class PositionalEncoding(nn.Module):
    """Adds position information: the fixed sinusoids of section 3.5, or a learned table; then, where the config
    says so, a layer norm (BART's and mBART's embedding norm). With relative positions (T5's) it adds nothing: its
    bias per head and bucket of relative position joins the self-attention scores (attention_bias)."""

    def __init__(self, config: TransformerConfig, bidirectional: bool = True) -> None:
        super().__init__()
        self.relative = config.positional == "relative"
        self.bidirectional, self.buckets, self.max_distance = (
            bidirectional,
            config.relative_buckets,
            config.relative_max_distance,
        )
        self.learned = config.positional == "learned"
        self.max_len, self.layout = config.max_len, config.sinusoid_layout
        self.frequencies = config.sinusoid_frequencies
        self.first = config.position_offset  # the table's row of a sequence's first position
        self.d_model = config.d_model
        if self.relative:
            self.relative_bias = nn.Parameter(torch.zeros(config.relative_buckets, config.n_heads))
        elif self.learned:
            self.table = nn.Parameter(torch.zeros(self.first + config.max_len, config.d_model))
        else:
            self.register_buffer("table", torch.empty(0), persistent=False)
            self.compute_fixed_table()
        self.norm = make_norm(config) if config.embedding_norm else nn.Identity()
        self.dropout = nn.Dropout(config.dropout)

    def compute_fixed_table(self) -> None:
        """(Re)computes the sinusoid rows kept ready (never stored in a file: a model built on the meta device
        needs them made here, once its weights are in); learned and relative positions have none. Computed on the
        meta device, they would import torch._dynamo (1.2 s) for a table of no values."""
        if not (self.relative or self.learned or torch.get_default_device().type == "meta"):
            rows = min(self.first + self.max_len, PRECOMPUTED_POSITIONS)
            self.table = self._sinusoids(rows, self.d_model)

    def _sinusoids(self, end: int, d_model: int, start: int = 0) -> torch.Tensor:
        return sinusoidal_table(end, d_model, self.layout, start, self.frequencies)

    def forward(self, x: torch.Tensor, offset: int | torch.Tensor = 0) -> torch.Tensor:
        """x (B, T, d_model) at positions offset .. offset + T - 1; offset a (B,) tensor gives each row its own."""
        if self.relative:
            return self.dropout(self.norm(x))
        if isinstance(offset, int):
            return self.dropout(self.norm(x + self.rows(offset, x.size(1))))
        positions = offset[:, None] + torch.arange(x.size(1), device=offset.device)
        return self.dropout(self.norm(x + self.rows(0, int(positions.max()) + 1)[positions]))

    def attention_bias(self, query_positions: torch.Tensor, key_positions: torch.Tensor) -> torch.Tensor | None:
        """The relative positions' bias (B, H, T_q, T_k) for queries and keys at these positions, (B, T_q) and
        (B, T_k); None without relative positions."""
        if not self.relative:
            return None
        relative = key_positions[:, None, :] - query_positions[:, :, None]
        buckets = relative_buckets(relative, self.bidirectional, self.buckets, self.max_distance)
        return self.relative_bias[buckets].permute(0, 3, 1, 2)

    def rows(self, offset: int, length: int) -> torch.Tensor:
        """The encodings of positions offset .. offset + length - 1 (table rows from position_offset on):
        (length, d_model)."""
        if offset + length > self.max_len:
            raise ValueError(f"sequence of {offset + length} positions exceeds max_len {self.max_len}")
        start, end = self.first + offset, self.first + offset + length
        if end <= self.table.size(0):
            return self.table[start:end]
        return self._sinusoids(end, self.table.size(1), start).to(self.table)
