"""The three kinds of attention in the model (section 3.2.3): the one place their names are interpreted."""

from __future__ import annotations

from enum import StrEnum

from torch import nn

from transformer.model.config import TransformerConfig


class AttentionKind(StrEnum):
    """Encoder self-attention, masked decoder self-attention, encoder-decoder (cross) attention.

    A StrEnum: its values ("encoder", "decoder", "cross") are what URLs, session state and files hold.
    """

    ENCODER = "encoder"
    DECODER = "decoder"
    CROSS = "cross"

    @classmethod
    def _missing_(cls, value: object) -> AttentionKind:
        raise ValueError(f"unknown attention kind {value!r}; expected one of {', '.join(cls)}")

    @property
    def title(self) -> str:
        return _TITLES[self]

    @property
    def masked(self) -> bool:
        """Whether a look-ahead mask hides later keys from each query."""
        return self is AttentionKind.DECODER

    @property
    def queries_from_source(self) -> bool:
        """Whether the queries are source positions (else the decoder input positions)."""
        return self is AttentionKind.ENCODER

    @property
    def keys_from_source(self) -> bool:
        """Whether the keys are source positions (else the decoder input positions)."""
        return self is not AttentionKind.DECODER

    def layers(self, config: TransformerConfig) -> int:
        """How many layers of this kind the model has: the encoder's, else the decoder's."""
        return config.n_encoder_layers if self is AttentionKind.ENCODER else config.n_decoder_layers

    def module(self, model: nn.Module, layer: int) -> nn.Module:
        """The model's attention module of this kind in the given layer."""
        if self is AttentionKind.ENCODER:
            return model.encoder_layers[layer].self_attn
        decoder_layer = model.decoder_layers[layer]
        return decoder_layer.self_attn if self is AttentionKind.DECODER else decoder_layer.cross_attn


_TITLES = {
    AttentionKind.ENCODER: "encoder self-attention",
    AttentionKind.DECODER: "decoder masked self-attention",
    AttentionKind.CROSS: "encoder-decoder attention",
}
