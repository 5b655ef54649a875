"""The logit lens: what each decoder layer's output would predict if the layers after it were skipped.

Each layer's output goes through the model's final norm (where it has one) and the generator, as the last
layer's does (nostalgebraist 2020). It reads every layer in the last layer's basis, which early layers need
not share, so it understates what they hold; Belrose et al. (2023) fit a per-layer affine map (the tuned
lens) to correct for that.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import torch

from transformer.model.config import TransformerConfig
from transformer.model.encoder_decoder import Transformer

LENS_TOP = 5  # guesses kept per layer and step

# The multiply-adds per output token that reading every layer's guesses at decode may cost: (decoder layers - 1) x
# d_model x vocabulary. The default's 2 x 256 x 8,000 and opus-mt's 5 x 512 x 59,514 are read at decode; NLLB-600M's
# 11 x 1,024 x 256,206 made its whole decode 1.41 times transformers' on 2 cores, and is read when asked (read_lens).
EAGER_LENS_PRODUCTS = 2**28


def read_at_decode(config: TransformerConfig) -> bool:
    """Whether a decode reads every layer's guesses itself, or leaves them to read_lens, when a view asks."""
    return (config.n_decoder_layers - 1) * config.d_model * config.tgt_vocab_size <= EAGER_LENS_PRODUCTS


@dataclass(frozen=True)
class LogitLens:
    """Each decoder layer's guesses at each step; the last layer's are the model's own output distribution.

    A decode of a model with a large vocabulary keeps only the layer outputs (`read` False: the guesses are None)
    and read_lens reads the guesses from them when a view asks."""

    top_ids: torch.Tensor | None  # (L_dec, T, LENS_TOP)
    top_probs: torch.Tensor | None  # (L_dec, T, LENS_TOP)
    chosen_rank: torch.Tensor | None  # (L_dec, T) the taken token's rank among the layer's guesses, 1 for the top
    chosen_probs: torch.Tensor | None  # (L_dec, T)
    states: torch.Tensor  # (L_dec, T, d_model) the layer outputs read, for a lens fitted to them (tuned_lens)

    @property
    def read(self) -> bool:
        return self.top_ids is not None


def guesses(log_probs: torch.Tensor, chosen: torch.Tensor) -> tuple[torch.Tensor, ...]:
    """One layer's top ids and probabilities, the chosen tokens' (T, 1) rank and probability, from (T, V)."""
    probs = log_probs.float().exp()
    top = probs.topk(min(LENS_TOP, probs.size(-1)), dim=-1)
    chosen_probs = probs.gather(1, chosen)
    return top.indices, top.values, (probs > chosen_probs).sum(dim=-1) + 1, chosen_probs[:, 0]


def stacked_guesses(
    layer_log_probs: Iterable[torch.Tensor], layers: int, chosen: torch.Tensor
) -> tuple[torch.Tensor, ...]:
    """Each layer's guesses, stacked (L, T, ...) on the CPU, written into tensors made at the first layer: small
    results kept between the layers' large (T, V) scores split the memory those freed, and the process grew by a
    layer's scores at every layer (measured: docs/performance.md)."""
    stacked: list[torch.Tensor] = []
    for layer, log_probs in enumerate(layer_log_probs):
        found = guesses(log_probs, chosen)
        if not stacked:
            stacked = [torch.empty((layers, *part.shape), dtype=part.dtype) for part in found]
        for whole, part in zip(stacked, found):
            whole[layer] = part
        del log_probs, found  # before the next layer's scores are made
    return tuple(stacked)


@torch.inference_mode()
def logit_lens(
    model: Transformer, states: torch.Tensor, output_log_probs: torch.Tensor, tgt_ids: Sequence[int]
) -> LogitLens:
    """The lens over decoder layer outputs `states` (L_dec, T, d_model) for the output `tgt_ids` (T), its guesses
    read where read_at_decode says so (else left to read_lens).

    The last layer's row is the decode's own `output_log_probs` (T, V): the same numbers the step view shows (the
    lens computes them too, but a matrix product of another shape may differ in the last bit).
    """
    if not read_at_decode(model.config):
        return LogitLens(None, None, None, None, states=states.float().cpu())
    chosen = torch.tensor(list(tgt_ids), dtype=torch.long, device=states.device)[:, None]
    scores = itertools.chain((model.lens_log_probs(layer_states) for layer_states in states[:-1]), [output_log_probs])
    return LogitLens(*stacked_guesses(scores, len(states), chosen), states=states.float().cpu())  # a layer at a time


@torch.inference_mode()
def read_lens(model: Transformer, lens: LogitLens, tgt_ids: Sequence[int]) -> LogitLens:
    """A lens whose guesses the decode left unread, read from its layer outputs (the last layer's through the
    output layer again, equal to the decode's own distribution to float32's last bits); a read lens as it is."""
    if lens.read:
        return lens
    device = next(model.parameters()).device
    chosen = torch.tensor(list(tgt_ids), dtype=torch.long, device=device)[:, None]
    scores = (model.lens_log_probs(states.to(device)) for states in lens.states)
    return LogitLens(*stacked_guesses(scores, len(lens.states), chosen), states=lens.states)
