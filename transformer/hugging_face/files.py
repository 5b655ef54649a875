"""A Hugging Face model directory read as hostile input: regular files only, links kept inside the directory,
every file read up to a cap and JSON nesting bounded, config.json's numbers type-checked, weights from safetensors
files (one, or shards named by an index) and never from pickles. Every family's importer reads through here."""

from __future__ import annotations

import json
import math
import mmap
import os
import stat
import struct
from pathlib import Path
from typing import Any

import torch

from transformer.io.checkpoint import (
    APP_ROOM_BYTES,
    LAID_OUT_BYTES,
    CheckpointError,
    CheckpointTooLarge,
)
from transformer.io.header import DTYPE_BYTES, check_tensors, is_int_list, read_file_header
from transformer.io.memory import memory_available
from transformer.io.tensor_bytes import tensor_in
from transformer.text.files import FileRefused, open_regular, read_regular

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


def files_matching(directory: Path, pattern: str, leaving_out: str | None = None) -> list[Path]:
    """The directory's files whose names match the glob `pattern` (but not the glob `leaving_out`), by their names
    there, in order, each confined to the directory as regular_file confines one (CheckpointError for a link that
    leads out of it, a pipe, a device): how every reader finds a file it looks for by kind rather than by name."""
    names = sorted(p.name for p in directory.glob(pattern) if not (leaving_out and p.match(leaving_out)))
    return [directory / name for name in names if regular_file(directory, name) is not None]


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


def hf_weights(directory: Path) -> dict[str, torch.Tensor]:
    """The directory's weights, each mapped from its file (nothing read yet); CheckpointTooLarge where laying them out
    would not fit in the memory free now (a model past it was killed mid-import, and a server with it)."""
    if regular_file(directory, "model.safetensors") is not None:
        return safetensors_weights(directory, ["model.safetensors"])
    if regular_file(directory, "model.safetensors.index.json") is not None:
        index = read_json(directory, "model.safetensors.index.json", MAX_TOKENIZER_BYTES)
        weight_map = index.get("weight_map") if isinstance(index, dict) else None
        if not isinstance(weight_map, dict) or not all(isinstance(shard, str) for shard in weight_map.values()):
            raise CheckpointError(f"{directory.name}: model.safetensors.index.json has no weight_map of shard names")
        return safetensors_weights(directory, sorted(set(weight_map.values())))
    raise CheckpointError(
        f"{directory} has no model.safetensors; a pytorch_model.bin is a pickle and is not read. Convert it once with "
        "transformers: AutoModelForSeq2SeqLM.from_pretrained(DIR).save_pretrained(DIR)"
    )


def safetensors_weights(directory: Path, shards: list[str]) -> dict[str, torch.Tensor]:
    """The tensors of the directory's safetensors files `shards`, each mapped from its file (nothing read yet), if
    the model laid out from them fits in the memory free now (else CheckpointTooLarge)."""
    weights = {name: t for shard in shards for name, t in _safetensors(directory, shard).items()}
    return weights_fitting(directory.name, weights)


def weights_fitting(name: str, weights: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """`weights`, if the model laid out from them (in float32, whatever the file stores: the import holds them
    once) fits in the memory free now beside APP_ROOM_BYTES for the app; else CheckpointTooLarge, naming the model
    (`name`), saying what it needs and what is free."""
    check_room(name, sum(tensor.numel() for tensor in weights.values()))
    return weights


def check_room(name: str, elements: int) -> None:
    """CheckpointTooLarge unless `elements` weights laid out in float32 fit in the memory free now beside
    APP_ROOM_BYTES for the app (a reader that knows the count before reading anything asks with it)."""
    needed = LAID_OUT_BYTES * elements
    available = memory_available()
    if available is not None and needed + APP_ROOM_BYTES > available:
        raise CheckpointTooLarge(
            f"{name}: its weights need {needed / 1e9:.1f} GB of memory once laid out, with "
            f"{APP_ROOM_BYTES / 2**30:g} GiB kept for the app, and {available / 1e9:.1f} GB is free now: not opened"
        )


def _safetensors(directory: Path, name: str) -> dict[str, torch.Tensor]:
    """One safetensors file of the directory (confined to it), with F32, F16 or BF16 tensors only, each mapped on its
    own (read_tensors)."""
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
        return read_tensors(path, header)
    except CheckpointError as error:
        raise CheckpointError(f"{name} in {directory.name} cannot be read: {error}") from None
    except (OSError, FileRefused) as error:
        raise CheckpointError(f"{name} in {directory.name} cannot be read: {str(error)[:200]}") from None


def read_tensors(path: Path, header: dict[str, Any]) -> dict[str, torch.Tensor]:
    """A safetensors file's tensors, once its header's shapes and extents are checked to tile the file's body
    (check_tensors), each memory-mapped on its own (copy on write: the file is never written).

    A mapping of the whole file (safetensors' load_file) stays in the process until every tensor taken from it is
    gone, so the file stayed resident beside the weights laid out from it (measured: docs/performance.md); a mapping
    per tensor goes with its tensor, as the model lays each weight out. Read into memory instead, the originals
    freed among the laid-out copies left the heap holding memory it did not give back."""
    stored = {name: entry for name, entry in header.items() if name != "__metadata__"}
    shapes = {name: tuple(entry["shape"]) if is_int_list(entry.get("shape")) else () for name, entry in stored.items()}
    with open_regular(path) as file:
        (length,) = struct.unpack("<Q", file.read(8))
        check_tensors(header, shapes, os.fstat(file.fileno()).st_size - 8 - length)
        return {
            name: _mapped(file.fileno(), 8 + length + entry["data_offsets"][0], entry["dtype"], shapes[name])
            for name, entry in stored.items()
        }


def _mapped(descriptor: int, offset: int, dtype: str, shape: tuple[int, ...]) -> torch.Tensor:
    """The tensor at `offset` of the open file, in a mapping of its own pages that it keeps alive."""
    size = math.prod(shape) * DTYPE_BYTES[dtype]
    if size == 0:
        return tensor_in(b"", 0, dtype, shape)
    page = offset - offset % mmap.ALLOCATIONGRANULARITY
    mapping = mmap.mmap(descriptor, offset - page + size, offset=page, access=mmap.ACCESS_COPY)
    return tensor_in(mapping, offset - page, dtype, shape)
