"""What each output token of a decode drew on, measured beside attention: the Attribution of a whole decode, the
contrastive question (why A rather than B), value-weighted attention, and each head's agreement with integrated
gradients."""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass

import numpy as np
import torch

from transformer.analysis.attribution.gradients import (
    DEFAULT_STEPS,
    gradient_x_input,
    integrated_gradients,
    model_inputs,
    source_integrated_gradients,
)
from transformer.decoding.greedy import decode_with_chooser
from transformer.decoding.result import DecodeResult
from transformer.model.encoder_decoder import Transformer
from transformer.model.kinds import AttentionKind
from transformer.model.probes import Probe
from transformer.text.tokenizer import TokenizerBase


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
    `progress` hears (work done, work in all), in output steps' worth: one for each step's integrated gradients, and
    one for the other measures after them (which took 7 s on a long sentence under a bar already full).
    """
    steps = torch.arange(result.steps)
    tokens = torch.tensor(result.tgt_ids)
    total = result.steps + 1

    reported = 0

    def integrated_progress(done: int, work: int) -> None:
        nonlocal reported
        steps_done = done * result.steps // work  # backward passes, said in output steps' worth
        if progress is not None and steps_done > reported:
            reported = steps_done
            progress(steps_done, total)

    integrated = integrated_gradients(
        model, result.src_ids, result.tgt_ids, steps, tokens, None, n_steps, should_stop, integrated_progress
    )
    gradient = gradient_x_input(model, result.src_ids, result.tgt_ids, steps, tokens)
    weighted = value_weighted_attention(model, result.src_ids, result.tgt_ids)
    if progress is not None:
        progress(total, total)
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
        value_weighted=weighted,
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
            result = decode_with_chooser(model, tokenizer, sentence)
            source = source_integrated_gradients(model, result.src_ids, result.tgt_ids, n_steps)
            per_sentence.append(nan_mean(agreement(result.cross.numpy(), source), axis=-1))
        if progress:
            progress(index + 1)
    if not per_sentence:
        raise ValueError("no non-empty sentence to average over")
    return nan_mean(np.stack(per_sentence), axis=0), len(per_sentence)


def contrastive(
    model: Transformer,
    result: DecodeResult,
    step: int,
    foil: int,
    n_steps: int = DEFAULT_STEPS,
    should_stop: Callable[[], bool] = lambda: False,
    progress: Callable[[int, int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Why the output token rather than `foil` at `step`: integrated gradients of log p(token) - log p(foil).

    Returns the source row (S,), the prefix row (T,) and the convergence delta. `progress` hears (backward passes
    done, in all): one step's gradients take seconds on a long sentence, and a page shows them on a bar.
    """
    integrated = integrated_gradients(
        model,
        result.src_ids,
        result.tgt_ids,
        torch.tensor([step]),
        torch.tensor([result.tgt_ids[step]]),
        torch.tensor([foil]),
        n_steps,
        should_stop,
        progress,
    )
    return integrated.source[0], integrated.prefix[0], float(integrated.delta[0])


def value_weighted_attention(
    model: Transformer, src_ids: list[int], tgt_ids: list[int]
) -> dict[AttentionKind, np.ndarray]:
    """Kobayashi et al.'s ||alpha_tj f_h(x_j)|| for every kind, layer and head, as shares of each row."""
    src, decoder_input = model_inputs(model, src_ids, tgt_ids)
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
