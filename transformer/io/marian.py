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
import os
import re
import stat
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file

from transformer.io.checkpoint import Checkpoint, CheckpointError, model_from_tensors
from transformer.io.header import DTYPE_BYTES, read_file_header
from transformer.model.config import ConfigError, TransformerConfig, shown
from transformer.text.files import FileRefused, read_regular
from transformer.text.tokenizer import Tokenizer, TokenizerBase, TokenizerError

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
FINAL_NORMS = {"model.encoder.layer_norm": "encoder_norm", "model.decoder.layer_norm": "decoder_norm"}  # pre-norm's
LAYER_NAME = re.compile(r"model\.(encoder|decoder)\.layers\.(\d+)\.([a-z_0-9]+)\.(.+)")
# The most any file of a directory is read to, before anything is parsed: a config a few KB, a vocabulary of
# 250k pieces about 10 MB. A link to /dev/zero, a named pipe or a 5 GB "config" is refused, not read.
MAX_JSON_BYTES = 1 << 20
MAX_TOKENIZER_BYTES = 64 << 20


def regular_file(directory: Path, name: str) -> Path | None:
    """The real path of `name` in `directory`, or None if there is none; CheckpointError if it is not a regular
    file (a device, a pipe, a folder) or a link that leads out of the directory."""
    path = directory / name
    if not os.path.lexists(path):
        return None
    try:
        real = path.resolve(strict=True)
        mode = real.stat().st_mode
    except (OSError, RuntimeError) as error:  # a dangling or looping link
        raise CheckpointError(f"{name} in {directory.name} cannot be read: {error.__class__.__name__}") from None
    if not real.is_relative_to(directory.resolve()):
        raise CheckpointError(f"{name} in {directory.name} is a link that leads out of the directory: refused")
    if not stat.S_ISREG(mode):
        raise CheckpointError(f"{name} in {directory.name} is not a regular file: refused")
    return real


def read_bounded(directory: Path, name: str, limit: int) -> bytes:
    """A regular file's bytes, refused past `limit` without reading further; CheckpointError if missing."""
    path = regular_file(directory, name)
    if path is None:
        raise CheckpointError(f"{directory.name} has no {name}")
    try:
        return read_regular(path, limit)
    except FileRefused as error:
        reason = f"is over {limit / 2**20:g} MB: not read" if error.over_limit else error.reason
        raise CheckpointError(f"{name} in {directory.name} {reason}") from None


def read_json(directory: Path, name: str, limit: int = MAX_JSON_BYTES) -> Any:
    """A JSON file of the directory, bounded in size and depth."""
    try:
        return json.loads(read_bounded(directory, name, limit))
    except RecursionError:
        raise CheckpointError(f"{name} in {directory.name} is nested too deeply to be a model's file") from None
    except ValueError as error:  # not UTF-8, not JSON, or a number past Python's 4,300 digits
        raise CheckpointError(f"{name} in {directory.name} is not JSON: {str(error)[:120]}") from None


# config.json's fields that any importer reads as a count, a size or a token id, and as a rate or epsilon:
# each checked for its type before any is used (a list as d_kv was multiplied by num_heads into gigabytes).
INTEGER_FIELDS = frozenset({
    "vocab_size", "decoder_vocab_size", "d_model", "d_kv", "d_ff", "num_heads", "num_layers", "num_decoder_layers",
    "n_positions", "max_position_embeddings", "encoder_layers", "decoder_layers", "encoder_attention_heads",
    "decoder_attention_heads", "encoder_ffn_dim", "decoder_ffn_dim", "relative_attention_num_buckets",
    "relative_attention_max_distance", "pad_token_id", "bos_token_id", "eos_token_id", "decoder_start_token_id",
    "forced_bos_token_id",
})  # fmt: skip
REAL_FIELDS = frozenset({"dropout", "dropout_rate", "layer_norm_epsilon"})
MAX_CONFIG_INTEGER = 1 << 31


def read_config_json(directory: Path) -> dict[str, Any]:
    """The directory's config.json: an object whose counts, sizes and ids are integers and whose rates are numbers
    (null where Hugging Face writes it), each of a plausible size; CheckpointError naming the first that is not."""
    config = read_json(directory, "config.json")
    if not isinstance(config, dict):
        raise CheckpointError(f"{directory.name}: config.json is not an object")
    for name in sorted(INTEGER_FIELDS & config.keys()):
        value = config[name]
        if value is not None and (type(value) is not int or not -1 <= value < MAX_CONFIG_INTEGER):
            raise CheckpointError(
                f"{directory.name}: config.json's {name} is {str(value)[:20]}, not an integer "
                f"from -1 to {MAX_CONFIG_INTEGER:,}"
            )
    for name in sorted(REAL_FIELDS & config.keys()):
        value = config[name]
        if type(value) not in (int, float) or not 0 <= value < 1:
            raise CheckpointError(
                f"{directory.name}: config.json's {name} is {str(value)[:20]}, not a number from 0 to 1"
            )
    return config


def optional_object(directory: Path, name: str) -> dict[str, Any]:
    """A JSON object file the directory may hold (tokenizer_config.json, generation_config.json); {} when absent."""
    value = read_json(directory, name) if regular_file(directory, name) else {}
    if not isinstance(value, dict):
        raise CheckpointError(f"{directory.name}: {name} is not an object")
    return value


def check_special_ids(config: TransformerConfig, tokenizer: TokenizerBase, source: str) -> None:
    """config.json's pad, bos and eos ids must be the tokenizer's <pad>, <s> and </s> (read from `source`)."""
    ids = (config.pad_id, config.bos_id, config.eos_id)
    if ids != (tokenizer.pad_id, tokenizer.bos_id, tokenizer.eos_id):
        raise CheckpointError(
            f"config.json's pad/bos/eos ids {'/'.join(map(str, ids))} are not {source}'s <pad>/<s>/</s> "
            f"{tokenizer.pad_id}/{tokenizer.bos_id}/{tokenizer.eos_id}"
        )


def marian_config_json(path: Path) -> dict[str, Any] | None:
    """The `config.json` of a directory saved by Hugging Face for a Marian model, or None for anything else;
    CheckpointError for a hostile one (a config too deep, too large, not a regular file)."""
    if not path.is_dir() or regular_file(path, "config.json") is None:
        return None
    config = read_config_json(path)
    return config if config.get("model_type") == "marian" else None


def shape_problems(hf: dict[str, Any]) -> list[str]:
    """What a `config.json` of the BART-like families (Marian, M2M100) has that one config of this format cannot
    hold: encoder and decoder of different head counts or widths, an activation not read here."""
    problems = []
    if hf.get("encoder_attention_heads") != hf.get("decoder_attention_heads"):
        problems.append("different head counts in encoder and decoder")
    if hf.get("encoder_ffn_dim") != hf.get("decoder_ffn_dim"):
        problems.append("different feed-forward widths in encoder and decoder")
    if hf.get("activation_function") not in ACTIVATIONS:
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
        activation=ACTIVATIONS[hf["activation_function"]],
        scale_embedding=bool(hf.get("scale_embedding", False)),
        sinusoid_layout="halves",
        decoder_start_id=hf.get("decoder_start_token_id", pad),
    )


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
    state = {"src_embed.lookup.weight": embedding_matrix(tensors, EMBEDDINGS)}
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
    model, problems = model_from_tensors(config, state, device)
    return Checkpoint(model, tokenizer, metadata, sum(t.nbytes for t in state.values()), problems)


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


def hf_weights(directory: Path) -> dict[str, torch.Tensor]:
    if regular_file(directory, "model.safetensors") is not None:
        return _safetensors(directory, "model.safetensors")
    if regular_file(directory, "model.safetensors.index.json") is not None:
        index = read_json(directory, "model.safetensors.index.json", MAX_TOKENIZER_BYTES)
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(shard, str) for shard in weight_map.values()):
            raise CheckpointError(f"{directory.name}: model.safetensors.index.json has no weight_map of shard names")
        shards = sorted(set(weight_map.values()))
        return {name: tensor for shard in shards for name, tensor in _safetensors(directory, shard).items()}
    raise CheckpointError(
        f"{directory} has no model.safetensors; a pytorch_model.bin is a pickle and is not read. Convert it once with "
        "transformers: AutoModelForSeq2SeqLM.from_pretrained(DIR).save_pretrained(DIR)"
    )


def _safetensors(directory: Path, name: str) -> dict[str, torch.Tensor]:
    """One safetensors file of the directory (confined to it), with F32, F16 or BF16 tensors only."""
    path = regular_file(directory, name)
    if path is None:
        raise CheckpointError(f"{directory.name} lacks the weights file {name}")
    try:
        header = read_file_header(path, require_metadata=False)
    except CheckpointError as error:
        raise CheckpointError(f"{name} in {directory.name} is not a safetensors file: {error}") from None
    for tensor, entry in header.items():
        dtype = entry.get("dtype") if isinstance(entry, dict) else None
        if tensor != "__metadata__" and dtype not in DTYPE_BYTES:
            raise CheckpointError(
                f"{name}: the tensor {tensor[:80]} is {str(dtype)[:20]}; weights must be F32, F16 or BF16"
            )
    try:
        return load_file(path)
    except (SafetensorError, OSError, ValueError, RuntimeError) as error:
        raise CheckpointError(f"{name} in {directory.name} cannot be read: {str(error)[:200]}") from None


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
