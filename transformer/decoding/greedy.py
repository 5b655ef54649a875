"""Decoding one token at a time with a key/value cache: greedy and sampling.

Every function here is pure: it reads the shared model and returns a new DecodeResult.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from transformer.decoding.lens import logit_lens
from transformer.decoding.result import DecodeResult, assemble, lower_triangle, model_device, source_ids
from transformer.model.encoder_decoder import EncoderOutput, Transformer
from transformer.model.masks import padding_mask
from transformer.model.probes import Probe
from transformer.text.tokenizer import TokenizerBase


def encode_source(
    model: Transformer,
    src: torch.Tensor,
    need_weights: bool,
    probe: Probe | None = None,
    start: tuple[int, torch.Tensor] | None = None,
) -> tuple[EncoderOutput, torch.Tensor]:
    """The encoded source and its padding mask, which every decoder step needs; `start`: the encoder begun at a
    boundary's stream (Transformer.encode's)."""
    src_mask = padding_mask(src, model.config.pad_id)
    return model.encode(src, src_mask, need_weights, probe, start=start), src_mask


@dataclass(frozen=True)
class Generation:
    """What token-by-token decoding of a batch produced."""

    tokens: torch.Tensor  # (B, T), padding after each row's eos
    log_probs: torch.Tensor  # (B, T, V) at every step
    encoder_attentions: tuple[torch.Tensor, ...]  # per layer (B, H, S, S), when recorded
    self_rows: list[torch.Tensor]  # per step (B, L, H, t+1): the new query's masked self-attention
    cross_rows: list[torch.Tensor]  # per step (B, L, H, S)
    state_rows: list[torch.Tensor]  # per step (B, L, d_model): each decoder layer's output for the new position


Chooser = Callable[[torch.Tensor], torch.Tensor]  # log-probs (B, V) -> token ids (B,)


def greedy_chooser(log_probs: torch.Tensor) -> torch.Tensor:
    return log_probs.argmax(dim=-1)


def sampling_chooser(temperature: float = 1.0, top_k: int = 0, seed: int = 0) -> Chooser:
    """Samples from softmax(logits / temperature), restricted to the top_k tokens when top_k > 0."""
    if temperature <= 0:
        raise ValueError("temperature must be positive")
    generators: dict[torch.device, torch.Generator] = {}

    def choose(log_probs: torch.Tensor) -> torch.Tensor:
        generator = generators.setdefault(log_probs.device, torch.Generator(log_probs.device).manual_seed(seed))
        scores = log_probs / temperature
        if 0 < top_k < scores.size(-1):
            threshold = scores.topk(top_k, dim=-1).values[:, -1:]
            scores = scores.masked_fill(scores < threshold, float("-inf"))
        return torch.multinomial(scores.softmax(dim=-1), 1, generator=generator).squeeze(1)

    return choose


@dataclass(frozen=True)
class KeysSoFar:
    """Which decoder input positions so far are real tokens, (B, T): what a cached step's self-attention may see.

    The whole-sequence pass masks padding keys (target_mask, FORMAT.md 5.3); a step over the cache must too, or a
    model that emits the pad token mid-output would attend to it here and not there. Position 0 (the start
    token, which may be the pad id) is always real.
    """

    real: torch.Tensor

    @classmethod
    def start(cls, batch: int, device: torch.device) -> KeysSoFar:
        return cls(torch.ones(batch, 1, dtype=torch.bool, device=device))

    def extended(self, token: torch.Tensor, pad_id: int) -> KeysSoFar:
        return KeysSoFar(torch.cat([self.real, (token != pad_id)[:, None]], dim=1))

    def selected(self, rows: torch.Tensor) -> KeysSoFar:
        return KeysSoFar(self.real.index_select(0, rows))

    def mask(self) -> torch.Tensor | None:
        """(B, 1, 1, T) for the step's query, or None while every key is real (the common case, no mask to apply)."""
        return None if bool(self.real.all()) else self.real[:, None, None, :]


def _rows_of(
    rows: torch.Tensor, memory: torch.Tensor, src_mask: torch.Tensor, cache: list, probe: Probe | None
) -> tuple[torch.Tensor, torch.Tensor, list, Probe | None]:
    """A decoding batch's source side, cache and probe for these rows alone."""
    selected = None if probe is None else probe.selected(rows)
    return memory.index_select(0, rows), src_mask.index_select(0, rows), [c.select(rows) for c in cache], selected


@torch.inference_mode()
def generate(
    model: Transformer,
    src: torch.Tensor,
    max_new_tokens: int,
    choose: Chooser = greedy_chooser,
    need_weights: bool = False,
    prefix: Sequence[int] = (),
    probe: Probe | None = None,
    tokens_only: bool = False,
    start: tuple[int, torch.Tensor] | None = None,
) -> Generation:
    """Token-by-token decoding of a batch src (B, S); one decoder step per new token.

    The first len(prefix) tokens are forced (teacher forcing, what-if branches), the rest
    chosen by `choose`; a probe (heads switched off) applies to every step. tokens_only keeps no
    log-probabilities (a batch of 256 rows over 8,000 pieces would hold 8 MB a step), and, greedy, once a quarter
    of the rows have ended, decodes the others alone (one long row no longer keeps the whole batch computing).
    `start`: the encoder begun at a boundary's stream (the DecoderLens gives each row a layer's output).
    """
    config = model.config
    batch = src.size(0)
    encoded, src_mask = encode_source(model, src, need_weights, probe, start)
    memory = encoded.memory
    steps = min(max_new_tokens, config.max_len)
    cache = model.start_cache(memory, capacity=steps)
    last = torch.full((batch, 1), config.start_id, dtype=torch.long, device=src.device)
    finished = torch.zeros(batch, dtype=torch.bool, device=src.device)
    keys = KeysSoFar.start(batch, src.device)
    written = torch.full((batch, steps), config.pad_id, dtype=torch.long, device=src.device)
    rows = torch.arange(batch, device=src.device)  # each row of the batch now: its row in the batch given
    log_probs_per_step, self_rows, cross_rows, state_rows = [], [], [], []
    for step in range(steps):
        decoded = model.decode(last, memory, src_mask, keys.mask(), need_weights, cache, probe)
        cache = decoded.cache
        log_probs = model.log_probs(decoded.hidden[:, -1])  # (B, V)
        token = choose(log_probs) if step >= len(prefix) else torch.full_like(rows, prefix[step])
        token = token.masked_fill(finished, config.pad_id)
        written[rows, step] = token
        if not tokens_only:
            log_probs_per_step.append(log_probs)
        if need_weights:
            self_rows.append(torch.stack([m[:, :, 0] for m in decoded.self_attentions], dim=1))  # (B, L, H, t+1)
            cross_rows.append(torch.stack([m[:, :, 0] for m in decoded.cross_attentions], dim=1))  # (B, L, H, S)
            state_rows.append(torch.stack([x[:, -1] for x in decoded.layer_states], dim=1))  # (B, L, d_model)
        finished |= token == config.eos_id
        if finished.all():
            break
        last = token[:, None]
        keys = keys.extended(token, config.pad_id)
        # A quarter of the rows done: decode the others alone. Greedy only: a sampling generator shared by the
        # batch would draw other numbers for a smaller batch.
        if tokens_only and choose is greedy_chooser and int(finished.sum()) * 4 >= len(rows):
            alive = (~finished).nonzero()[:, 0]
            rows, finished, last, keys = rows[alive], finished[alive], last[alive], keys.selected(alive)
            memory, src_mask, cache, probe = _rows_of(alive, memory, src_mask, cache, probe)
    log_probs = torch.stack(log_probs_per_step, 1) if log_probs_per_step else torch.empty(batch, 0, 0)
    return Generation(written[:, : step + 1], log_probs, encoded.attentions, self_rows, cross_rows, state_rows)


def forced_prefix(tokenizer: TokenizerBase, prefix: Sequence[int] = ()) -> list[int]:
    """The tokens an output is forced to start with: the target language's code (for a model that has them),
    then the given prefix (a what-if branch's; it may already start with the code)."""
    code = tokenizer.target_prefix_ids
    return list(prefix) if list(prefix[: len(code)]) == code else code + list(prefix)


def default_max_new_tokens(model: Transformer, src_len: int) -> int:
    return min(model.config.max_len, 2 * src_len + 10)


def decode_with_chooser(
    model: Transformer,
    tokenizer: TokenizerBase,
    text: str,
    choose: Chooser = greedy_chooser,
    strategy: str = "greedy",
    max_new_tokens: int | None = None,
    probe: Probe | None = None,
) -> DecodeResult:
    """Decodes one sentence, recording every attention map of every step (with heads switched off by a probe)."""
    ids, truncated = source_ids(tokenizer, text, model.config.max_len)
    return decode_ids(
        model, tokenizer, ids, choose, strategy, max_new_tokens=max_new_tokens, truncated=truncated, probe=probe
    )


def decode_ids(
    model: Transformer,
    tokenizer: TokenizerBase,
    ids: list[int],
    choose: Chooser = greedy_chooser,
    strategy: str = "greedy",
    prefix: Sequence[int] = (),
    max_new_tokens: int | None = None,
    truncated: bool = False,
    probe: Probe | None = None,
) -> DecodeResult:
    """decode_with_chooser() for source ids already tokenized (eos included); the output starts with the tokenizer's
    target language code, where it has one, whatever the prefix (as Hugging Face's forced_bos_token_id)."""
    src = torch.tensor([ids], device=model_device(model))
    prefix = forced_prefix(tokenizer, prefix)
    limit = max_new_tokens or max(default_max_new_tokens(model, len(ids)), len(prefix))
    generation = generate(model, src, limit, choose, True, prefix, probe)
    tokens = generation.tokens[0].tolist()
    return assemble(
        tokenizer,
        model.config.start_id,
        ids,
        tokens,
        generation.log_probs[0],
        logit_lens(
            model, torch.stack([row[0] for row in generation.state_rows], dim=1), generation.log_probs[0], tokens
        ),
        torch.cat(generation.encoder_attentions),
        lower_triangle([row[0] for row in generation.self_rows]),
        torch.stack([row[0] for row in generation.cross_rows], dim=2),  # (L, H, T, S)
        strategy,
        truncated,
    )
