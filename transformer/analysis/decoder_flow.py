"""Attention flow through the whole encoder-decoder: how much each output step draws on each source token and on
each token of the decoder's input, by maximum flow (Abnar and Zuidema 2020, carried into the decoder).

Abnar and Zuidema define flow for an encoder alone (rollout.attention_flow). Here the network goes on through the
decoder with the same two rules: every attention sublayer is its heads' mean mixed half and half with the identity
(the residual), and an edge's capacity is that mixed weight. A decoder layer has two such sublayers:
- masked self-attention: from position t after it, to the positions u ≤ t before it (0.5 to t itself, plus half of
  the mean weight on each u, the row renormalised, as rollout.mixed_layers);
- cross-attention: from position t after it, 0.5 to t before it (the residual) and 0.5 times the mean weight on
  each source position j to the encoder's last layer at j (the memory every cross-attention reads).
The encoder's layers are rollout.attention_flow's. Row t is the maximum flow from the decoder's last layer at t to
each source token at the encoder's input and to each decoder input token, each alone, divided by the row's sum
(as the encoder's flow is): the source tokens first, then the decoder input's, as ALTI+'s rows are laid out. Layer
norms and the feed-forward layers are left out, as in the paper: the method reads attention only.
"""

from __future__ import annotations

import numpy as np

from transformer.analysis.rollout import FlowTooLong, flow_capacities, flow_shares, mixed_layers

MAX_DECODER_FLOW_TOKENS = 48  # on each side: (S + T) flows a step over a network of (L_enc S^2 + L_dec (T^2 + T S))


def decoder_flow_capacities(encoder_self: np.ndarray, decoder_self: np.ndarray, cross: np.ndarray) -> np.ndarray:
    """The network's capacities, nodes numbered: the encoder's (L_enc + 1) x S layer by layer from its input, then
    the decoder's input (T), then for each decoder layer its positions after self-attention (T) and after
    cross-attention (T). encoder_self (L_enc, H, S, S), decoder_self (L_dec, H, T, T), cross (L_dec, H, T, S)."""
    encoder_layers, _, sources, _ = encoder_self.shape
    decoder_layers, _, targets, _ = decoder_self.shape
    decoder_start = (encoder_layers + 1) * sources
    nodes = decoder_start + (2 * decoder_layers + 1) * targets
    capacities = np.zeros((nodes, nodes))
    capacities[:decoder_start, :decoder_start] = flow_capacities(encoder_self)  # the encoder's own flow network
    memory = slice(encoder_layers * sources, decoder_start)
    self_mixed = mixed_layers(decoder_self.astype(np.float64))
    cross_mean = cross.astype(np.float64).mean(axis=1)
    for layer in range(decoder_layers):
        before = decoder_start + 2 * layer * targets  # the layer's input: the decoder's input, or the layer below
        after_self, after_cross = before + targets, before + 2 * targets
        capacities[after_self : after_self + targets, before : before + targets] = self_mixed[layer]
        rows = np.arange(targets)
        capacities[after_cross + rows, after_self + rows] = 0.5
        capacities[after_cross : after_cross + targets, memory] = 0.5 * cross_mean[layer]
    return capacities


def decoder_flow(
    encoder_self: np.ndarray,
    decoder_self: np.ndarray,
    cross: np.ndarray,
    max_tokens: int | None = MAX_DECODER_FLOW_TOKENS,
) -> np.ndarray:
    """(T, S + T): row t, the shares of each source token and then of each decoder input token in the maximum flows
    out of the decoder's last layer at t. FlowTooLong where a side is longer than max_tokens (None: no bound)."""
    sources, targets = encoder_self.shape[-1], decoder_self.shape[-1]
    if max_tokens is not None and max(sources, targets) > max_tokens:
        raise FlowTooLong(
            f"attention flow through the decoder solves (source + output) maximum-flow problems for each output "
            f"token; it is read for up to {max_tokens} tokens a side (this pair has {sources} and {targets})"
        )
    capacities = decoder_flow_capacities(encoder_self, decoder_self, cross)
    decoder_input = (encoder_self.shape[0] + 1) * sources
    top = capacities.shape[0] - targets
    sinks = [*range(sources), *range(decoder_input, decoder_input + targets)]
    return flow_shares(capacities, range(top, top + targets), sinks)
