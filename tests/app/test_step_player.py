"""The step view's packing: what the browser unpacks is the model's weight to within one quantum."""

from __future__ import annotations

import numpy as np

from ui.players.packing import QUANTUM, packed, unpacked


def test_weights_travel_to_within_one_quantum_and_nan_stays_nan():
    weights = np.array([0.0, 1.0, 0.123456, 1 / 3, np.nan, 1.5, -0.2], dtype=np.float32)
    back = unpacked(packed(weights))
    np.testing.assert_allclose(back[:4], weights[:4], atol=0.5 / QUANTUM)
    assert np.isnan(back[4]) and back[5] == 1.0 and back[6] == 0.0  # out of range is held to [0, 1]
    assert len(packed(np.zeros(300))) == 800  # 2 bytes a weight, in base64
