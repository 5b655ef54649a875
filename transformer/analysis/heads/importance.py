"""Which heads a model's translations depend on, over a corpus (Michel, Levy and Neubig 2019, "Are Sixteen Heads
Really Better than One?"), measured two ways for every head of every kind:

- ablation: the head switched off (its output zeroed before W_O, exactly the model without it), and the change in
  the corpus BLEU and chrF of the greedy output and in the mean teacher-forced log-probability of the references;
- gradient: I_h = mean over the sentences of |dL/dxi_h|, xi_h a gate of 1 on the head's output and L the sentence's
  teacher-forced loss (the mean negative log-probability of its reference tokens), each sentence with gates of its
  own so that one backward pass per batch gives every sentence's derivative; then, as in the paper (after Molchanov
  et al. 2017), each layer's scores divided by their L2 norm.

Without references, the intact model's own greedy outputs stand in for them (the change is then away from what the
model says, not from a human translation).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from itertools import accumulate

import numpy as np
import sacrebleu
import torch

from transformer.decoding.greedy import default_max_new_tokens, generate, greedy_chooser
from transformer.decoding.result import DecodeInputError, model_device, padded, source_ids
from transformer.decoding.strategies import DecodeSettings
from transformer.decoding.translate import DEFAULT_TRANSLATE_BATCH, batch_rows, translate_texts
from transformer.model.encoder_decoder import Transformer
from transformer.model.heads import Head, every_head
from transformer.model.kinds import AttentionKind
from transformer.model.probes import Probe
from transformer.text.tokenizer import TokenizerBase


class ImportanceStopped(Exception):
    """The visitor stopped the work (should_stop said yes). `partial`: what had finished where a part keeps it (the
    ablation: each head switched off over the sentences every head had finished, an Ablation), else None."""

    def __init__(self, partial: object = None) -> None:
        super().__init__()
        self.partial = partial


@dataclass(frozen=True)
class TokenizedPairs:
    """Sentences tokenized for the model: sources and their references (eos included), each within max_len."""

    sources: list[list[int]]
    references: list[list[int]]


def corpus_of(
    model: Transformer, tokenizer: TokenizerBase, sources: Sequence[str], references: Sequence[str]
) -> TokenizedPairs:
    """The sentences' ids; DecodeInputError naming the first sentence the model cannot take (an empty translation,
    where the model's own output is measured, or a text its tokenizer refuses)."""
    limit = model.config.max_len
    return TokenizedPairs(_ids_of(tokenizer, sources, limit, "source"), _ids_of(tokenizer, references, limit, "target"))


def _ids_of(tokenizer: TokenizerBase, texts: Sequence[str], limit: int, side: str) -> list[list[int]]:
    found = []
    for number, text in enumerate(texts, 1):
        if side == "target" and not text.strip():
            raise DecodeInputError(
                f"sentence {number}'s translation is empty: nothing to measure against (give references, or leave "
                "the sentence out)"
            )
        try:
            found.append(source_ids(tokenizer, text, limit, side=side)[0])
        except DecodeInputError as error:
            raise DecodeInputError(f"sentence {number}: {error}") from None
    return found


def reference_log_probs(
    model: Transformer, sources: Sequence[list[int]], references: Sequence[list[int]], probe: Probe | None = None
) -> torch.Tensor:
    """Each sentence's mean log-probability of its reference's tokens, teacher forced, (B,): one batched pass, its
    scores over the vocabulary taken a part at a time (reference_token_log_probs)."""
    config, device = model.config, model_device(model)
    src = padded(sources, config.pad_id, device)
    target = padded(references, config.pad_id, device)
    decoder_input = padded([[config.start_id, *ids[:-1]] for ids in references], config.pad_id, device)
    log_probs = reference_token_log_probs(model, model.decoder_states(src, decoder_input, probe), target)
    real = (target != config.pad_id).to(log_probs.dtype)
    return (log_probs * real).sum(-1) / real.sum(-1)


# The scores over the vocabulary that a part of reference_token_log_probs holds, its log-softmax and (in the backward
# pass) their gradient included: the whole (B, T, V) at once is gigabytes for a large vocabulary (measured:
# docs/performance.md).
SCORES_BUDGET_BYTES = 256 << 20
SCORE_COPIES = 3  # the logits, their log-softmax, and a gradient of that size in the backward pass


def reference_token_log_probs(model: Transformer, hidden: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """log p(target token) at each position, (B, T), from the decoder's states (B, T, d_model), as many positions
    at a time as SCORES_BUDGET_BYTES holds; differentiable in the states (_TokenLogProbs)."""
    positions = max(1, SCORES_BUDGET_BYTES // (model.config.tgt_vocab_size * 4 * SCORE_COPIES))
    flat_hidden, flat_target = hidden.reshape(-1, hidden.shape[-1]), target.reshape(-1, 1)
    if torch.is_grad_enabled() and hidden.requires_grad:
        return _TokenLogProbs.apply(flat_hidden, flat_target, model, positions).reshape(target.shape)
    return _token_log_probs(model, flat_hidden, flat_target, positions).reshape(target.shape)


def _token_log_probs(model: Transformer, hidden: torch.Tensor, target: torch.Tensor, positions: int) -> torch.Tensor:
    """Written part by part into one tensor made first: small results kept between the parts' large scores split
    the memory they freed, and the process grew by a part's scores at every part (measured: docs/performance.md)."""
    found = hidden.new_empty(len(target), dtype=torch.promote_types(hidden.dtype, torch.float32))
    for start in range(0, len(target), positions):
        part = slice(start, start + positions)
        found[part] = model.log_probs(hidden[part]).gather(-1, target[part])[:, 0]
    return found


class _TokenLogProbs(torch.autograd.Function):
    """_token_log_probs, whose backward pass makes each part's scores again rather than keeping them. The gradient
    reaches the decoder's states only: the generator's own weights get none (nothing here trains)."""

    @staticmethod
    def forward(ctx, hidden: torch.Tensor, target: torch.Tensor, model: Transformer, positions: int) -> torch.Tensor:
        ctx.save_for_backward(hidden, target)
        ctx.model, ctx.positions = model, positions
        return _token_log_probs(model, hidden, target, positions)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> tuple[torch.Tensor, None, None, None]:
        hidden, target = ctx.saved_tensors
        found = torch.empty_like(hidden)
        for start in range(0, len(target), ctx.positions):
            part = slice(start, start + ctx.positions)
            with torch.enable_grad():
                states = hidden[part].detach().requires_grad_()
                picked = ctx.model.log_probs(states).gather(-1, target[part])[:, 0]
                (found[part],) = torch.autograd.grad(picked, states, grad[part])
        return found, None, None, None


def gradient_importance(
    model: Transformer,
    corpus: TokenizedPairs,
    batch_size: int = 16,
    per_layer_norm: bool = True,
    should_stop: Callable[[], bool] = lambda: False,
) -> dict[AttentionKind, np.ndarray]:
    """Michel et al.'s I_h for every head, (layers, heads) per kind, each layer's scores divided by their L2 norm
    (per_layer_norm=False: the mean |dL/dxi_h| itself). `should_stop`, asked between batches, ends the work with
    ImportanceStopped."""
    if model.training:
        raise ValueError("head importance needs the model in eval mode (dropout changes the loss)")
    config, device = model.config, model_device(model)
    batch_size = batch_rows(model, DecodeSettings(), batch_size)
    layers = {kind: kind.layers(config) for kind in AttentionKind}
    totals = {kind: torch.zeros(count, config.n_heads, dtype=torch.float64) for kind, count in layers.items()}
    for start in range(0, len(corpus.sources), batch_size):
        if should_stop():
            raise ImportanceStopped
        sources = corpus.sources[start : start + batch_size]
        references = corpus.references[start : start + batch_size]
        gates = {
            (kind, layer): torch.ones(len(sources), config.n_heads, device=device, requires_grad=True)
            for kind, count in layers.items()
            for layer in range(count)
        }
        with torch.enable_grad():
            loss = -reference_log_probs(model, sources, references, Probe(gates=gates)).sum()
            grads = torch.autograd.grad(loss, list(gates.values()))
        for (kind, layer), grad in zip(gates, grads):
            totals[kind][layer] += grad.abs().sum(0).double().cpu()
    found = {}
    for kind, total in totals.items():
        mean = total / len(corpus.sources)
        found[kind] = (mean / mean.norm(dim=-1, keepdim=True).clamp_min(1e-30) if per_layer_norm else mean).numpy()
    return found


@dataclass(frozen=True)
class Ablation:
    """The intact model's scores, and each head's change when it alone is switched off."""

    bleu: float
    chrf: float
    log_prob: float  # mean over sentences of the mean log-probability of the reference's tokens
    deltas: dict[Head, tuple[float, float, float]]  # head -> (BLEU, chrF, log-probability), ablated minus intact
    intact: list[str]  # the intact model's greedy outputs
    finished: tuple[int, ...] | None = None  # a stopped run's: the sample's sentences (its shortest) it is over


def scores(outputs: Sequence[str], references: Sequence[str]) -> tuple[float, float]:
    return sacrebleu.corpus_bleu(outputs, [list(references)]).score, sacrebleu.corpus_chrf(
        outputs, [list(references)]
    ).score


def ablating_gates(model: Transformer, head_sets: Sequence[frozenset[Head]], device: torch.device) -> Probe:
    """A probe switching off, in each row of a batch, that row's set of heads (rows of different sets decode
    together)."""
    config = model.config
    sites = {(kind, layer) for kind, layer, _ in every_head(model.config)}
    gates = {site: torch.ones(len(head_sets), config.n_heads, device=device) for site in sites}
    for row, heads in enumerate(head_sets):
        for kind, layer, head in heads:
            gates[(kind, layer)][row, head] = 0.0
    return Probe(gates=gates)


def decode_cost(lengths: Sequence[int]) -> int:
    """The work of a batch of sources of these lengths (greedy decodes, then a teacher-forced pass over their
    references): its rows times its longest source, padded to it. Measured on the default and the reversal model, a
    batch of 256 rows took 104-132 ms per token of its longest source from 8 to 23 tokens (3 to 13, ten times
    slowed). What a bar weighs batches by: rows of the shortest sentences go first, and counted alike they said
    "about 1 s left" with 113 s to go."""
    return len(lengths) * max(lengths)


def translation_cost(model: Transformer, lengths: Sequence[int]) -> float:
    """decode_cost of translate_texts' batches of sources of these lengths (similar lengths batched together)."""
    ordered, size = sorted(lengths), batch_rows(model, DecodeSettings(), DEFAULT_TRANSLATE_BATCH)
    return sum(decode_cost(ordered[start : start + size]) for start in range(0, len(ordered), size))


# What a part's rows report: (rows done, rows, the share of the part's work done: its batches weighed by decode_cost)
RowProgress = Callable[[int, int, float], None]


def ablated_rows(
    model: Transformer,
    tokenizer: TokenizerBase,
    corpus: TokenizedPairs,
    head_sets: Sequence[frozenset[Head]],
    rows_per_batch: int,
    progress: RowProgress | None,
    should_stop: Callable[[], bool],
    done_before: float = 0.0,
) -> dict[frozenset[Head], tuple[list[str], list[float]]]:
    """Every (set of heads, sentence) pair as a row: greedy outputs and reference log-probabilities with those heads
    off, rows of similar lengths batched whatever their heads, so a batch is as full as the work allows.
    `done_before`: the part's work done before these rows, in decode_cost's units (its shares count it)."""
    heads = list(head_sets)
    config, device = model.config, model_device(model)
    rows_per_batch = batch_rows(model, DecodeSettings(), rows_per_batch)  # their keys and values within a budget
    rows = sorted(
        ((h, s) for h in range(len(heads)) for s in range(len(corpus.sources))),
        key=lambda row: len(corpus.sources[row[1]]),
    )
    outputs = {head: ([""] * len(corpus.sources), [0.0] * len(corpus.sources)) for head in heads}
    starts = range(0, len(rows), rows_per_batch)
    costs = [decode_cost([len(corpus.sources[s]) for _, s in rows[start : start + rows_per_batch]]) for start in starts]
    done_costs = [cost / (done_before + sum(costs)) for cost in accumulate(costs, initial=done_before)]
    if progress:
        progress(0, len(rows), done_costs[0])  # the part's bar from its first second, not after its first batch
    for batch, start in enumerate(starts):
        if should_stop():  # what finished goes with it: the sentences whose every row is done
            left = {s for _, s in rows[start:]}
            raise ImportanceStopped((outputs, [s for s in range(len(corpus.sources)) if s not in left]))
        chunk = rows[start : start + rows_per_batch]
        sources = [corpus.sources[s] for _, s in chunk]
        probe = ablating_gates(model, [heads[h] for h, _ in chunk], device)
        limit = default_max_new_tokens(model, max(map(len, sources)))
        src = padded(sources, config.pad_id, device)
        tokens = generate(
            model, src, limit, greedy_chooser, prefix=tokenizer.target_prefix_ids, probe=probe, tokens_only=True
        ).tokens
        log_probs = reference_log_probs(model, sources, [corpus.references[s] for _, s in chunk], probe)
        for row, (h, s) in enumerate(chunk):
            own_limit = default_max_new_tokens(model, len(corpus.sources[s]))  # as the sentence alone decodes
            outputs[heads[h]][0][s] = tokenizer.decode(tokens[row, :own_limit].tolist())
            outputs[heads[h]][1][s] = float(log_probs[row])
        if progress:
            progress(min(start + rows_per_batch, len(rows)), len(rows), done_costs[batch + 1])
    return outputs


@torch.inference_mode()
def ablation_importance(
    model: Transformer,
    tokenizer: TokenizerBase,
    sources: Sequence[str],
    references: Sequence[str] | None = None,
    heads: Sequence[Head] | None = None,
    progress: RowProgress | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    rows_per_batch: int = 256,
) -> Ablation:
    """Each head switched off alone: greedy decodes of the whole sample and a teacher-forced pass over its
    references, every (head, sentence) pair a row of batches that mix heads. `progress` hears (rows done, rows,
    share of the work done), the intact translation first counted in the share; `should_stop`, asked between
    batches, ends the work with ImportanceStopped."""
    heads = every_head(model.config) if heads is None else list(heads)
    if progress is not None:  # the rows to come, before the intact translation and a first batch (74 s without)
        progress(0, len(heads) * len(sources), 0.0)
    intact = translate_texts(model, tokenizer, sources)
    references = intact if references is None else list(references)
    corpus = corpus_of(model, tokenizer, sources, references)
    bleu, chrf = scores(intact, references)
    rows = batch_rows(model, DecodeSettings(), rows_per_batch)
    intact_log_probs = torch.cat(
        [
            reference_log_probs(model, corpus.sources[start : start + rows], corpus.references[start : start + rows])
            for start in range(0, len(corpus.sources), rows)
        ]
    ).tolist()
    try:
        intact_cost = translation_cost(model, [len(source) for source in corpus.sources])
        singles = [frozenset({h}) for h in heads]
        found = ablated_rows(model, tokenizer, corpus, singles, rows_per_batch, progress, should_stop, intact_cost)
    except ImportanceStopped as stopped:
        outputs, finished = stopped.partial  # type: ignore[misc]
        if not finished:
            raise ImportanceStopped from None
        partial = ablation_over(outputs, finished, intact, references, intact_log_probs)
        raise ImportanceStopped(replace(partial, finished=tuple(finished))) from None
    return ablation_over(found, range(len(sources)), intact, references, intact_log_probs)


def ablation_over(
    found: dict[frozenset[Head], tuple[list[str], list[float]]],
    sentences: Sequence[int],
    intact: list[str],
    references: list[str],
    intact_log_probs: list[float],
) -> Ablation:
    """Each head's change over the given sentences of the sample (all of them, or those a Stop had finished)."""
    chosen = list(sentences)

    def picked(values: Sequence) -> list:
        return [values[s] for s in chosen]

    bleu, chrf = scores(picked(intact), picked(references))
    log_prob = float(np.mean(picked(intact_log_probs)))
    deltas = {}
    for (head,), (outputs, log_probs) in found.items():
        ablated_bleu, ablated_chrf = scores(picked(outputs), picked(references))
        deltas[head] = (ablated_bleu - bleu, ablated_chrf - chrf, float(np.mean(picked(log_probs))) - log_prob)
    return Ablation(bleu, chrf, log_prob, deltas, picked(intact))
