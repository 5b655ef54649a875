"""Hugging Face Marian (opus-mt) models in this project's format, read from the saved files alone.

A directory written by `MarianMTModel.save_pretrained` and `MarianTokenizer.save_pretrained` holds
`config.json`, `model.safetensors` (or shards with an index), `source.spm`, `target.spm` and
`vocab.json`. Marian differs from the paper's model in conventions that FORMAT.md makes config
fields: its sinusoids in halves, swish, the embedding scale, a final logits bias, decoding that starts
from the pad token, and two SentencePiece models over one vocabulary. Nothing is imported from
`transformers` and nothing in the directory is executed (pickled `pytorch_model.bin` files are refused).
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file

from transformer.io.checkpoint import Checkpoint, CheckpointError, load_checkpoint, model_from_tensors
from transformer.model.config import ConfigError, TransformerConfig
from transformer.text.tokenizer import Tokenizer, TokenizerError

ACTIVATIONS = {"swish": "swish", "silu": "swish", "gelu": "gelu", "relu": "relu"}
EMBEDDINGS = ("model.shared.weight", "model.encoder.embed_tokens.weight", "model.decoder.embed_tokens.weight",
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
LAYER_NAME = re.compile(r"model\.(encoder|decoder)\.layers\.(\d+)\.([a-z_0-9]+)\.(.+)")


def is_marian_directory(path: Path) -> bool:
    """Whether path is a directory saved by Hugging Face for a Marian model."""
    try:
        return path.is_dir() and json.loads((path / "config.json").read_text()).get("model_type") == "marian"
    except (OSError, ValueError, AttributeError):
        return False


def marian_config(hf: dict[str, Any], vocabulary_size: int, unk_id: int) -> TransformerConfig:
    """This project's config for a Marian `config.json`; ConfigError naming what it cannot express."""
    unsupported = []
    if hf.get("encoder_attention_heads") != hf.get("decoder_attention_heads"):
        unsupported.append("different head counts in encoder and decoder")
    if hf.get("encoder_ffn_dim") != hf.get("decoder_ffn_dim"):
        unsupported.append("different feed-forward widths in encoder and decoder")
    if (
        not hf.get("share_encoder_decoder_embeddings", True)
        or hf.get("decoder_vocab_size", vocabulary_size) != vocabulary_size
    ):
        unsupported.append("separate source and target vocabularies")
    if not hf.get("tie_word_embeddings", True):
        unsupported.append("an output layer not tied to the embeddings")
    if hf.get("normalize_before") or hf.get("add_final_layer_norm") or hf.get("normalize_embedding"):
        unsupported.append("pre-norm or extra layer norms")
    if hf.get("activation_function") not in ACTIVATIONS:
        unsupported.append(f"the activation {hf.get('activation_function')!r}")
    if unsupported:
        raise ConfigError(f"this Marian model has {', '.join(unsupported)}, which this format cannot hold")
    pad = hf.get("pad_token_id")
    return TransformerConfig(
        src_vocab_size=vocabulary_size,
        tgt_vocab_size=vocabulary_size,
        d_model=hf.get("d_model"),
        n_heads=hf.get("encoder_attention_heads"),
        d_ff=hf.get("encoder_ffn_dim"),
        n_encoder_layers=hf.get("encoder_layers"),
        n_decoder_layers=hf.get("decoder_layers"),
        dropout=float(hf.get("dropout", 0.1)),
        max_len=hf.get("max_position_embeddings"),
        pad_id=pad,
        unk_id=unk_id,
        bos_id=pad,  # Marian has no <s>: its decoder starts from the pad token
        eos_id=hf.get("eos_token_id"),
        activation=ACTIVATIONS[hf["activation_function"]],
        scale_embedding=bool(hf.get("scale_embedding", False)),
        sinusoid_layout="halves",
        decoder_start_id=hf.get("decoder_start_token_id", pad),
    )


def marian_state(tensors: dict[str, torch.Tensor], config: TransformerConfig) -> dict[str, torch.Tensor]:
    """Marian's state dict under this project's names (FORMAT.md section 4)."""
    embedding = next((tensors[name] for name in EMBEDDINGS if name in tensors), None)
    if embedding is None:
        raise CheckpointError(f"no embedding matrix: expected one of {', '.join(EMBEDDINGS)}")
    state = {"src_embed.lookup.weight": embedding}
    bias = tensors.get("final_logits_bias")
    state["generator.bias"] = torch.zeros(config.tgt_vocab_size) if bias is None else bias.reshape(-1)
    for name, tensor in tensors.items():
        match = LAYER_NAME.fullmatch(name)
        if match is None:
            continue  # embeddings (above), and the fixed sinusoid tables Marian may store
        side, index, part, rest = match.groups()
        ours = LAYER_PARTS.get(part, {}).get(side)
        if ours is None:
            raise CheckpointError(f"unexpected tensor {name}: not a part of a Marian layer this format holds")
        state[f"{side}_layers.{index}.{ours}.{rest}"] = tensor
    return state


def load_checkpoint_or_marian(path: str | Path, device: torch.device | str = "cpu") -> Checkpoint:
    """A checkpoint file, or a Marian model directory converted as it is read (the CLI's and the app's --checkpoint)."""
    return import_marian(path, device) if Path(path).is_dir() else load_checkpoint(path, device)


def describe_marian(directory: Path) -> str:
    """A one-line label for a Marian directory, read without loading the model."""
    pair = _languages(directory)
    return f"{directory.name} · {pair.get('src', '?')}→{pair.get('tgt', '?')} · Hugging Face Marian"


def import_marian(directory: str | Path, device: torch.device | str = "cpu") -> Checkpoint:
    """A Marian model directory as a checkpoint of this project (save it with save_checkpoint)."""
    directory = Path(directory)
    if not is_marian_directory(directory):
        raise CheckpointError(
            f"{directory} is not a Hugging Face Marian model directory (config.json with model_type marian)"
        )
    hf_config = json.loads((directory / "config.json").read_text())
    tokenizer = _marian_tokenizer(directory)
    try:
        config = marian_config(hf_config, tokenizer.vocab_size, tokenizer.unk_id)
    except (ConfigError, TypeError) as error:
        raise CheckpointError(f"{directory}: {error}") from None
    if (config.pad_id, config.eos_id) != (tokenizer.pad_id, tokenizer.eos_id):
        raise CheckpointError(
            f"config.json's pad/eos ids {config.pad_id}/{config.eos_id} are not vocab.json's "
            f"<pad>/</s> {tokenizer.pad_id}/{tokenizer.eos_id}"
        )
    state = marian_state(_weights(directory), config)
    expected = config.parameter_shapes()
    wrong = [name for name in expected if name not in state or tuple(state[name].shape) != expected[name]]
    if wrong or set(state) - set(expected):
        raise CheckpointError(
            f"the weights do not fit the config: {', '.join((wrong or sorted(set(state) - set(expected)))[:5])}"
        )
    model, problems = model_from_tensors(config, state, device)
    metadata = {
        "languages": _languages(directory),
        "imported": {"from": "Hugging Face Marian", "directory": directory.name},
    }
    return Checkpoint(model, tokenizer, metadata, sum(t.nbytes for t in state.values()), problems)


def _marian_tokenizer(directory: Path) -> Tokenizer:
    files = {name: directory / name for name in ("source.spm", "target.spm", "vocab.json")}
    missing = [name for name, path in files.items() if not path.is_file()]
    if missing:
        raise CheckpointError(
            f"{directory} lacks the tokenizer files {', '.join(missing)} (MarianTokenizer.save_pretrained writes them)"
        )
    if (directory / "target_vocab.json").is_file():
        raise CheckpointError("separate source and target vocabularies (target_vocab.json) are not supported")
    try:
        index = json.loads(files["vocab.json"].read_text(encoding="utf-8"))
        pieces = sorted(index, key=index.__getitem__)
        if sorted(index.values()) != list(range(len(index))):
            raise TokenizerError("vocab.json's ids are not 0 to n-1, each once")
        return Tokenizer(files["source.spm"].read_bytes(), files["target.spm"].read_bytes(), pieces)
    except (ValueError, TypeError, AttributeError) as error:  # TokenizerError and JSONDecodeError are ValueErrors
        raise CheckpointError(f"{directory}: invalid tokenizer files: {str(error)[:200]}") from None


def _weights(directory: Path) -> dict[str, torch.Tensor]:
    single, index = directory / "model.safetensors", directory / "model.safetensors.index.json"
    if single.is_file():
        return load_file(single)
    if index.is_file():
        shards = sorted(set(json.loads(index.read_text())["weight_map"].values()))
        return {name: tensor for shard in shards for name, tensor in load_file(directory / shard).items()}
    raise CheckpointError(
        f"{directory} has no model.safetensors; a pytorch_model.bin is a pickle and is not read. Convert it once with "
        "transformers: MarianMTModel.from_pretrained(DIR).save_pretrained(DIR)"
    )


def _languages(directory: Path) -> dict[str, str]:
    """The language pair from tokenizer_config.json, or from an opus-mt name such as opus-mt-en-fr."""
    try:
        settings = json.loads((directory / "tokenizer_config.json").read_text())
        if settings.get("source_lang") and settings.get("target_lang"):
            return {"src": str(settings["source_lang"]), "tgt": str(settings["target_lang"])}
    except (OSError, ValueError, AttributeError):
        pass
    pair = re.search(r"opus-mt-([a-z]+)-([a-z]+)$", directory.name)
    return {"src": pair.group(1), "tgt": pair.group(2)} if pair else {}
