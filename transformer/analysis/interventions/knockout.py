"""Attention knockout and pinning (Geva et al. 2023): cut the decoder's cross-attention from chosen source positions,
or make one head look at one word only, and decode again from a step.

Both are an edit of which keys a head may look at: a blocked key's score is -inf before the softmax, so its weight
is exactly 0 and the others share what it had; a head left with no key adds nothing (its output is zero, as a head
switched off). The edit applies at every step of the decode; the output before the chosen step is kept as it was,
so the step's candidates and what follows are the model's with the edit.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from transformer.decoding.greedy import decode_ids
from transformer.decoding.result import DecodeResult
from transformer.model.encoder_decoder import Transformer
from transformer.model.kinds import AttentionKind
from transformer.model.probes import Probe
from transformer.text.tokenizer import TokenizerBase


@dataclass(frozen=True)
class Pin:
    """One cross-attention head made to look at some source positions only (a word's pieces)."""

    layer: int  # 0-based decoder layer
    head: int
    positions: tuple[int, ...]


@dataclass(frozen=True)
class AttentionEdit:
    """Source positions blocked from every head of some decoder layers' cross-attention, and heads pinned."""

    blocked: tuple[int, ...] = ()
    layers: tuple[int, ...] = ()  # the 0-based decoder layers where `blocked` applies
    pins: tuple[Pin, ...] = ()

    @property
    def empty(self) -> bool:
        return not (self.blocked and self.layers) and not self.pins

    def checked(self, config_layers: int, n_heads: int, source_length: int) -> AttentionEdit:
        """The edit itself; ValueError naming what is out of this model's or source's range."""
        positions = [*self.blocked, *(p for pin in self.pins for p in pin.positions)]
        layers = [*self.layers, *(pin.layer for pin in self.pins)]
        if any(not 0 <= p < source_length for p in positions):
            raise ValueError(f"a source position is past the source's {source_length} pieces")
        if any(not 0 <= layer < config_layers for layer in layers):
            raise ValueError(f"a layer is past the decoder's {config_layers} layers")
        if any(not 0 <= pin.head < n_heads for pin in self.pins):
            raise ValueError(f"a head is past the {n_heads} heads of a layer")
        if any(not pin.positions for pin in self.pins):
            raise ValueError("a pinned head needs a source word to look at")
        return self

    def probe(self, model: Transformer, source_length: int) -> Probe:
        """The probe that makes this edit: each edited cross-attention sublayer's keys allowed per head."""
        config = model.config
        self.checked(config.n_decoder_layers, config.n_heads, source_length)
        masks: dict[tuple[AttentionKind, int], torch.Tensor] = {}

        def keys(layer: int) -> torch.Tensor:
            site = (AttentionKind.CROSS, layer)
            return masks.setdefault(site, torch.ones(config.n_heads, source_length, dtype=torch.bool))

        for layer in self.layers if self.blocked else ():
            keys(layer)[:, list(self.blocked)] = False
        for pin in self.pins:
            row = torch.zeros(source_length, dtype=torch.bool)
            row[list(pin.positions)] = True
            keys(pin.layer)[pin.head] &= row
        return Probe(key_masks=masks)


def edited_decode(
    model: Transformer, tokenizer: TokenizerBase, result: DecodeResult, step: int, edit: AttentionEdit
) -> DecodeResult:
    """`result`'s source decoded greedily with `edit` made at every step, its output up to `step` (0-based) kept."""
    return decode_ids(
        model,
        tokenizer,
        result.src_ids,
        strategy="greedy, attention edited",
        prefix=result.tgt_ids[:step],
        truncated=result.truncated,
        probe=edit.probe(model, len(result.src_ids)),
    )
