"""Beam search (section 6.1 of the paper: beam 4, length penalty 0.6) over the cached decoder."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import torch

from transformer.decoding.beam_tree import BeamTree, grow_tree
from transformer.decoding.greedy import KeysSoFar, default_max_new_tokens, encode_source
from transformer.decoding.lens import logit_lens
from transformer.decoding.result import DecodeResult, assemble, lower_triangle, model_device, padded, source_ids
from transformer.model.encoder_decoder import Transformer
from transformer.text.tokenizer import TokenizerBase


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's ((5 + length) / 6)^alpha: divides a hypothesis' log-probability."""
    return ((5 + length) / 6) ** alpha


@dataclass(frozen=True)
class _Step:
    """What one step computed for every live hypothesis, kept to rebuild the winner's record."""

    log_probs: torch.Tensor  # (W, V)
    self_rows: torch.Tensor | None  # (W, L, H, t+1)
    cross_rows: torch.Tensor | None  # (W, L, H, S)
    states: torch.Tensor | None  # (W, L, d_model) each decoder layer's output


@dataclass(frozen=True)
class BeamTrace:
    """The winning hypothesis of a beam search, and what is needed to rebuild its record."""

    tokens: list[int]
    hypotheses: list[int]  # which beam row the winner was at each step
    steps: list[_Step]
    encoder_attentions: torch.Tensor | None  # (L, H, S, S) when recorded
    search: _Search  # everything it kept and finished


def _trace(origins: list, added: list, last_step: int, beam: int, final_token: int) -> tuple[list[int], list[int]]:
    """Tokens and per-step hypothesis indices of the hypothesis that is `beam` at `last_step`, from each
    step's origins (which hypothesis each new one extends) and added tokens."""
    indices, tokens = [beam], [final_token]
    for step in range(last_step - 1, -1, -1):
        tokens.append(int(added[step][indices[-1]]))
        indices.append(int(origins[step][indices[-1]]))
    return tokens[::-1], indices[::-1]


@dataclass
class _Search:
    """One sentence's beam: its finished hypotheses and each step's choices (plain lists, to trace back)."""

    limit: int
    width: int
    alpha: float
    finished: list[tuple[float, int, int, int, float]] = field(
        default_factory=list
    )  # (normalised score, step, hypothesis, token, log-probability)
    origins: list[list[int]] = field(default_factory=list)  # per step: which hypothesis each new one extends
    added: list[list[int]] = field(default_factory=list)  # per step: the token each new one adds
    scores: list[list[float]] = field(default_factory=list)  # per step: each new one's log-probability
    done: bool = False

    def extend(self, step: int, candidates: list[tuple[float, int]], vocab: int, eos: int) -> tuple[list, list, list]:
        """Takes this step's best candidates (score, flat index) in order: hypotheses that end are finished,
        the best `width` others live on. Returns their origins, tokens and scores; sets `done`."""
        origins, new_tokens, new_scores = [], [], []
        for score, flat in candidates:
            hypothesis, token = divmod(flat, vocab)
            if score == float("-inf"):
                break
            if token == eos:
                self.finished.append((score / length_penalty(step + 1, self.alpha), step, hypothesis, token, score))
            elif len(origins) < self.width:
                origins.append(hypothesis)
                new_tokens.append(token)
                new_scores.append(score)
        self.origins.append(origins)
        self.added.append(new_tokens)
        self.scores.append(new_scores)
        alive_best = max(new_scores) / length_penalty(self.limit, self.alpha) if new_scores else float("-inf")
        self.done = (
            len(self.finished) >= self.width
            or not new_scores
            or bool(self.finished and max(self.finished)[0] >= alive_best)
            or step + 1 >= self.limit
        )
        return origins, new_tokens, new_scores

    def best(self) -> tuple[list[int], list[int]]:
        """The winner's tokens and hypothesis per step: the best finished one, else the best alive at the limit."""
        if self.finished:
            _, step, hypothesis, token, _ = max(self.finished)
            return _trace(self.origins, self.added, step, hypothesis, token)
        last = len(self.origins) - 1
        return _trace(self.origins, self.added, last, self.origins[-1][0], self.added[-1][0])

    def tree(self, eos_probs: list[float]) -> BeamTree:
        """Everything this search kept and finished, with the winner's path (eos_probs: along that path)."""
        kept = [
            [(o, t, s, s / length_penalty(step + 1, self.alpha)) for o, t, s in zip(*at)]
            for step, at in enumerate(zip(self.origins, self.added, self.scores))
        ]
        ended = [(step, hypothesis, token, raw, score) for score, step, hypothesis, token, raw in self.finished]
        if self.finished:
            best = max(self.finished)
            winner = (best[1], [e for e in self.finished if e[1] == best[1]].index(best), True)
        else:
            winner = (len(self.origins) - 1, 0, False)
        return grow_tree(self.width, self.alpha, kept, ended, winner, eos_probs)


@torch.inference_mode()
def forcing(log_probs: torch.Tensor, forced: Sequence[int], step: int) -> torch.Tensor:
    """The scores a step ranks by: only the forced token, at log-probability 0, while forced tokens remain
    (Hugging Face's forced_bos_token_id); the model's own log-probabilities after them."""
    if step >= len(forced):
        return log_probs
    return torch.full_like(log_probs, float("-inf")).index_fill_(
        -1, torch.tensor([forced[step]], device=log_probs.device), 0.0
    )


@torch.inference_mode()  # a model whose weights require gradients built a graph over every step (its memory)
def beam_search_ids(
    model: Transformer,
    src_ids: list[int],
    width: int = 4,
    alpha: float = 0.6,
    max_new_tokens: int | None = None,
    need_weights: bool = False,
    forced: Sequence[int] = (),
) -> BeamTrace:
    """The best hypothesis' tokens and, to rebuild its record, its hypothesis index per step; the first
    len(forced) tokens are forced (a target language's code), each at no cost to the score."""
    config = model.config
    device = model_device(model)
    src = torch.tensor([src_ids], device=device)
    encoded, src_mask = encode_source(model, src, need_weights)
    memory, src_mask = encoded.memory.expand(width, -1, -1), src_mask.expand(width, -1, -1, -1)
    limit = min(max_new_tokens or default_max_new_tokens(model, len(src_ids)), config.max_len)
    cache = model.start_cache(memory, capacity=limit)
    last = torch.full((width, 1), config.start_id, dtype=torch.long, device=device)
    scores = torch.full((width,), float("-inf"), device=device)
    scores[0] = 0.0  # all hypotheses start identical: let only one of them extend at first
    search = _Search(limit, width, alpha)
    steps: list[_Step] = []
    keys = KeysSoFar.start(width, device)
    for step in range(limit):
        decoded = model.decode(last, memory, src_mask, keys.mask(), need_weights, cache)
        log_probs = model.log_probs(decoded.hidden[:, -1])  # (W, V)
        best = (scores[:, None] + forcing(log_probs, forced, step)).view(-1).topk(2 * width)
        origins, new_tokens, new_scores = search.extend(
            step, list(zip(best.values.tolist(), best.indices.tolist())), log_probs.size(-1), config.eos_id
        )
        steps.append(
            _Step(
                log_probs,
                torch.stack([m[:, :, 0] for m in decoded.self_attentions], 1) if need_weights else None,
                torch.stack([m[:, :, 0] for m in decoded.cross_attentions], 1) if need_weights else None,
                torch.stack([x[:, -1] for x in decoded.layer_states], 1) if need_weights else None,
            )
        )
        if search.done:
            break
        padding = width - len(origins)  # fewer live hypotheses than the width: repeat the last, never chosen
        origin = torch.tensor(origins + origins[-1:] * padding, device=device)
        scores = torch.tensor(new_scores + [float("-inf")] * padding, device=device)
        cache = [layer.select(origin) for layer in decoded.cache]
        last = torch.tensor(new_tokens + new_tokens[-1:] * padding, device=device)[:, None]
        keys = keys.selected(origin).extended(last[:, 0], config.pad_id)
    tokens, indices = search.best()
    encoder = torch.cat([m[:1] for m in encoded.attentions]) if need_weights else None
    return BeamTrace(tokens, indices, steps, encoder, search)


@torch.inference_mode()
def beam_search_batch(
    model: Transformer,
    sources: list[list[int]],
    width: int,
    alpha: float,
    limits: list[int],
    forced: Sequence[int] = (),
) -> list[list[int]]:
    """Beam search over several sentences at once, each with its own beam and length limit: the tokens of
    each one's best hypothesis, as `beam_search_ids` finds them one by one (no attention kept).

    Every live hypothesis of every unfinished sentence is one row of one decoder call per step, so the
    per-step cost (many small operations) is paid once for the batch; a finished sentence leaves it.
    """
    config = model.config
    device = model_device(model)
    src = padded(sources, config.pad_id, device)
    encoded, src_mask = encode_source(model, src, need_weights=False)
    memory = encoded.memory.repeat_interleave(width, 0)  # rows b*W .. b*W+W-1 are sentence b's hypotheses
    src_mask = src_mask.repeat_interleave(width, 0)
    cache = model.start_cache(memory)
    searches = [_Search(min(limit, config.max_len), width, alpha) for limit in limits]
    active = list(range(len(sources)))  # sentences still searching, in row-block order
    last = torch.full((len(active) * width, 1), config.start_id, dtype=torch.long, device=device)
    scores = torch.full((len(active), width), float("-inf"), device=device)
    scores[:, 0] = 0.0  # all hypotheses start identical: let only one of them extend at first
    keys = KeysSoFar.start(len(active) * width, device)
    for step in range(max(search.limit for search in searches)):
        decoded = model.decode(last, memory, src_mask, keys.mask(), False, cache)
        log_probs = forcing(model.log_probs(decoded.hidden[:, -1]), forced, step)  # (A*W, V)
        vocab = log_probs.size(-1)
        best = (scores[:, :, None] + log_probs.view(len(active), width, vocab)).view(len(active), -1).topk(2 * width)
        rows, next_active, next_tokens, next_scores = [], [], [], []
        for block, (sentence, values, indices) in enumerate(zip(active, best.values.tolist(), best.indices.tolist())):
            search = searches[sentence]
            origins, new_tokens, new_scores = search.extend(step, list(zip(values, indices)), vocab, config.eos_id)
            if search.done:
                continue
            padding = width - len(origins)  # repeat the last live hypothesis, never chosen
            rows += [block * width + origin for origin in origins + origins[-1:] * padding]
            next_tokens += new_tokens + new_tokens[-1:] * padding
            next_scores.append(new_scores + [float("-inf")] * padding)
            next_active.append(sentence)
        if not next_active:
            break
        index = torch.tensor(rows, device=device)
        cache = [layer.select(index) for layer in decoded.cache]
        memory, src_mask = memory.index_select(0, index), src_mask.index_select(0, index)
        last = torch.tensor(next_tokens, device=device)[:, None]
        keys = keys.selected(index).extended(last[:, 0], config.pad_id)
        scores = torch.tensor(next_scores, device=device)
        active = next_active
    return [search.best()[0] for search in searches]


@torch.inference_mode()
def beam_search(
    model: Transformer,
    tokenizer: TokenizerBase,
    text: str,
    width: int = 4,
    alpha: float = 0.6,
    max_new_tokens: int | None = None,
) -> DecodeResult:
    """Beam search over one sentence; the record (candidates, attention) is the winning hypothesis'."""
    ids, truncated = source_ids(tokenizer, text, model.config.max_len)
    trace = beam_search_ids(
        model, ids, width, alpha, max_new_tokens, need_weights=True, forced=tokenizer.target_prefix_ids
    )
    tokens, indices, encoder = trace.tokens, trace.hypotheses, trace.encoder_attentions
    chosen = [trace.steps[t] for t in range(len(tokens))]
    log_probs = torch.stack([s.log_probs[i] for s, i in zip(chosen, indices)])
    tree = trace.search.tree(log_probs[:, model.config.eos_id].float().exp().tolist())
    return assemble(
        tokenizer,
        model.config.start_id,
        ids,
        tokens,
        log_probs,
        logit_lens(model, torch.stack([s.states[i] for s, i in zip(chosen, indices)], dim=1), log_probs, tokens),
        encoder,
        lower_triangle([s.self_rows[i] for s, i in zip(chosen, indices)]),
        torch.stack([s.cross_rows[i] for s, i in zip(chosen, indices)], dim=2),
        f"beam {width}",
        truncated,
        tree,
    )
