"""Forcing the output: what-if branches from a step, and teacher forcing a given translation."""

from __future__ import annotations

import torch

from transformer.decoding.greedy import decode_ids
from transformer.decoding.lens import logit_lens
from transformer.decoding.result import DecodeResult, assemble, model_device, source_ids
from transformer.decoding.strategies import check_decode
from transformer.model.encoder_decoder import Transformer
from transformer.text.pieces import readable
from transformer.text.tokenizer import TokenizerBase


def branch(
    model: Transformer, tokenizer: TokenizerBase, result: DecodeResult, step: int, token_id: int
) -> DecodeResult:
    """What if the model had taken token_id at step: force the output up to there, then decode greedily."""
    prefix = [*result.tgt_ids[:step], token_id]
    strategy = f"what-if: '{readable(tokenizer.id_to_piece(token_id))}' at step {step + 1}"
    return decode_ids(model, tokenizer, result.src_ids, strategy=strategy, prefix=prefix, truncated=result.truncated)


def teacher_force(
    model: Transformer, tokenizer: TokenizerBase, text: str, target: str, limit_bytes: int | None = None
) -> DecodeResult:
    """Runs the model on a given translation: the attention it gives it and each token's probability
    (DecodeTooLarge, before it runs, where that would hold more than `limit_bytes`)."""
    ids, truncated = source_ids(tokenizer, text, model.config.max_len)
    tgt_ids = source_ids(tokenizer, target, model.config.max_len, side="target")[0]
    return teacher_force_ids(model, tokenizer, ids, tgt_ids, truncated, limit_bytes)


@torch.inference_mode()
def teacher_force_ids(
    model: Transformer,
    tokenizer: TokenizerBase,
    src_ids: list[int],
    tgt_ids: list[int],
    truncated: bool = False,
    limit_bytes: int | None = None,
) -> DecodeResult:
    """One parallel forward pass over the whole output tgt_ids (eos included), no cache (DecodeTooLarge, before it
    runs, where it would hold more than `limit_bytes`)."""
    if limit_bytes is not None:
        check_decode(model, len(src_ids), len(tgt_ids), limit_bytes)
    device = model_device(model)
    decoder_input = torch.tensor([[model.config.start_id, *tgt_ids[:-1]]], device=device)
    output = model(torch.tensor([src_ids], device=device), decoder_input, need_weights=True)
    maps = output.attentions
    return assemble(
        tokenizer,
        model.config.start_id,
        src_ids,
        tgt_ids,
        output.log_probs[0],
        logit_lens(model, torch.cat(output.decoder_layer_states), output.log_probs[0], tgt_ids),
        torch.cat(maps.encoder_self),
        torch.cat(maps.decoder_self),
        torch.cat(maps.cross),
        "teacher forcing",
        truncated,
    )
