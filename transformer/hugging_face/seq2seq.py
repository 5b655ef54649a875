"""What the BART-like families (Marian, M2M100, mBART-50, BART) share: their weights' names and how they map to
this project's (FORMAT.md section 4), their shape fields, and the checkpoint an importer makes of a state (T5's too)."""

from __future__ import annotations

import re
from typing import Any

import torch

from transformer.io.checkpoint import Checkpoint, CheckpointError, model_from_tensors
from transformer.model.config import TransformerConfig, shown
from transformer.text.tokenizer import Tokenizer, TokenizerBase

ACTIVATION_NAMES = {"swish": "swish", "silu": "swish", "gelu": "gelu", "relu": "relu"}
EMBEDDING_NAMES = ("model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
              "lm_head.weight")  # fmt: skip  # one matrix under any of these names when tied
LAYER_PARTS = {
    "self_attn_layer_norm": {"encoder": "attn_block.norm", "decoder": "self_block.norm"},
    "encoder_attn_layer_norm": {"decoder": "cross_block.norm"},
    "encoder_attn": {"decoder": "cross_attn"},
    "self_attn": {"encoder": "self_attn", "decoder": "self_attn"},
    "fc1": {"encoder": "feed_forward.inner", "decoder": "feed_forward.inner"},
    "fc2": {"encoder": "feed_forward.outer", "decoder": "feed_forward.outer"},
    "final_layer_norm": {"encoder": "ff_block.norm", "decoder": "ff_block.norm"},
}
FINAL_NORMS = {"model.encoder.layer_norm": "encoder_norm", "model.decoder.layer_norm": "decoder_norm"}  # pre-norm's
SIDE_NORMS = {  # a layer norm on each side's embedded input (BART's, mBART's, fairseq's layernorm_embedding)
    "model.encoder.layernorm_embedding": "src_position.norm",
    "model.decoder.layernorm_embedding": "tgt_position.norm",
}
POSITION_TABLES = {  # learned positions (BART's, mBART's, fairseq's --*-learned-pos)
    "model.encoder.embed_positions.weight": "src_position.table",
    "model.decoder.embed_positions.weight": "tgt_position.table",
}
LAYER_NAME = re.compile(r"model\.(encoder|decoder)\.layers\.(\d+)\.([a-z_0-9]+)\.(.+)")


def check_special_ids(config: TransformerConfig, tokenizer: TokenizerBase, source: str) -> None:
    """config.json's pad, bos and eos ids must be the tokenizer's <pad>, <s> and </s> (read from `source`)."""
    ids = (config.pad_id, config.bos_id, config.eos_id)
    if ids != (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id):
        raise CheckpointError(
            f"config.json's pad/bos/eos ids {'/'.join(map(str, ids))} are not {source}'s <pad>/<s>/</s> "
            f"{tokenizer.pad_id}/{tokenizer.bos_id}/{tokenizer.eos_id}"
        )


def shape_problems(hf: dict[str, Any]) -> list[str]:
    """What a `config.json` of the BART-like families (Marian, M2M100) has that one config of this format cannot
    hold: encoder and decoder of different head counts or widths, an activation not read here."""
    problems = []
    if hf.get("encoder_attention_heads") != hf.get("decoder_attention_heads"):
        problems.append("different head counts in encoder and decoder")
    if hf.get("encoder_ffn_dim") != hf.get("decoder_ffn_dim"):
        problems.append("different feed-forward widths in encoder and decoder")
    if hf.get("activation_function") not in ACTIVATION_NAMES:
        problems.append(f"the activation {shown(hf.get('activation_function'))}")
    return problems


def shape_fields(hf: dict[str, Any], vocabulary_size: int) -> dict[str, Any]:
    """The sizes of a BART-like `config.json` as this project's config fields (one vocabulary for both sides)."""
    return {
        "src_vocab_size": vocabulary_size,
        "tgt_vocab_size": vocabulary_size,
        "d_model": hf.get("d_model"),
        "n_heads": hf.get("encoder_attention_heads"),
        "d_ff": hf.get("encoder_ffn_dim"),
        "n_encoder_layers": hf.get("encoder_layers"),
        "n_decoder_layers": hf.get("decoder_layers"),
        "dropout": float(hf.get("dropout", 0.1)),
        "max_len": hf.get("max_position_embeddings"),
    }


def embedding_matrix(tensors: dict[str, torch.Tensor], names: tuple[str, ...]) -> torch.Tensor:
    """The shared embedding under the first of a family's names for it that the file has."""
    embedding = next((tensors[name] for name in names if name in tensors), None)
    if embedding is None:
        raise CheckpointError(f"no embedding matrix: expected one of {', '.join(names)}")
    return embedding


def marian_state(
    tensors: dict[str, torch.Tensor], config: TransformerConfig, extra: dict[str, str] | None = None
) -> dict[str, torch.Tensor]:
    """Marian's state dict under this project's names (FORMAT.md section 4); `extra` names other tensors a family
    of the same layout has (M2M100's final layer norms) and what they are called here."""
    state = {"src_embed.lookup.weight": embedding_matrix(tensors, EMBEDDING_NAMES)}
    bias = tensors.get("final_logits_bias")
    state["generator.bias"] = torch.zeros(config.tgt_vocab_size) if bias is None else bias.reshape(-1)
    for name, tensor in tensors.items():
        prefix, _, leaf = name.rpartition(".")
        if extra and prefix in extra:
            state[f"{extra[prefix]}.{leaf}"] = tensor
            continue
        match = LAYER_NAME.fullmatch(name)
        if match is None:
            continue  # embeddings (above), and the fixed sinusoid tables Marian may store
        side, index, part, rest = match.groups()
        ours = LAYER_PARTS.get(part, {}).get(side)
        if ours is None:
            raise CheckpointError(f"unexpected tensor {name}: not a part of a Marian layer this format holds")
        state[f"{side}_layers.{index}.{ours}.{rest}"] = tensor
    return state


def checkpoint_from_state(
    config: TransformerConfig,
    state: dict[str, torch.Tensor],
    tokenizer: Tokenizer,
    metadata: dict[str, Any],
    device: torch.device | str = "cpu",
) -> Checkpoint:
    """An imported model, once its tensors are exactly those its config describes (a config.json that lies about
    its tensors is refused, naming them)."""
    expected = config.parameter_shapes()
    wrong = [name for name in expected if name not in state or tuple(state[name].shape) != expected[name]]
    if wrong or set(state) - set(expected):
        raise CheckpointError(
            f"the weights do not fit the config: {', '.join((wrong or sorted(set(state) - set(expected)))[:5])}"
        )
    size = sum(t.nbytes for t in state.values())
    model, problems = model_from_tensors(config, state, device)
    return Checkpoint(model, tokenizer, metadata, size, problems)
