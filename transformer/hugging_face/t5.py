"""Hugging Face T5, Flan-T5 and mT5 models in this project's format, read from the saved files alone.

T5 differs from the paper's model in every convention FORMAT.md version 5 makes a config field: RMS norms (pre-norm,
a final one on each side), no biases anywhere, scores not divided by sqrt(d_head), no positions added to the
embeddings but a learned bias per head and relative-distance bucket added to the self-attention scores (the first
layer's table, shared by every layer), ReLU (T5) or gated GELU (T5 v1.1, Flan-T5), and, in the original T5, the
decoder's output scaled by d_model^-0.5 before the tied output layer. The decoder starts from the pad token; the
tokenizer is a `tokenizer.json` (its embedding padded to a multiple of 128 rows: the rows past it are named).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from transformer.hugging_face.files import hf_weights, read_config_json
from transformer.hugging_face.seq2seq import checkpoint_from_state, embedding_matrix
from transformer.hugging_face.tokenizer_files import padded_json_tokenizer
from transformer.io.checkpoint import Checkpoint, CheckpointError
from transformer.model.config import ConfigError, TransformerConfig
from transformer.text.tokenizer import TokenizerBase

T5_ACTIVATION_NAMES = {"relu": "relu", "gelu": "gelu", "gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh",
               "silu": "swish", "swish": "swish"}  # fmt: skip
T5_EMBEDDING_NAMES = ("shared.weight", "encoder.embed_tokens.weight", "decoder.embed_tokens.weight")
BLOCK = re.compile(r"(encoder|decoder)\.block\.(\d+)\.layer\.(\d)\.(.+)\.weight")
# (side, sublayer index, HF name) -> ours, under {side}_layers.{i}
PARTS = {
    ("encoder", 0, "layer_norm"): "attn_block.norm",
    ("encoder", 1, "layer_norm"): "ff_block.norm",
    ("decoder", 0, "layer_norm"): "self_block.norm",
    ("decoder", 1, "layer_norm"): "cross_block.norm",
    ("decoder", 2, "layer_norm"): "ff_block.norm",
    **{(side, index, f"{module}.{theirs}"): f"{ours_module}.{ours}_proj"
       for side, index, module, ours_module in (("encoder", 0, "SelfAttention", "self_attn"),
                                                ("decoder", 0, "SelfAttention", "self_attn"),
                                                ("decoder", 1, "EncDecAttention", "cross_attn"))
       for theirs, ours in (("q", "q"), ("k", "k"), ("v", "v"), ("o", "out"))},
    **{(side, index, f"DenseReluDense.{theirs}"): f"feed_forward.{ours}"
       for side, index in (("encoder", 1), ("decoder", 2))
       for theirs, ours in (("wi", "inner"), ("wi_0", "inner"), ("wi_1", "gate"), ("wo", "outer"))},
}  # fmt: skip
SINGLES = {
    "encoder.final_layer_norm.weight": "encoder_norm.weight",
    "decoder.final_layer_norm.weight": "decoder_norm.weight",
    "encoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight": "src_position.relative_bias",
    "decoder.block.0.layer.0.SelfAttention.relative_attention_bias.weight": "tgt_position.relative_bias",
}


def t5_config(hf: dict[str, Any], tokenizer: TokenizerBase, untied: bool) -> TransformerConfig:
    """This project's config for a T5 `config.json`; ConfigError naming what it cannot express."""
    kind = str(hf.get("feed_forward_proj", "relu"))
    gated, activation = kind.startswith("gated-"), kind.removeprefix("gated-")
    activation = "gelu_new" if kind == "gated-gelu" else activation  # transformers' own reading of gated-gelu
    unsupported = []
    if activation not in T5_ACTIVATION_NAMES:
        unsupported.append(f"the activation {kind[:40]!r}")
    if hf.get("d_kv", 0) * hf.get("num_heads", 0) != hf.get("d_model"):
        unsupported.append("an attention width (num_heads x d_kv) other than d_model")
    if unsupported:
        raise ConfigError(f"this T5 model has {', '.join(unsupported)}, which this format cannot hold")
    # The original T5 scales its decoder's output (transformers 5 writes scale_decoder_outputs; 4 wrote
    # tie_word_embeddings true); T5 v1.1, Flan-T5 and mT5 do not.
    scale = hf.get("scale_decoder_outputs")
    if scale is None:
        scale = hf.get("model_type") == "t5" and hf.get("tie_word_embeddings", True) is not False
    return TransformerConfig(
        src_vocab_size=tokenizer.vocab_size,
        tgt_vocab_size=tokenizer.vocab_size,
        d_model=hf.get("d_model"),
        n_heads=hf.get("num_heads"),
        d_ff=hf.get("d_ff"),
        n_encoder_layers=hf.get("num_layers"),
        n_decoder_layers=hf.get("num_decoder_layers") or hf.get("num_layers"),
        dropout=float(hf.get("dropout_rate", 0.1)),
        max_len=hf.get("n_positions", 512),
        pad_id=hf.get("pad_token_id", 0),
        unk_id=tokenizer.unk_id,
        bos_id=tokenizer.bos_id,
        eos_id=hf.get("eos_token_id", 1),
        norm_first=True,
        tie_embeddings=not untied,
        positional="relative",
        activation=T5_ACTIVATION_NAMES[activation],
        layer_norm_eps=float(hf.get("layer_norm_epsilon", 1e-6)),
        scale_embedding=False,
        decoder_start_id=hf.get("decoder_start_token_id", 0),
        norm="rms",
        bias=False,
        attention_scale=False,
        feed_forward="gated" if gated else "plain",
        scale_output=bool(scale) and not untied,
        relative_buckets=hf.get("relative_attention_num_buckets", 32),
        relative_max_distance=hf.get("relative_attention_max_distance", 128),
    )


def import_t5(directory: str | Path, device: torch.device | str = "cpu") -> Checkpoint:
    """A T5, Flan-T5 or mT5 model directory (T5ForConditionalGeneration, MT5ForConditionalGeneration) as a
    checkpoint of this project."""
    directory = Path(directory)
    hf_config = read_config_json(directory)
    if hf_config.get("model_type") not in ("t5", "mt5"):
        raise CheckpointError(f"{directory} is not a Hugging Face T5 or mT5 model directory (model_type t5 or mt5)")
    tokenizer = padded_json_tokenizer(directory, hf_config.get("vocab_size"))
    weights = hf_weights(directory)
    embedding = embedding_matrix(weights, T5_EMBEDDING_NAMES)
    head = weights.get("lm_head.weight")
    untied = head is not None and not torch.equal(head, embedding)  # Flan-T5's own output layer
    try:
        config = t5_config(hf_config, tokenizer, untied)
    except (ConfigError, TypeError, ValueError, OverflowError) as error:
        raise CheckpointError(f"{directory.name}: config.json: {str(error)[:200]}") from None
    state = {"src_embed.lookup.weight": embedding}
    if untied:
        state |= {"tgt_embed.lookup.weight": embedding, "generator.weight": head}
    for name, tensor in weights.items():
        if name in SINGLES:
            state[SINGLES[name]] = tensor
            continue
        match = BLOCK.fullmatch(name)
        if match is None:
            continue  # the embeddings and the output layer, above
        side, index, sublayer, part = match.groups()
        ours = PARTS.get((side, int(sublayer), part))
        if ours is None:
            raise CheckpointError(f"unexpected tensor {name}: not a part of a T5 layer this format holds")
        state[f"{side}_layers.{index}.{ours}.weight"] = tensor
    family = "mT5" if hf_config["model_type"] == "mt5" else "T5"
    metadata = {"imported": {"from": f"Hugging Face {family}", "directory": directory.name}}
    del weights, embedding, head, tensor  # the state holds each tensor once: each original freed as it is laid out
    return checkpoint_from_state(config, state, tokenizer, metadata, device)
