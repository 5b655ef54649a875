"""Beam search (section 6.1 of the paper: beam 4, length penalty 0.6) over the cached decoder."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from transformer.decoding.greedy import default_max_new_tokens, encode_source
from transformer.decoding.result import DecodeResult, assemble, lower_triangle, model_device, source_ids
from transformer.model.encoder_decoder import Transformer
from transformer.text.tokenizer import Tokenizer


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's ((5 + length) / 6)^alpha: divides a hypothesis' log-probability."""
    return ((5 + length) / 6) ** alpha


@dataclass(frozen=True)
class _Step:
    """What one step computed for every live hypothesis, kept to trace the winner back."""

    log_probs: torch.Tensor  # (W, V)
    self_rows: torch.Tensor | None  # (W, L, H, t+1)
    cross_rows: torch.Tensor | None  # (W, L, H, S)
    origin: torch.Tensor | None = None  # (W,) which hypothesis each new one extends
    token: torch.Tensor | None = None  # (W,) the token it added


@dataclass(frozen=True)
class BeamTrace:
    """The winning hypothesis of a beam search, and what is needed to rebuild its record."""

    tokens: list[int]
    hypotheses: list[int]  # which beam row the winner was at each step
    steps: list[_Step]
    encoder_attentions: torch.Tensor | None  # (L, H, S, S) when recorded


def _trace(steps: list[_Step], last_step: int, beam: int, final_token: int) -> tuple[list[int], list[int]]:
    """Tokens and per-step hypothesis indices of the hypothesis that is `beam` at `last_step`."""
    indices, tokens = [beam], [final_token]
    for step in range(last_step - 1, -1, -1):
        tokens.append(int(steps[step].token[indices[-1]]))
        indices.append(int(steps[step].origin[indices[-1]]))
    return tokens[::-1], indices[::-1]


@torch.inference_mode()
def beam_search_ids(
    model: Transformer,
    src_ids: list[int],
    width: int = 4,
    alpha: float = 0.6,
    max_new_tokens: int | None = None,
    need_weights: bool = False,
) -> BeamTrace:
    """The best hypothesis' tokens and, to rebuild its record, its hypothesis index per step."""
    config = model.config
    device = model_device(model)
    src = torch.tensor([src_ids], device=device)
    encoded, src_mask = encode_source(model, src, need_weights)
    memory, src_mask = encoded.memory.expand(width, -1, -1), src_mask.expand(width, -1, -1, -1)
    cache = model.start_cache(memory)
    last = torch.full((width, 1), config.start_id, dtype=torch.long, device=device)
    scores = torch.full((width,), float("-inf"), device=device)
    scores[0] = 0.0  # all hypotheses start identical: let only one of them extend at first
    finished: list[tuple[float, int, int, int]] = []  # (normalised score, step, hypothesis, token)
    steps: list[_Step] = []
    limit = min(max_new_tokens or default_max_new_tokens(model, len(src_ids)), config.max_len)
    for step in range(limit):
        decoded = model.decode(last, memory, src_mask, None, need_weights, cache)
        cache = decoded.cache
        log_probs = model.log_probs(decoded.hidden[:, -1])  # (W, V)
        record = _Step(
            log_probs,
            torch.stack([m[:, :, 0] for m in decoded.self_attentions], 1) if need_weights else None,
            torch.stack([m[:, :, 0] for m in decoded.cross_attentions], 1) if need_weights else None,
        )
        vocab = log_probs.size(-1)
        totals = (scores[:, None] + log_probs).view(-1)
        best = totals.topk(2 * width)
        origins, new_tokens, new_scores = [], [], []
        for score, flat in zip(best.values.tolist(), best.indices.tolist()):
            hypothesis, token = divmod(flat, vocab)
            if score == float("-inf"):
                break
            if token == config.eos_id:
                finished.append((score / length_penalty(step + 1, alpha), step, hypothesis, token))
            elif len(origins) < width:
                origins.append(hypothesis)
                new_tokens.append(token)
                new_scores.append(score)
        origin = torch.tensor(origins, device=device)
        steps.append(_Step(record.log_probs, record.self_rows, record.cross_rows, origin, torch.tensor(new_tokens)))
        alive_best = max(new_scores) / length_penalty(limit, alpha) if new_scores else float("-inf")
        if len(finished) >= width or not new_scores or (finished and max(finished)[0] >= alive_best):
            break
        padding = width - len(origins)  # fewer live hypotheses than the width: repeat the last, never chosen
        origin = torch.cat([origin, origin[-1:].expand(padding)]) if padding else origin
        scores = torch.tensor(new_scores + [float("-inf")] * padding, device=device)
        cache = [layer.select(origin) for layer in cache]
        last = torch.tensor(new_tokens + new_tokens[-1:] * padding, device=device)[:, None]
    if finished:
        _, step, hypothesis, token = max(finished)
        tokens, indices = _trace(steps, step, hypothesis, token)
    else:  # no hypothesis ended: take the best one alive at the limit
        last_step = len(steps) - 1
        tokens, indices = _trace(steps, last_step, int(steps[-1].origin[0]), int(steps[-1].token[0]))
    encoder = torch.cat([m[:1] for m in encoded.attentions]) if need_weights else None
    return BeamTrace(tokens, indices, steps, encoder)


def beam_search(
    model: Transformer,
    tokenizer: Tokenizer,
    text: str,
    width: int = 4,
    alpha: float = 0.6,
    max_new_tokens: int | None = None,
) -> DecodeResult:
    """Beam search over one sentence; the record (candidates, attention) is the winning hypothesis'."""
    ids, truncated = source_ids(tokenizer, text, model.config.max_len)
    trace = beam_search_ids(model, ids, width, alpha, max_new_tokens, need_weights=True)
    tokens, indices, encoder = trace.tokens, trace.hypotheses, trace.encoder_attentions
    chosen = [trace.steps[t] for t in range(len(tokens))]
    return assemble(
        tokenizer,
        model.config.start_id,
        ids,
        tokens,
        torch.stack([s.log_probs[i] for s, i in zip(chosen, indices)]),
        encoder,
        lower_triangle([s.self_rows[i] for s, i in zip(chosen, indices)]),
        torch.stack([s.cross_rows[i] for s, i in zip(chosen, indices)], dim=2),
        f"beam {width}",
        truncated,
    )
