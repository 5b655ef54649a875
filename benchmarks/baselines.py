"""Independent reference implementations that the fast paths are measured and tested against."""

from __future__ import annotations

import torch

from transformer.decoding.greedy import Chooser, greedy_chooser
from transformer.model.encoder_decoder import Transformer


@torch.inference_mode()
def recompute_greedy(
    model: Transformer, src_ids: list[int], max_new_tokens: int, choose: Chooser = greedy_chooser
) -> tuple[list[int], list]:
    """The Annotated Transformer's greedy_decode: re-runs the decoder over the whole prefix at every step.

    Returns the tokens and, per step, the attention of the full forward pass of that step.
    """
    device = next(model.parameters()).device
    src = torch.tensor([src_ids], device=device)
    decoder_input = [model.config.bos_id]
    tokens, maps = [], []
    for _ in range(max_new_tokens):
        output = model(src, torch.tensor([decoder_input], device=device), need_weights=True)
        token = int(choose(output.log_probs[:, -1])[0])
        tokens.append(token)
        maps.append(output.attentions)
        if token == model.config.eos_id:
            break
        decoder_input.append(token)
    return tokens, maps
