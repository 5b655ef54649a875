"""Attention masks (section 3.2.3): True where a query may attend to a key.

Every mask broadcasts against scores shaped (batch, heads, query, key).
"""

from __future__ import annotations

import torch


def padding_mask(ids: torch.Tensor, pad_id: int) -> torch.Tensor:
    """Hides padding keys: (B, S) token ids -> (B, 1, 1, S)."""
    return (ids != pad_id)[:, None, None, :]


def subsequent_mask(size: int, device: torch.device | str | None = None) -> torch.Tensor:
    """Hides future positions, so position i sees only 0..i: (1, 1, size, size)."""
    return torch.ones(size, size, dtype=torch.bool, device=device).tril()[None, None]


def target_mask(tgt: torch.Tensor, pad_id: int) -> torch.Tensor:
    """The decoder self-attention mask: padding and look-ahead combined, (B, 1, T, T).

    Position 0 is the start token, never padding, even where the start token is the pad id (Marian's).
    """
    keys = padding_mask(tgt, pad_id).clone()
    keys[..., 0] = True
    return keys & subsequent_mask(tgt.size(1), tgt.device)
