"""Attention rollout and attention flow (Abnar and Zuidema 2020): how input tokens flow through the encoder layers.

Both read each layer's mean over heads mixed half and half with the identity (the residual), rows renormalised.
Rollout multiplies the layers (every path counts). Flow treats them as a flow network: a node per token per layer,
the input's tokens at the bottom; position i of layer l + 1 has an edge to position j of layer l whose capacity is
l's mixed attention from i to j; row i of the flow is the maximum flow from position i of the last layer to each
input token, divided by the row's sum, as the authors' code (`compute_node_flow`) does: a token's share is bounded
by the narrowest layer it passes.

The maximum flows are SciPy's (Dinic's algorithm over integer capacities: the weights are scaled by 2^29 and
rounded, so each flow is exact to a few parts in 10^9); networkx's maximum_flow gives the same on float
capacities, about 60 times slower (the tests compare the two).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import maximum_flow


def mixed_layers(encoder_self: np.ndarray) -> np.ndarray:
    """Each layer's mean over heads mixed half and half with the identity (the residual), rows renormalised:
    (L, H, S, S) -> (L, S, S), what rollout multiplies and flow's capacities are."""
    size = encoder_self.shape[-1]
    mixed = 0.5 * encoder_self.mean(axis=1) + 0.5 * np.eye(size)
    return mixed / mixed.sum(axis=-1, keepdims=True)


def rollout(encoder_self: np.ndarray) -> np.ndarray:
    """Attention rollout (Abnar and Zuidema 2020) over the encoder layers: the mixed layers multiplied from the
    first; row i of the result says how much of each input token flowed into position i of the last layer.
    encoder_self (L, H, S, S) -> (S, S).
    """
    flow = np.eye(encoder_self.shape[-1], dtype=np.float64)
    for mixed in mixed_layers(encoder_self.astype(np.float64)):
        flow = mixed @ flow
    return flow.astype(np.float32)


SCALE = 2**29  # capacities (at most 1) as integers: below int32's limit, and any flow too (a row sums to 1)
MAX_FLOW_TOKENS = 48  # S x S flows over a network of L x S x S edges: past it, seconds a page (docs/performance.md)


class FlowTooLong(ValueError):
    """An input too long for attention flow at a page's pace."""


def flow_capacities(encoder_self: np.ndarray) -> np.ndarray:
    """The flow network's capacities, (L + 1) S x (L + 1) S, nodes numbered layer by layer from the input's tokens:
    the edge from position i of layer l + 1 to position j of layer l carries layer l's mixed attention from i to j."""
    layers, _, size, _ = encoder_self.shape
    capacities = np.zeros(((layers + 1) * size, (layers + 1) * size))
    for layer, mixed in enumerate(mixed_layers(encoder_self.astype(np.float64))):
        capacities[(layer + 1) * size : (layer + 2) * size, layer * size : (layer + 1) * size] = mixed
    return capacities


def attention_flow(encoder_self: np.ndarray, max_tokens: int | None = MAX_FLOW_TOKENS) -> np.ndarray:
    """Attention flow over the encoder's layers: encoder_self (L, H, S, S) -> (S, S), row i the shares of the input
    tokens in the maximum flows into position i of the last layer. FlowTooLong past max_tokens (None: no bound)."""
    layers, _, size, _ = encoder_self.shape
    if max_tokens is not None and size > max_tokens:
        raise FlowTooLong(
            f"attention flow solves {size} x {size} maximum-flow problems here; it is drawn for inputs of up to "
            f"{max_tokens} tokens (this one has {size}): rollout shows the same layers at any length"
        )
    top = layers * size
    return flow_shares(flow_capacities(encoder_self), range(top, top + size), range(size))


def flow_shares(capacities: np.ndarray, sources: Sequence[int], sinks: Sequence[int]) -> np.ndarray:
    """(sources, sinks): the maximum flow from each source node to each sink node alone, over a network of these
    capacities (at most 1 each), each row divided by its sum."""
    network = csr_matrix(np.rint(capacities * SCALE).astype(np.int32))
    flows = np.array(
        [[maximum_flow(network, source, sink, method="dinic").flow_value for sink in sinks] for source in sources],
        dtype=np.float64,
    )
    return (flows / np.maximum(flows.sum(axis=-1, keepdims=True), 1)).astype(np.float32)
