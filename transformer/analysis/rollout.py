"""Attention rollout (Abnar and Zuidema 2020): how input tokens flow through the encoder layers."""

from __future__ import annotations

import numpy as np


def rollout(encoder_self: np.ndarray) -> np.ndarray:
    """Attention rollout (Abnar and Zuidema 2020) over the encoder layers.

    Each layer's mean over heads is mixed half and half with the identity (the residual
    path), rows renormalised, and the layers multiplied from the first: row i of the
    result says how much of each input token flowed into position i of the last layer.
    encoder_self (L, H, S, S) -> (S, S).
    """
    size = encoder_self.shape[-1]
    flow = np.eye(size, dtype=np.float64)
    for layer in encoder_self:
        mixed = 0.5 * layer.mean(axis=0) + 0.5 * np.eye(size)
        mixed /= mixed.sum(axis=-1, keepdims=True)
        flow = mixed @ flow
    return flow.astype(np.float32)
