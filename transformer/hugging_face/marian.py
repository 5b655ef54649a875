"""Hugging Face Marian (opus-mt) models in this project's format, read from the saved files alone.

A directory written by `MarianMTModel.save_pretrained` and `MarianTokenizer.save_pretrained` holds
`config.json`, `model.safetensors` (or shards with an index), `source.spm`, `target.spm` and
`vocab.json`. Marian differs from the paper's model in conventions that FORMAT.md makes config
fields: its sinusoids in halves, swish, the embedding scale, a final logits bias, decoding that starts
from the pad token, and two SentencePiece models over one vocabulary. Nothing is imported from
`transformers` and nothing in the directory is executed (pickled `pytorch_model.bin` files are refused).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from transformer.hugging_face.files import (
    MAX_TOKENIZER_BYTES,
    hf_weights,
    read_bounded,
    read_config_json,
    read_json,
    regular_file,
)
from transformer.hugging_face.seq2seq import (
    ACTIVATION_NAMES,
    checkpoint_from_state,
    marian_state,
    shape_fields,
    shape_problems,
)
from transformer.io.checkpoint import Checkpoint, CheckpointError
from transformer.model.config import ConfigError, TransformerConfig
from transformer.text.tokenizer import Tokenizer, TokenizerError


def marian_config_json(path: Path) -> dict[str, Any] | None:
    """The `config.json` of a directory saved by Hugging Face for a Marian model, or None for anything else;
    CheckpointError for a hostile one (a config too deep, too large, not a regular file)."""
    if not path.is_dir() or regular_file(path, "config.json") is None:
        return None
    config = read_config_json(path)
    return config if config.get("model_type") == "marian" else None


def marian_config(
    hf: dict[str, Any], vocabulary_size: int, unk_id: int, bos_id: int | None = None
) -> TransformerConfig:
    """This project's config for a Marian `config.json`; ConfigError naming what it cannot express."""
    unsupported = shape_problems(hf)
    if (
        not hf.get("share_encoder_decoder_embeddings", True)
        or hf.get("decoder_vocab_size", vocabulary_size) != vocabulary_size
    ):
        unsupported.append("separate source and target vocabularies")
    if not hf.get("tie_word_embeddings", True):
        unsupported.append("an output layer not tied to the embeddings")
    if hf.get("normalize_before") or hf.get("add_final_layer_norm") or hf.get("normalize_embedding"):
        unsupported.append("pre-norm or extra layer norms")
    if unsupported:
        raise ConfigError(f"this Marian model has {', '.join(unsupported)}, which this format cannot hold")
    pad = hf.get("pad_token_id")
    return TransformerConfig(
        **shape_fields(hf, vocabulary_size),
        pad_id=pad,
        unk_id=unk_id,
        # Marian decodes from decoder_start_token_id (the pad token); a vocabulary's <s> piece, where it has one, is
        # only the id the tokenizer leaves out of text, and the file's tokenizer and config must agree on it.
        bos_id=pad if bos_id is None else bos_id,
        eos_id=hf.get("eos_token_id"),
        activation=ACTIVATION_NAMES[hf["activation_function"]],
        scale_embedding=bool(hf.get("scale_embedding", False)),
        sinusoid_layout="halves",
        decoder_start_id=hf.get("decoder_start_token_id", pad),
    )


def describe_marian(directory: Path) -> str:
    """A one-line label for a Marian directory, read without loading the model."""
    pair = _languages(directory)
    return f"{directory.name} · {pair.get('src', '?')}→{pair.get('tgt', '?')} · Hugging Face Marian"


def import_marian(directory: str | Path, device: torch.device | str = "cpu") -> Checkpoint:
    """A Marian model directory as a checkpoint of this project (save it with save_checkpoint)."""
    directory = Path(directory)
    hf_config = marian_config_json(directory)
    if hf_config is None:
        raise CheckpointError(
            f"{directory} is not a Hugging Face Marian model directory (config.json with model_type marian)"
        )
    tokenizer = _marian_tokenizer(directory)
    try:
        config = marian_config(hf_config, tokenizer.vocab_size, tokenizer.unk_id, tokenizer.bos_id)
    except (ConfigError, TypeError, ValueError, OverflowError) as error:
        raise CheckpointError(f"{directory.name}: config.json: {str(error)[:200]}") from None
    if (config.pad_id, config.eos_id) != (tokenizer.pad_id, tokenizer.eos_id):
        raise CheckpointError(
            f"config.json's pad/eos ids {config.pad_id}/{config.eos_id} are not vocab.json's "
            f"<pad>/</s> {tokenizer.pad_id}/{tokenizer.eos_id}"
        )
    metadata = {
        "languages": _languages(directory),
        "imported": {"from": "Hugging Face Marian", "directory": directory.name},
    }
    return checkpoint_from_state(config, marian_state(hf_weights(directory), config), tokenizer, metadata, device)


def _marian_tokenizer(directory: Path) -> Tokenizer:
    names = ("source.spm", "target.spm", "vocab.json")
    missing = [name for name in names if regular_file(directory, name) is None]
    if missing:
        raise CheckpointError(
            f"{directory} lacks the tokenizer files {', '.join(missing)} (MarianTokenizer.save_pretrained writes them)"
        )
    if regular_file(directory, "target_vocab.json") is not None:
        raise CheckpointError("separate source and target vocabularies (target_vocab.json) are not supported")
    index = read_json(directory, "vocab.json", MAX_TOKENIZER_BYTES)
    if not isinstance(index, dict) or not all(type(i) is int for i in index.values()):
        raise CheckpointError(f"{directory.name}: vocab.json is not an object of pieces and whole-number ids")
    if sorted(index.values()) != list(range(len(index))):
        raise CheckpointError(f"{directory.name}: vocab.json's ids are not 0 to n-1, each once")
    pieces = sorted(index, key=index.__getitem__)
    source, target = (read_bounded(directory, name, MAX_TOKENIZER_BYTES) for name in names[:2])
    try:
        return Tokenizer(source, target, pieces)
    except TokenizerError as error:
        raise CheckpointError(f"{directory.name}: invalid tokenizer files: {str(error)[:200]}") from None


def _languages(directory: Path) -> dict[str, str]:
    """The language pair from tokenizer_config.json, or from an opus-mt name such as opus-mt-en-fr."""
    try:
        settings = read_json(directory, "tokenizer_config.json")
        if isinstance(settings, dict) and settings.get("source_lang") and settings.get("target_lang"):
            return {"src": str(settings["source_lang"])[:20], "tgt": str(settings["target_lang"])[:20]}
    except CheckpointError:
        pass
    pair = re.search(r"opus-mt-([a-z]+)-([a-z]+)$", directory.name)
    return {"src": pair.group(1), "tgt": pair.group(2)} if pair else {}
