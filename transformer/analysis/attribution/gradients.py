"""Integrated gradients (Sundararajan et al. 2017) and gradient x input of a decode's output scores with respect to
the token embeddings of the source and of the target prefix.

The model is differentiated through embeddings passed to encode/decode, never through hooks on the shared modules
(which would fire in every visitor's forward); torch.autograd.grad throughout, so no gradient accumulates on the
model's parameters. The tests hold integrated gradients to captum's.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from transformer.decoding.result import model_device
from transformer.model.encoder_decoder import Transformer
from transformer.model.masks import padding_mask, target_mask

DEFAULT_STEPS = 32  # interpolation steps of integrated gradients
# The midpoint rule: along the straight path a log-probability often jumps within a few steps (from about
# -14 at the zero baseline to about 0), where Gauss-Legendre's uneven points missed it by up to 15% of the
# difference on the caption model against 4% for midpoints (32 steps); on en-fr-general 7% against 11% at 32
# steps, but 19% against 14% at 16 (benchmarks/attribution_speed.py, docs/performance.md).
METHOD = "riemann_middle"  # captum's name for it
ROWS_PER_PASS = 4096  # token positions per forward pass: bounds the memory one attribution takes
MIN_STEPS = 4  # fewer interpolation steps than this say little: such a request is refused instead


class AttributionStopped(Exception):
    """The caller asked the attribution to stop (its visitor left): nothing was returned."""


def interpolation_steps(output_steps: int, tokens: int, budget: int) -> int | None:
    """The interpolation steps integrated gradients can take for a decode within `budget` token-steps of work
    (output steps x interpolation steps x source and output tokens, what the passes cost), at most DEFAULT_STEPS;
    None when even MIN_STEPS would exceed it."""
    fitting = budget // max(1, output_steps * tokens)
    return min(DEFAULT_STEPS, fitting) if fitting >= MIN_STEPS else None


def source_integrated_gradients(model: Transformer, src_ids: list[int], tgt_ids: list[int], n_steps: int) -> np.ndarray:
    """Integrated gradients of every output token's log-probability over the source tokens: (T, S)."""
    steps, tokens = torch.arange(len(tgt_ids)), torch.tensor(tgt_ids)
    return integrated_gradients(model, src_ids, tgt_ids, steps, tokens, None, n_steps).source


def integrated_gradients(
    model, src_ids, tgt_ids, steps, tokens, foils, n_steps, should_stop=lambda: False, progress=None
):
    """Integrated gradients along the straight path from zero embeddings, by the midpoint rule (METHOD), for each
    (step, token[, foil]), with the score at the path's two ends.

    The decoder is teacher forced, so one forward pass at a few interpolation points serves several output steps;
    each step then takes a backward pass of its own through it, from its own position. A causal decoder's later
    positions change nothing before them, so the steps go in groups by position (`_position_groups`), each
    group's decoder pass cut after its last step. Forward passes made anew for each step, as captum's
    `IntegratedGradients` makes them, took 1.4 times as long on the 2-core CPU.
    """
    src, decoder_input, embedded = embedded_inputs(model, src_ids, tgt_ids[: int(steps.max()) + 1], 1)
    embedded, device = tuple(e.detach() for e in embedded), src.device
    positions, tokens = steps.tolist(), tokens.to(device)
    foils = None if foils is None else foils.to(device)
    totals = [torch.zeros(len(positions), *e.shape[1:], device=device) for e in embedded]
    points = (torch.arange(n_steps, dtype=torch.float64) + 0.5) / n_steps  # each weighs 1 / n_steps
    rows = max(1, ROWS_PER_PASS // (src.size(1) + decoder_input.size(1)))
    passes, groups, done = torch.split(points, rows), _position_groups(positions), 0
    for alphas in passes:
        scaled = tuple((alphas.to(device, e.dtype)[:, None, None] * e).requires_grad_() for e in embedded)
        with torch.enable_grad():
            memory, mask = encoder_states(model, src, scaled[0])
            for group, length in groups:
                hidden = decoder_states(model, decoder_input[:, :length], memory, mask, scaled[1][:, :length])
                for index in group:
                    if should_stop():
                        raise AttributionStopped()
                    outward = torch.zeros_like(hidden)
                    outward[:, positions[index]] = _score_gradient(
                        model, hidden[:, positions[index]], index, tokens, foils
                    )
                    for total, gradient in zip(totals, torch.autograd.grad(hidden, scaled, outward, retain_graph=True)):
                        total[index] += gradient.sum(0) / n_steps
                    done += 1
                    if progress:  # in backward passes: one output step at a few interpolation points
                        progress(done, len(positions) * len(passes))
    source, prefix = ((total * e).sum(-1).float().cpu().numpy() for total, e in zip(totals, embedded))
    with torch.no_grad():
        ends = tuple(torch.cat([e, torch.zeros_like(e)]) for e in embedded)
        ends = decoder_states(model, decoder_input, *encoder_states(model, src, ends[0]), ends[1])
        steps = steps.to(device)
        at_input, at_baseline = (step_scores(model, end[steps], tokens, foils).float().cpu().numpy() for end in ends)
    prefix = np.pad(prefix, ((0, 0), (0, len(tgt_ids) - prefix.shape[1])))
    return Integrated(source, prefix, at_input, at_baseline)


def _position_groups(positions: list[int]) -> list[tuple[list[int], int]]:
    """The output steps' indices in about sqrt(n) groups of neighbouring positions, each with its decoder input's
    length (to its last position). A group costs a decoder pass that long, and each step a backward pass as long:
    with g groups over n positions the decoder's work is about n g / 2 + n^2 / (2 g), least at g = sqrt(n)."""
    order = sorted(range(len(positions)), key=positions.__getitem__)
    size = max(1, round(math.sqrt(len(order))))
    groups = [order[start : start + size] for start in range(0, len(order), size)]
    return [(group, positions[group[-1]] + 1) for group in groups]


@dataclass(frozen=True)
class Integrated:
    """Integrated gradients for N (step, token[, foil]) rows, and the attributed score at the path's ends."""

    source: np.ndarray  # (N, S)
    prefix: np.ndarray  # (N, T)
    at_input: np.ndarray  # (N,) f(input)
    at_baseline: np.ndarray  # (N,) f(baseline): every token embedding zero

    @property
    def delta(self) -> np.ndarray:
        """captum's convergence delta: the attributions' sum minus f(input) - f(baseline)."""
        return self.source.sum(1) + self.prefix.sum(1) - (self.at_input - self.at_baseline)


def _score_gradient(model, states: torch.Tensor, index: int, tokens, foils) -> torch.Tensor:
    """The gradient of step `index`'s score with respect to its decoder states (rows, d): the generator's part of
    the backward pass, taken on its own so that the rest runs from the decoder's output."""
    states = states.detach().requires_grad_()
    rows = len(states)
    chosen = tokens[index].expand(rows)
    foil = None if foils is None else foils[index].expand(rows)
    (gradient,) = torch.autograd.grad(step_scores(model, states, chosen, foil).sum(), states)
    return gradient


def gradient_x_input(model, src_ids, tgt_ids, steps, tokens):
    src, decoder_input, embedded = embedded_inputs(model, src_ids, tgt_ids, len(steps))
    from captum.attr import InputXGradient  # imported when used: with matplotlib, slow (docs/performance.md)

    method = InputXGradient(scorer(model, src, decoder_input))
    with torch.enable_grad():
        attributions = method.attribute(embedded, additional_forward_args=(steps.to(src.device), tokens.to(src.device)))
    return tuple(a.sum(-1).detach().float().cpu().numpy() for a in attributions)


def scorer(model: Transformer, src: torch.Tensor, decoder_input: torch.Tensor, contrastive: bool = False) -> Callable:
    """The function attributed (captum's forward function), of token embeddings (N, S, d) and (N, T, d).

    score(src_embedded, tgt_embedded, steps, tokens[, foils]) is, for each row n, log p(tokens[n]) at output
    step steps[n] (minus log p(foils[n]) when contrastive), with src and decoder_input's own token ids for
    the masks.
    """

    def score(src_embedded, tgt_embedded, steps, tokens, foils=None):
        hidden = decoder_states(model, decoder_input, *encoder_states(model, src, src_embedded), tgt_embedded)
        return step_scores(model, hidden[torch.arange(len(hidden), device=hidden.device), steps], tokens, foils)

    return score


def encoder_states(model: Transformer, src: torch.Tensor, src_embedded) -> tuple[torch.Tensor, torch.Tensor]:
    """The encoder's memory (N, S, d) for N rows of token embeddings of src (1, S), and its padding mask."""
    source = src.expand(src_embedded.size(0), -1)
    mask = padding_mask(source, model.config.pad_id)
    return model.encode(source, mask, embedded=src_embedded).memory, mask


def decoder_states(model: Transformer, decoder_input: torch.Tensor, memory, mask, tgt_embedded) -> torch.Tensor:
    """The decoder's output (N, T, d) over the encoder's memory for N rows of token embeddings of decoder_input
    (1, T)."""
    prefix = decoder_input.expand(tgt_embedded.size(0), -1)
    return model.decode(prefix, memory, mask, target_mask(prefix, model.config.pad_id), embedded=tgt_embedded).hidden


def step_scores(model: Transformer, states: torch.Tensor, tokens: torch.Tensor, foils=None) -> torch.Tensor:
    """log p(tokens[n]) from decoder states (N, d), minus log p(foils[n]) when foils are given: (N,)."""
    log_probs = model.log_probs(states)
    chosen = log_probs.gather(1, tokens[:, None])[:, 0]
    return chosen if foils is None else chosen - log_probs.gather(1, foils[:, None])[:, 0]


def embedded_inputs(model: Transformer, src_ids: list[int], tgt_ids: list[int], copies: int):
    """The ids of source and decoder input (1, S), (1, T), and `copies` copies of their token embeddings."""
    src, decoder_input = model_inputs(model, src_ids, tgt_ids)
    with torch.no_grad():
        embedded = tuple(
            embed(ids).expand(copies, -1, -1).clone().requires_grad_()
            for embed, ids in ((model.src_embed, src), (model.tgt_embed, decoder_input))
        )
    return src, decoder_input, embedded


def model_inputs(model: Transformer, src_ids: list[int], tgt_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    device = model_device(model)
    return (
        torch.tensor([src_ids], device=device),
        torch.tensor([[model.config.start_id, *tgt_ids[:-1]]], device=device),
    )
