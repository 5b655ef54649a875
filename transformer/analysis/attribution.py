"""Attribution beside attention: what each output token of a decode drew on, measured three more ways.

Attention weights alone are not an explanation: a head may weigh a token whose value vector is
nearly zero, and gradients may disagree with it. For every step t of a decode result:

- value-weighted attention (Kobayashi et al., EMNLP 2020): ||alpha_tj f_h(x_j)||, with f_h the value
  projection followed by head h's slice of W_O, as shares of the row;
- gradient x input (captum) and integrated gradients (here, one forward pass serving every output step; the
  tests hold it to captum's) of log p(chosen token) with respect to the token embeddings of the source and of
  the target prefix, summed over the embedding dimension;
- contrastive: the same for log p(A) - log p(B), why A rather than a candidate B;
- agreement: Spearman's rank correlation of each head's cross-attention row with |integrated gradients|.

The model is differentiated through embeddings passed to encode/decode, never through hooks on the
shared modules (which would fire in every visitor's forward); both use torch.autograd.grad, so no gradient
accumulates on the model's parameters.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import torch

from transformer.decoding.greedy import decode
from transformer.decoding.result import DecodeResult, model_device
from transformer.model.encoder_decoder import Transformer
from transformer.model.kinds import AttentionKind
from transformer.model.masks import padding_mask, target_mask
from transformer.model.probes import Probe
from transformer.text.tokenizer import TokenizerBase

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


@dataclass(frozen=True)
class Attribution:
    """One decode's attributions; rows are output steps (the token produced at step t)."""

    source_pieces: list[str]
    target_pieces: list[str]  # the output tokens
    decoder_input_pieces: list[str]  # the target prefix positions (start token, then the output so far)
    integrated_gradients: np.ndarray  # (T, S) over the source tokens
    integrated_gradients_target: np.ndarray  # (T, T) over the prefix; zero above the diagonal
    gradient_x_input: np.ndarray  # (T, S)
    gradient_x_input_target: np.ndarray  # (T, T)
    convergence_delta: np.ndarray  # (T,) captum's: sum of attributions minus (f(input) - f(baseline))
    log_probs: np.ndarray  # (T,) f(input): log p of each output token, from the embeddings' forward
    baseline_log_probs: np.ndarray  # (T,) f(baseline): the same with every token embedding zero
    value_weighted: dict[AttentionKind, np.ndarray]  # kind -> (L, H, queries, keys), rows as shares
    agreement_per_step: np.ndarray  # (L, H, T) Spearman of cross-attention with |IG| over the source
    n_steps: int

    @property
    def agreement(self) -> np.ndarray:
        """(L, H): each head's agreement averaged over the steps where it is defined."""
        return nan_mean(self.agreement_per_step, axis=-1)

    def arrays(self) -> dict[str, np.ndarray]:
        """Every array by name, for the `.npz` and JSON files (the CLI's `attribute`, the page's download)."""
        named = {
            "source_pieces": np.array(self.source_pieces),
            "target_pieces": np.array(self.target_pieces),
            "decoder_input_pieces": np.array(self.decoder_input_pieces),
            "integrated_gradients": self.integrated_gradients,
            "integrated_gradients_target": self.integrated_gradients_target,
            "gradient_x_input": self.gradient_x_input,
            "gradient_x_input_target": self.gradient_x_input_target,
            "convergence_delta": self.convergence_delta,
            "log_probs": self.log_probs,
            "baseline_log_probs": self.baseline_log_probs,
            "agreement": self.agreement,
            "agreement_per_step": self.agreement_per_step,
            "n_steps": np.array(self.n_steps),
        }
        return named | {f"value_weighted_{kind.value}": maps for kind, maps in self.value_weighted.items()}

    @property
    def source_share(self) -> np.ndarray:
        """(T,): the share of |integrated gradients| on the source rather than the target prefix."""
        source = np.abs(self.integrated_gradients).sum(-1)
        return source / np.maximum(source + np.abs(self.integrated_gradients_target).sum(-1), 1e-12)


def attribute(
    model: Transformer,
    result: DecodeResult,
    n_steps: int = DEFAULT_STEPS,
    should_stop: Callable[[], bool] = lambda: False,
    progress: Callable[[int, int], None] | None = None,
) -> Attribution:
    """Every measure for every step of a decode result (greedy, beam, sampling, a branch or teacher forcing).

    `should_stop` is asked before each step's backward pass; AttributionStopped is raised once it says yes.
    `progress` hears (output steps' worth of work done, output steps): integrated gradients are nearly all of it.
    """
    steps = torch.arange(result.steps)
    tokens = torch.tensor(result.tgt_ids)
    integrated = _integrated_gradients(
        model, result.src_ids, result.tgt_ids, steps, tokens, None, n_steps, should_stop, progress
    )
    gradient = _gradient_x_input(model, result.src_ids, result.tgt_ids, steps, tokens)
    return Attribution(
        source_pieces=result.src_pieces,
        target_pieces=result.tgt_pieces,
        decoder_input_pieces=result.decoder_input_pieces,
        integrated_gradients=integrated.source,
        integrated_gradients_target=integrated.prefix,
        gradient_x_input=gradient[0],
        gradient_x_input_target=gradient[1],
        convergence_delta=integrated.delta,
        log_probs=integrated.at_input,
        baseline_log_probs=integrated.at_baseline,
        value_weighted=value_weighted_attention(model, result.src_ids, result.tgt_ids),
        agreement_per_step=agreement(result.cross.numpy(), integrated.source),
        n_steps=n_steps,
    )


def corpus_agreement(
    model: Transformer,
    tokenizer: TokenizerBase,
    sentences: Iterable[str],
    n_steps: int = DEFAULT_STEPS,
    progress: Callable[[int], None] | None = None,
) -> tuple[np.ndarray, int]:
    """(L, H) agreement of each head with integrated gradients, averaged over sentences decoded greedily.

    Each sentence counts once (its mean over steps); returns the table and the number of sentences used.
    """
    per_sentence = []
    for index, sentence in enumerate(sentences):
        if sentence.strip():
            result = decode(model, tokenizer, sentence)
            source = source_integrated_gradients(model, result.src_ids, result.tgt_ids, n_steps)
            per_sentence.append(nan_mean(agreement(result.cross.numpy(), source), axis=-1))
        if progress:
            progress(index + 1)
    if not per_sentence:
        raise ValueError("no non-empty sentence to average over")
    return nan_mean(np.stack(per_sentence), axis=0), len(per_sentence)


def source_integrated_gradients(model: Transformer, src_ids: list[int], tgt_ids: list[int], n_steps: int) -> np.ndarray:
    """Integrated gradients of every output token's log-probability over the source tokens: (T, S)."""
    steps, tokens = torch.arange(len(tgt_ids)), torch.tensor(tgt_ids)
    return _integrated_gradients(model, src_ids, tgt_ids, steps, tokens, None, n_steps).source


def contrastive(
    model: Transformer,
    result: DecodeResult,
    step: int,
    foil: int,
    n_steps: int = DEFAULT_STEPS,
    should_stop: Callable[[], bool] = lambda: False,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Why the output token rather than `foil` at `step`: integrated gradients of log p(token) - log p(foil).

    Returns the source row (S,), the prefix row (T,) and the convergence delta.
    """
    integrated = _integrated_gradients(
        model,
        result.src_ids,
        result.tgt_ids,
        torch.tensor([step]),
        torch.tensor([result.tgt_ids[step]]),
        torch.tensor([foil]),
        n_steps,
        should_stop,
    )
    return integrated.source[0], integrated.prefix[0], float(integrated.delta[0])


def value_weighted_attention(
    model: Transformer, src_ids: list[int], tgt_ids: list[int]
) -> dict[AttentionKind, np.ndarray]:
    """Kobayashi et al.'s ||alpha_tj f_h(x_j)|| for every kind, layer and head, as shares of each row."""
    src, decoder_input = _inputs(model, src_ids, tgt_ids)
    layers = {kind: kind.layers(model.config) for kind in AttentionKind}
    probe = Probe(record_at=frozenset((kind, layer) for kind, count in layers.items() for layer in range(count)))
    with torch.inference_mode():
        model(src, decoder_input, probe=probe)
        shares = {}
        for kind, count in layers.items():
            maps = []
            for layer in range(count):
                record, module = probe.records[(kind, layer)], kind.module(model, layer)
                values = module.split_heads(module.v_proj(record.context))[0]  # (H, keys, d_head)
                w_out = module.out_proj.weight.view(-1, module.n_heads, module.d_head)  # (d_model, H, d_head)
                transformed = torch.einsum("hkd,ehd->hke", values, w_out)  # f_h(x_j): (H, keys, d_model)
                weighted = record.p_attn[0] * transformed.norm(dim=-1)[:, None, :]  # (H, queries, keys)
                maps.append(weighted / weighted.sum(-1, keepdim=True).clamp_min(1e-12))
            shares[kind] = torch.stack(maps).float().cpu().numpy()
    return shares


def agreement(cross: np.ndarray, source_attribution: np.ndarray) -> np.ndarray:
    """(L, H, T): Spearman's rank correlation of each cross-attention row (L, H, T, S) with |attribution| (T, S).

    NaN where either row is constant (a one-token source, say): no ranking to compare.
    """
    attention_ranks = _ranks(cross)
    attribution_ranks = _ranks(np.abs(source_attribution))[None, None]
    a = attention_ranks - attention_ranks.mean(-1, keepdims=True)
    b = attribution_ranks - attribution_ranks.mean(-1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        return (a * b).sum(-1) / np.sqrt((a * a).sum(-1) * (b * b).sum(-1))


def nan_mean(values: np.ndarray, axis: int | None = None) -> np.ndarray:
    """The mean of the defined values; NaN, quietly, where none is (a head whose rows never rank anything)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(values, axis=axis)


def _ranks(values: np.ndarray) -> np.ndarray:
    """Ranks along the last axis, ties sharing their average rank (as Spearman's coefficient needs)."""
    flat = values.reshape(-1, values.shape[-1])
    ranks = np.empty_like(flat, dtype=np.float64)
    for x, out in zip(flat, ranks):
        order = np.argsort(x, kind="stable")
        position = np.empty(len(x))
        position[order] = np.arange(len(x))
        _, inverse, counts = np.unique(x, return_inverse=True, return_counts=True)
        out[:] = (np.bincount(inverse, weights=position) / counts)[inverse]
    return ranks.reshape(values.shape)


def _inputs(model: Transformer, src_ids: list[int], tgt_ids: list[int]) -> tuple[torch.Tensor, torch.Tensor]:
    device = model_device(model)
    return (
        torch.tensor([src_ids], device=device),
        torch.tensor([[model.config.start_id, *tgt_ids[:-1]]], device=device),
    )


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
    src, decoder_input = _inputs(model, src_ids, tgt_ids)
    with torch.no_grad():
        embedded = tuple(
            embed(ids).expand(copies, -1, -1).clone().requires_grad_()
            for embed, ids in ((model.src_embed, src), (model.tgt_embed, decoder_input))
        )
    return src, decoder_input, embedded


def _integrated_gradients(
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
                    if progress and done % len(passes) == 0:  # in output steps' worth of work
                        progress(done // len(passes), len(positions))
    source, prefix = ((total * e).sum(-1).float().cpu().numpy() for total, e in zip(totals, embedded))
    with torch.no_grad():
        ends = tuple(torch.cat([e, torch.zeros_like(e)]) for e in embedded)
        ends = decoder_states(model, decoder_input, *encoder_states(model, src, ends[0]), ends[1])
        steps = steps.to(device)
        at_input, at_baseline = (step_scores(model, end[steps], tokens, foils).float().cpu().numpy() for end in ends)
    prefix = np.pad(prefix, ((0, 0), (0, len(tgt_ids) - prefix.shape[1])))
    return _Integrated(source, prefix, at_input, at_baseline)


def _position_groups(positions: list[int]) -> list[tuple[list[int], int]]:
    """The output steps' indices in about sqrt(n) groups of neighbouring positions, each with its decoder input's
    length (to its last position). A group costs a decoder pass that long, and each step a backward pass as long:
    with g groups over n positions the decoder's work is about n g / 2 + n^2 / (2 g), least at g = sqrt(n)."""
    order = sorted(range(len(positions)), key=positions.__getitem__)
    size = max(1, round(math.sqrt(len(order))))
    groups = [order[start : start + size] for start in range(0, len(order), size)]
    return [(group, positions[group[-1]] + 1) for group in groups]


@dataclass(frozen=True)
class _Integrated:
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


def _gradient_x_input(model, src_ids, tgt_ids, steps, tokens):
    src, decoder_input, embedded = embedded_inputs(model, src_ids, tgt_ids, len(steps))
    from captum.attr import InputXGradient  # imported when used: with matplotlib, 0.6 s of every start

    method = InputXGradient(scorer(model, src, decoder_input))
    with torch.enable_grad():
        attributions = method.attribute(embedded, additional_forward_args=(steps.to(src.device), tokens.to(src.device)))
    return tuple(a.sum(-1).detach().float().cpu().numpy() for a in attributions)
