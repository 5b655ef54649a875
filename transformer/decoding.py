"""Decoding one token at a time with a key/value cache: greedy, sampling, beam search.

Every function here is pure: it reads the shared model and returns a new DecodeResult.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from .masks import padding_mask
from .model import Transformer
from .tokenizer import Tokenizer

TOP_K = 10  # candidates kept per step for display


class DecodeInputError(ValueError):
    """A sentence the model cannot take (empty, nothing but whitespace)."""


@dataclass(frozen=True)
class DecodeResult:
    """Everything the app, the CLI and the statistics read about one decoded sentence.

    Row t of decoder_self and cross belongs to decoder input position t (bos, then the
    output so far), the query that produced output token t.
    """

    src_ids: list[int]
    src_pieces: list[str]
    tgt_ids: list[int]  # the output, ending in eos when the model produced it
    tgt_pieces: list[str]
    text: str
    topk_ids: torch.Tensor  # (T, k) the most probable next tokens at each step
    topk_probs: torch.Tensor  # (T, k)
    token_probs: torch.Tensor  # (T,) probability of the token taken at each step
    encoder_self: torch.Tensor  # (L_enc, H, S, S)
    decoder_self: torch.Tensor  # (L_dec, H, T, T), zero above the diagonal
    cross: torch.Tensor  # (L_dec, H, T, S)
    strategy: str
    truncated: bool = False  # the source was cut to the model's max_len

    @property
    def decoder_input_pieces(self) -> list[str]:
        return ["<s>", *self.tgt_pieces[:-1]]

    @property
    def steps(self) -> int:
        return len(self.tgt_ids)


def source_ids(tokenizer: Tokenizer, text: str, max_len: int) -> tuple[list[int], bool]:
    """Token ids of a sentence with eos appended, cut to max_len; and whether it was cut."""
    if not text or not text.strip():
        raise DecodeInputError("the sentence is empty: type something to translate")
    ids = tokenizer.encode(text) + [tokenizer.processor.eos_id()]
    if len(ids) > max_len:
        return ids[: max_len - 1] + [ids[-1]], True
    return ids, False


def _model_device(model: Transformer) -> torch.device:
    return next(model.parameters()).device


def _pieces(tokenizer: Tokenizer, ids: Sequence[int]) -> list[str]:
    return [tokenizer.id_to_piece(i) for i in ids]


def _lower_triangle(rows: list[torch.Tensor]) -> torch.Tensor:
    """Per-step rows (L, H, t+1) -> (L, H, T, T), zero where the look-ahead mask hid a key."""
    steps = len(rows)
    full = rows[-1].new_zeros(*rows[-1].shape[:2], steps, steps)
    for t, row in enumerate(rows):
        full[:, :, t, : t + 1] = row
    return full


def _assemble(
    tokenizer: Tokenizer,
    src_ids: list[int],
    tgt_ids: list[int],
    step_log_probs: torch.Tensor,
    encoder_self: torch.Tensor,
    decoder_self: torch.Tensor,
    cross: torch.Tensor,
    strategy: str,
    truncated: bool,
) -> DecodeResult:
    probs = step_log_probs.float().exp().cpu()
    topk = probs.topk(min(TOP_K, probs.size(-1)), dim=-1)
    chosen = torch.tensor(tgt_ids, dtype=torch.long)
    return DecodeResult(
        src_ids=list(src_ids),
        src_pieces=_pieces(tokenizer, src_ids),
        tgt_ids=list(tgt_ids),
        tgt_pieces=_pieces(tokenizer, tgt_ids),
        text=tokenizer.decode(tgt_ids),
        topk_ids=topk.indices,
        topk_probs=topk.values,
        token_probs=probs.gather(1, chosen[:, None]).squeeze(1),
        encoder_self=encoder_self.float().cpu(),
        decoder_self=decoder_self.float().cpu(),
        cross=cross.float().cpu(),
        strategy=strategy,
        truncated=truncated,
    )


def _encode(model: Transformer, src: torch.Tensor, need_weights: bool):
    src_mask = padding_mask(src, model.config.pad_id)
    memory, maps = model.encode(src, src_mask, need_weights)
    return memory, src_mask, maps


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


@torch.inference_mode()
def generate(
    model: Transformer,
    src: torch.Tensor,
    max_new_tokens: int,
    choose: Chooser = greedy_chooser,
    need_weights: bool = False,
    prefix: Sequence[int] = (),
) -> tuple[torch.Tensor, torch.Tensor, list, list, list]:
    """Token-by-token decoding of a batch src (B, S); one decoder step per new token.

    The first len(prefix) tokens are forced (teacher forcing, what-if branches), the rest
    chosen by `choose`. Returns tokens (B, T), per-step log-probs (B, T, V), the encoder
    maps and, per step, the decoder self and cross rows of every layer.
    """
    config = model.config
    batch = src.size(0)
    memory, src_mask, encoder_maps = _encode(model, src, need_weights)
    cache = model.start_cache(memory)
    last = torch.full((batch, 1), config.bos_id, dtype=torch.long, device=src.device)
    finished = torch.zeros(batch, dtype=torch.bool, device=src.device)
    tokens, log_probs_per_step, self_rows, cross_rows = [], [], [], []
    for step in range(min(max_new_tokens, config.max_len)):
        hidden, self_maps, cross_maps, cache = model.decode(last, memory, src_mask, None, need_weights, cache)
        log_probs = model.log_probs(hidden[:, -1])  # (B, V)
        if step < len(prefix):
            token = torch.full((batch,), prefix[step], dtype=torch.long, device=src.device)
        else:
            token = choose(log_probs)
        token = token.masked_fill(finished, config.pad_id)
        tokens.append(token)
        log_probs_per_step.append(log_probs)
        if need_weights:
            self_rows.append(torch.stack([m[:, :, 0] for m in self_maps], dim=1))  # (B, L, H, t+1)
            cross_rows.append(torch.stack([m[:, :, 0] for m in cross_maps], dim=1))  # (B, L, H, S)
        finished |= token == config.eos_id
        if finished.all():
            break
        last = token[:, None]
    return torch.stack(tokens, 1), torch.stack(log_probs_per_step, 1), encoder_maps, self_rows, cross_rows


def default_max_new_tokens(model: Transformer, src_len: int) -> int:
    return min(model.config.max_len, 2 * src_len + 10)


def decode(
    model: Transformer,
    tokenizer: Tokenizer,
    text: str,
    choose: Chooser = greedy_chooser,
    strategy: str = "greedy",
    max_new_tokens: int | None = None,
) -> DecodeResult:
    """Decodes one sentence, recording every attention map of every step."""
    ids, truncated = source_ids(tokenizer, text, model.config.max_len)
    return decode_ids(model, tokenizer, ids, choose, strategy, max_new_tokens=max_new_tokens, truncated=truncated)


def decode_ids(
    model: Transformer,
    tokenizer: Tokenizer,
    ids: list[int],
    choose: Chooser = greedy_chooser,
    strategy: str = "greedy",
    prefix: Sequence[int] = (),
    max_new_tokens: int | None = None,
    truncated: bool = False,
) -> DecodeResult:
    """decode() for source ids already tokenized (eos included)."""
    src = torch.tensor([ids], device=_model_device(model))
    limit = max_new_tokens or max(default_max_new_tokens(model, len(ids)), len(prefix))
    tokens, log_probs, encoder_maps, self_rows, cross_rows = generate(model, src, limit, choose, True, prefix)
    tgt_ids = tokens[0].tolist()
    return _assemble(
        tokenizer,
        ids,
        tgt_ids,
        log_probs[0],
        torch.cat(encoder_maps),
        _lower_triangle([row[0] for row in self_rows]),
        torch.stack([row[0] for row in cross_rows], dim=2),  # (L, H, T, S)
        strategy,
        truncated,
    )


def branch(model: Transformer, tokenizer: Tokenizer, result: DecodeResult, step: int, token_id: int) -> DecodeResult:
    """What if the model had taken token_id at step: force the output up to there, then decode greedily."""
    prefix = [*result.tgt_ids[:step], token_id]
    strategy = f"what-if: '{tokenizer.id_to_piece(token_id)}' at step {step + 1}"
    return decode_ids(model, tokenizer, result.src_ids, strategy=strategy, prefix=prefix, truncated=result.truncated)


def teacher_force(model: Transformer, tokenizer: Tokenizer, text: str, target: str) -> DecodeResult:
    """Runs the model on a given translation: the attention it gives it and each token's probability."""
    ids, truncated = source_ids(tokenizer, text, model.config.max_len)
    tgt_ids = source_ids(tokenizer, target, model.config.max_len)[0]
    return teacher_force_ids(model, tokenizer, ids, tgt_ids, truncated)


@torch.inference_mode()
def teacher_force_ids(
    model: Transformer, tokenizer: Tokenizer, src_ids: list[int], tgt_ids: list[int], truncated: bool = False
) -> DecodeResult:
    """One parallel forward pass over the whole output tgt_ids (eos included), no cache."""
    device = _model_device(model)
    decoder_input = torch.tensor([[model.config.bos_id, *tgt_ids[:-1]]], device=device)
    output = model(torch.tensor([src_ids], device=device), decoder_input, need_weights=True)
    maps = output.attentions
    return _assemble(
        tokenizer,
        src_ids,
        tgt_ids,
        output.log_probs[0],
        torch.cat(maps.encoder_self),
        torch.cat(maps.decoder_self),
        torch.cat(maps.cross),
        "teacher forcing",
        truncated,
    )
