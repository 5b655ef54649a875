"""Numbers for the browser players, packed: weights as uint16 fractions of 1 in base64, probabilities rounded."""

from __future__ import annotations

import base64

import numpy as np

QUANTUM = 65534  # weights travel as uint16 fractions of 1: within 8e-6 of the model's own, 2 bytes each
NOT_A_NUMBER = 65535  # a weight that is NaN (a broken checkpoint's), drawn as such


def packed(values: np.ndarray) -> str:
    """Weights in [0, 1] as base64 little-endian uint16 (JSON of float64 would be ~9x bigger); NaN kept."""
    values = np.asarray(values, dtype=np.float64)
    fractions = np.rint(np.clip(np.nan_to_num(values), 0.0, 1.0) * QUANTUM)
    quantized = np.where(np.isnan(values), NOT_A_NUMBER, fractions).astype("<u2")
    return base64.b64encode(quantized.tobytes()).decode("ascii")


def unpacked(text: str) -> np.ndarray:
    """The inverse of `packed` (what the browser does), for tests."""
    quantized = np.frombuffer(base64.b64decode(text), dtype="<u2")
    return np.where(quantized == NOT_A_NUMBER, np.nan, quantized / QUANTUM)


def rounded(values: np.ndarray) -> list:
    """Probabilities as JSON numbers to 4 places; NaN (a broken checkpoint's) as null, which JSON can hold."""
    values = np.asarray(values, dtype=np.float64)
    return np.where(np.isnan(values), None, np.round(values, 4)).tolist()
