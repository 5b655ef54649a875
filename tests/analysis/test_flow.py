"""Attention flow against networkx's maximum flow on the same network, and what it must be on one layer."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from transformer.analysis.rollout import FlowTooLong, attention_flow, flow_capacities, rollout
from transformer.decoding.greedy import decode
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint


def networkx_flow(encoder_self: np.ndarray) -> np.ndarray:
    """The authors' computation (compute_node_flow) with networkx's Edmonds-Karp on float capacities."""
    layers, _, size, _ = encoder_self.shape
    graph = nx.from_numpy_array(flow_capacities(encoder_self), create_using=nx.DiGraph, edge_attr="capacity")
    top = layers * size
    flows = np.array(
        [[nx.maximum_flow_value(graph, top + i, j, flow_func=nx.algorithms.flow.edmonds_karp) for j in range(size)]
         for i in range(size)]
    )  # fmt: skip
    return flows / flows.sum(axis=-1, keepdims=True)


def random_maps(layers: int, heads: int, size: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).dirichlet(np.ones(size) * 0.3, size=(layers, heads, size))


@pytest.mark.parametrize("seed", [0, 1])
def test_flow_equals_networkx_maximum_flow_on_the_same_network(seed):
    maps = random_maps(3, 2, 7, seed)
    np.testing.assert_allclose(attention_flow(maps), networkx_flow(maps), atol=1e-6)


def test_flow_of_the_default_model_equals_networkx_and_each_row_is_a_share():
    checkpoint = load_checkpoint(DEFAULT_CHECKPOINT)
    result = decode(checkpoint.model, checkpoint.tokenizer, "The black cat is sleeping on the red chair.")
    maps = result.encoder_self.numpy().astype(np.float64)
    found = attention_flow(maps)
    np.testing.assert_allclose(found, networkx_flow(maps), atol=1e-6)
    assert (found >= 0).all() and np.allclose(found.sum(-1), 1, atol=1e-6)
    assert not np.allclose(found, rollout(maps), atol=1e-3)  # over several layers, flow is not rollout


def test_over_one_layer_flow_is_the_layers_mixed_attention_as_rollout():
    maps = random_maps(1, 3, 6, 2)
    np.testing.assert_allclose(attention_flow(maps), rollout(maps), atol=1e-6)


def test_a_long_input_is_refused_with_the_reason():
    with pytest.raises(FlowTooLong, match="up to 10 tokens \\(this one has 11\\)"):
        attention_flow(random_maps(2, 1, 11, 0), max_tokens=10)
