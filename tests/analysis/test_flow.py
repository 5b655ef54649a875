"""Attention flow, the encoder's and through the decoder, against networkx's maximum flow (the decoder's on a network
built here from the equations), and what it must be where every path is known."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

from transformer.analysis.decoder_flow import decoder_flow
from transformer.analysis.rollout import FlowTooLong, attention_flow, flow_capacities, rollout
from transformer.decoding.greedy import decode_with_chooser
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint


def networkx_flow(encoder_self: np.ndarray) -> np.ndarray:
    """The authors' computation (compute_node_flow) with networkx's Edmonds-Karp on float capacities."""
    layers, _, size, _ = encoder_self.shape
    graph = nx.from_numpy_array(flow_capacities(encoder_self), create_using=nx.DiGraph, edge_attr="capacity")
    top = layers * size
    flows = np.array(
        [
            [nx.maximum_flow_value(graph, top + i, j, flow_func=nx.algorithms.flow.edmonds_karp) for j in range(size)]
            for i in range(size)
        ]
    )
    return flows / flows.sum(axis=-1, keepdims=True)


def random_maps(layers: int, heads: int, size: int, seed: int) -> np.ndarray:
    return np.random.default_rng(seed).dirichlet(np.ones(size) * 0.3, size=(layers, heads, size))


@pytest.mark.parametrize("seed", [0, 1])
def test_flow_equals_networkx_maximum_flow_on_the_same_network(seed):
    maps = random_maps(3, 2, 7, seed)
    np.testing.assert_allclose(attention_flow(maps), networkx_flow(maps), atol=1e-6)


def test_flow_of_the_default_model_equals_networkx_and_each_row_is_a_share():
    checkpoint = load_checkpoint(DEFAULT_CHECKPOINT)
    result = decode_with_chooser(checkpoint.model, checkpoint.tokenizer, "The black cat is sleeping on the red chair.")
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


def mixed(maps: np.ndarray) -> np.ndarray:
    """One layer's mean over heads, half and half with the identity, rows summing to 1."""
    layer = 0.5 * maps.mean(axis=0) + 0.5 * np.eye(*maps.shape[-2:])
    return layer / layer.sum(axis=-1, keepdims=True)


def networkx_decoder_flow(encoder_self: np.ndarray, decoder_self: np.ndarray, cross: np.ndarray) -> np.ndarray:
    """The module's docstring as a networkx graph of named nodes, each flow by Edmonds-Karp on float capacities."""
    graph = nx.DiGraph()
    encoder_layers, decoder_layers = len(encoder_self), len(decoder_self)
    sources, targets = encoder_self.shape[-1], decoder_self.shape[-1]
    for layer in range(encoder_layers):
        weights = mixed(encoder_self[layer])
        for i in range(sources):
            for j in range(sources):
                graph.add_edge(("encoder", layer + 1, i), ("encoder", layer, j), capacity=weights[i, j])
    for layer in range(decoder_layers):
        weights, reads = mixed(decoder_self[layer]), cross[layer].mean(axis=0)
        for t in range(targets):
            for u in range(t + 1):  # the masked rows put nothing past t
                graph.add_edge(("self", layer, t), ("stream", layer, u), capacity=weights[t, u])
            graph.add_edge(("stream", layer + 1, t), ("self", layer, t), capacity=0.5)
            for j in range(sources):
                graph.add_edge(("stream", layer + 1, t), ("encoder", encoder_layers, j), capacity=0.5 * reads[t, j])
    sinks = [("encoder", 0, j) for j in range(sources)] + [("stream", 0, u) for u in range(targets)]
    flows = np.array(
        [
            [
                nx.maximum_flow_value(graph, ("stream", decoder_layers, t), sink) if sink in graph else 0.0
                for sink in sinks
            ]
            for t in range(targets)
        ]
    )
    return flows / flows.sum(axis=-1, keepdims=True)


def random_rows(rng: np.random.Generator, shape: tuple[int, ...], causal: bool = False) -> np.ndarray:
    rows = rng.dirichlet(np.ones(shape[-1]) * 0.3, size=shape[:-1])
    if causal:  # a masked self-attention row t weighs positions up to t only
        rows = np.tril(rows)
        rows /= rows.sum(axis=-1, keepdims=True)
    return rows


@pytest.mark.parametrize("seed", [0, 1])
def test_decoder_flow_equals_networkx_maximum_flow_on_the_network_of_its_definition(seed):
    rng = np.random.default_rng(seed)
    encoder_self = random_rows(rng, (2, 2, 5, 5))
    decoder_self = random_rows(rng, (2, 2, 4, 4), causal=True)
    cross = random_rows(rng, (2, 2, 4, 5))
    found = decoder_flow(encoder_self, decoder_self, cross)
    assert found.shape == (4, 5 + 4) and (found >= 0).all() and np.allclose(found.sum(axis=-1), 1, atol=1e-6)
    np.testing.assert_allclose(found, networkx_decoder_flow(encoder_self, decoder_self, cross), atol=1e-6)


def test_with_every_token_attending_to_itself_a_step_draws_half_on_what_it_reads_and_half_on_itself():
    """Self-attention on the diagonal leaves one path per token: step t's flow to source j is half the
    cross-attention it put on j, and the other half goes down its own residual to its own input token."""
    rng = np.random.default_rng(3)
    sources, targets = 6, 4
    encoder_self = np.broadcast_to(np.eye(sources), (2, 3, sources, sources))
    decoder_self = np.broadcast_to(np.eye(targets), (1, 3, targets, targets))
    cross = random_rows(rng, (1, 3, targets, sources))
    found = decoder_flow(encoder_self, decoder_self, cross)
    np.testing.assert_allclose(found[:, :sources], 0.5 * cross[0].mean(axis=0), atol=1e-7)
    np.testing.assert_allclose(found[:, sources:], 0.5 * np.eye(targets), atol=1e-7)


def test_the_default_models_flow_through_the_decoder_equals_networkx():
    checkpoint = load_checkpoint(DEFAULT_CHECKPOINT)
    result = decode_with_chooser(checkpoint.model, checkpoint.tokenizer, "The black cat sleeps.")
    maps = [result.encoder_self.numpy(), result.decoder_self.numpy(), result.cross.numpy()]
    found = decoder_flow(*maps)
    np.testing.assert_allclose(found, networkx_decoder_flow(*(m.astype(np.float64) for m in maps)), atol=1e-5)
    chat = result.tgt_pieces.index("▁chat")
    assert result.src_pieces[int(found[chat, : len(result.src_ids)].argmax())] == "▁cat"


def test_a_long_pair_is_refused_with_the_reason():
    rng = np.random.default_rng(0)
    with pytest.raises(FlowTooLong, match="up to 4 tokens a side \\(this pair has 5 and 3\\)"):
        decoder_flow(
            random_rows(rng, (1, 1, 5, 5)), random_rows(rng, (1, 1, 3, 3), True), random_rows(rng, (1, 1, 3, 5)), 4
        )
