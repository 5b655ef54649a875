"""The model (Vaswani et al. 2017): config, the pure attention function, masks, layers; needs only torch."""

from transformer.model.config import ConfigError, TransformerConfig
from transformer.model.encoder_decoder import AttentionMaps, DecoderOutput, EncoderOutput, ModelOutput, Transformer
from transformer.model.kinds import AttentionKind

__all__ = [
    "AttentionKind",
    "AttentionMaps",
    "ConfigError",
    "DecoderOutput",
    "EncoderOutput",
    "ModelOutput",
    "Transformer",
    "TransformerConfig",
]
