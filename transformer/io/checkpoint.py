"""The single-file checkpoint: safetensors tensors plus string metadata, loaded as data only.

Layout (see docs/checkpoint-format.md): the model's tensors under their state-dict names
(tied aliases stored once), and `__metadata__` with `format`, `format_version`, `config`
(JSON), `tokenizer` (base64 SentencePiece model) and `metadata` (JSON: languages, data,
training curves, scores). Nothing in the file is ever executed.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import os
import struct
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from transformer.model.config import ConfigError, TransformerConfig
from transformer.model.encoder_decoder import Transformer
from transformer.text.tokenizer import Tokenizer, TokenizerError

FORMAT_NAME = "transformer-explorer-checkpoint"
FORMAT_VERSION = "1"
MAX_HEADER_BYTES = 64 * 1024 * 1024
DEFAULT_MAX_FILE_BYTES = 2 * 1024**3
CHECKPOINT_DIR = Path(__file__).resolve().parents[2] / "checkpoints"
DEFAULT_CHECKPOINT = CHECKPOINT_DIR / "en-fr.safetensors"
_DTYPE_BYTES = {"F16": 2, "BF16": 2, "F32": 4}


class CheckpointError(ValueError):
    """A file that is not a usable checkpoint; the message names the problem."""


class CheckpointTooLarge(CheckpointError):
    """A valid checkpoint whose model is larger than this load allows (an upload's limit, say)."""


class CheckpointWarning(UserWarning):
    """A checkpoint that loads but looks damaged (e.g. NaN weights)."""


@dataclass
class Checkpoint:
    """A loaded model with its tokenizer and the metadata written by training."""

    model: Transformer
    tokenizer: Tokenizer
    metadata: dict[str, Any] = field(default_factory=dict)
    file_bytes: int = 0

    @property
    def config(self) -> TransformerConfig:
        return self.model.config


def unique_state(model: Transformer) -> dict[str, torch.Tensor]:
    """The state dict with tied aliases dropped: one name per shared tensor."""
    seen: set[int] = set()
    state = {}
    for name, tensor in model.state_dict(keep_vars=True).items():
        if id(tensor) in seen:
            continue
        seen.add(id(tensor))
        state[name] = tensor
    return state


def checkpoint_bytes(
    model: Transformer, tokenizer: Tokenizer, metadata: dict[str, Any] | None = None, dtype: torch.dtype = torch.float32
) -> bytes:
    """Serialises model, tokenizer and metadata into the checkpoint format."""
    tensors = {name: t.detach().to("cpu", dtype).contiguous() for name, t in unique_state(model).items()}
    header = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "config": model.config.to_json(),
        "tokenizer": base64.b64encode(tokenizer.model_proto).decode("ascii"),
        "metadata": json.dumps(metadata or {}, sort_keys=True),
    }
    return save_safetensors(tensors, metadata=header)


def save_checkpoint(
    path: str | Path,
    model: Transformer,
    tokenizer: Tokenizer,
    metadata: dict[str, Any] | None = None,
    dtype: torch.dtype = torch.float32,
) -> None:
    """Writes the checkpoint atomically, so a crash never leaves a half-written file."""
    write_atomically(Path(path), checkpoint_bytes(model, tokenizer, metadata, dtype))


def write_atomically(path: Path, data: bytes) -> None:
    """Writes beside the target, then renames: readers see the old file or the new, never half."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=f".{path.name}.", delete=False) as handle:
        handle.write(data)
    os.chmod(handle.name, 0o644)
    os.replace(handle.name, path)


def update_metadata(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Rewrites a checkpoint's metadata in place, its tensors untouched (same dtype, same bytes)."""
    data = path.read_bytes()
    header = read_header(data)["__metadata__"]
    metadata = json.loads(header.get("metadata", "{}"))
    change(metadata)
    write_atomically(
        path,
        save_safetensors(load_safetensors(data), metadata={**header, "metadata": json.dumps(metadata, sort_keys=True)}),
    )


def _without_duplicates(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object whose names are unique: a repeated tensor name would otherwise let the last one win."""
    names = [name for name, _ in pairs]
    if len(set(names)) != len(names):
        raise CheckpointError(f"malformed header: the name {next(n for n in names if names.count(n) > 1)!r} repeats")
    return dict(pairs)


def read_header(data: bytes) -> dict[str, Any]:
    """The safetensors JSON header, checked for size and shape before anything is allocated."""
    if len(data) < 8:
        raise CheckpointError(f"file is truncated: {len(data)} bytes, too short for a safetensors header")
    if data[:2] == b"PK" or data[:1] == b"\x80":
        raise CheckpointError(
            "this looks like a PyTorch pickle/zip file; it is refused because loading one can execute code. "
            "Convert it to this project's safetensors format."
        )
    (header_bytes,) = struct.unpack("<Q", data[:8])
    if header_bytes > MAX_HEADER_BYTES:
        raise CheckpointError(f"not a checkpoint: header claims {header_bytes:,} bytes (limit {MAX_HEADER_BYTES:,})")
    if 8 + header_bytes > len(data):
        raise CheckpointError(f"file is truncated: header claims {header_bytes:,} bytes, file has {len(data) - 8:,}")
    try:
        header = json.loads(data[8 : 8 + header_bytes], object_pairs_hook=_without_duplicates)
    except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
        raise CheckpointError("not a checkpoint: the safetensors header is not valid JSON") from None
    if not isinstance(header, dict) or not isinstance(header.get("__metadata__"), dict):
        raise CheckpointError("not a checkpoint: the safetensors header has no metadata")
    return header


def read_file_header(path: str | Path) -> dict[str, Any]:
    """The header of a checkpoint file, reading only its first bytes (for listing files without loading them)."""
    with open(path, "rb") as file:
        prefix = file.read(8)
        if len(prefix) == 8:
            prefix += file.read(min(struct.unpack("<Q", prefix)[0], MAX_HEADER_BYTES + 1))
    return read_header(prefix)


def describe(path: str | Path) -> str:
    """A one-line label for a checkpoint file: its name, language pair and size."""
    path = Path(path)
    try:
        size = f"{path.stat().st_size / 1e6:.1f} MB"
        metadata = json.loads(read_file_header(path)["__metadata__"].get("metadata", "{}"))
        languages = metadata.get("languages", {})
        pair = f"{languages.get('src', '?')}→{languages.get('tgt', '?')}"
    except (CheckpointError, OSError, json.JSONDecodeError, AttributeError):
        return f"{path.stem} · unreadable"
    return f"{path.stem} · {pair} · {size}"


def expected_shapes(config: TransformerConfig) -> dict[str, tuple[int, ...]]:
    """Every stored tensor's name and shape, derived from the config alone: a file is checked against it
    before anything is allocated (equal to `unique_state` of the built model: a test holds them together)."""
    d = config.d_model
    shapes: dict[str, tuple[int, ...]] = {}

    def linear(name: str, fan_in: int, fan_out: int) -> None:
        shapes[f"{name}.weight"], shapes[f"{name}.bias"] = (fan_out, fan_in), (fan_out,)

    def norm(name: str) -> None:
        shapes[f"{name}.weight"] = shapes[f"{name}.bias"] = (d,)

    def block(prefix: str, attentions: tuple[str, ...], norms: tuple[str, ...]) -> None:
        for attention in attentions:
            for projection in ("q_proj", "k_proj", "v_proj", "out_proj"):
                linear(f"{prefix}.{attention}.{projection}", d, d)
        linear(f"{prefix}.feed_forward.inner", d, config.d_ff)
        linear(f"{prefix}.feed_forward.outer", config.d_ff, d)
        for name in norms:
            norm(f"{prefix}.{name}.norm")

    shapes["src_embed.lookup.weight"] = (config.src_vocab_size, d)
    if not config.tie_embeddings:
        shapes["tgt_embed.lookup.weight"] = (config.tgt_vocab_size, d)
    if config.positional == "learned":
        shapes["src_position.table"] = shapes["tgt_position.table"] = (config.max_len, d)
    for i in range(config.n_encoder_layers):
        block(f"encoder_layers.{i}", ("self_attn",), ("attn_block", "ff_block"))
    for i in range(config.n_decoder_layers):
        block(f"decoder_layers.{i}", ("self_attn", "cross_attn"), ("self_block", "cross_block", "ff_block"))
    if config.norm_first:
        norm("encoder_norm")
        norm("decoder_norm")
    if config.tie_embeddings:
        shapes["generator.bias"] = (config.tgt_vocab_size,)
    else:
        linear("generator", d, config.tgt_vocab_size)
    return shapes


def _is_int_list(value: Any, length: int | None = None) -> bool:
    return (
        isinstance(value, list)
        and (length is None or len(value) == length)
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in value)
    )


def _check_tensors(header: dict[str, Any], expected: dict[str, tuple[int, ...]], payload_bytes: int) -> None:
    """Names, shapes, dtypes and extents of the stored tensors against the config's, from the header alone.

    The extents must tile the payload exactly (as safetensors requires), so the tensors hold no more numbers
    than the file has bytes: a small file cannot make the loader allocate a large model.
    """
    stored = {name: entry for name, entry in header.items() if name != "__metadata__"}
    missing = sorted(set(expected) - set(stored))
    extra = sorted(set(stored) - set(expected))
    if missing or extra:
        raise CheckpointError(
            "tensors do not match the config: "
            + (f"missing {', '.join(missing[:5])}{' ...' if len(missing) > 5 else ''}; " if missing else "")
            + (f"unexpected {', '.join(extra[:5])}{' ...' if len(extra) > 5 else ''}" if extra else "")
        )
    extents = []
    for name, entry in stored.items():
        if not isinstance(entry, dict) or entry.get("dtype") not in _DTYPE_BYTES:
            raise CheckpointError(f"tensor {name}: unsupported or missing dtype")
        shape, offsets = entry.get("shape"), entry.get("data_offsets")
        if not _is_int_list(shape):
            raise CheckpointError(f"tensor {name}: malformed shape {shape!r}")
        if tuple(shape) != expected[name]:
            raise CheckpointError(f"tensor {name} has shape {shape}, the config needs {list(expected[name])}")
        if not _is_int_list(offsets, 2):
            raise CheckpointError(f"tensor {name}: malformed data offsets {offsets!r}")
        start, end = offsets
        if not start <= end <= payload_bytes or end - start != math.prod(shape) * _DTYPE_BYTES[entry["dtype"]]:
            raise CheckpointError(f"tensor {name}: data offsets are inconsistent (file truncated or corrupt)")
        extents.append((start, end))
    covered = 0
    for start, end in sorted(extents):
        if start != covered:
            raise CheckpointError("tensor data overlaps or leaves gaps (file corrupt or crafted)")
        covered = end
    if covered != payload_bytes:
        raise CheckpointError(f"tensor data covers {covered:,} of the file's {payload_bytes:,} payload bytes")


def _metadata_field(metadata: dict[str, str], key: str) -> str:
    value = metadata.get(key)
    if not isinstance(value, str):
        raise CheckpointError(f"checkpoint metadata lacks '{key}'")
    return value


def load_checkpoint_bytes(
    data: bytes, device: torch.device | str = "cpu", max_elements: int | None = None
) -> Checkpoint:
    """Validates and loads a checkpoint held in memory; raises CheckpointError naming the problem.

    Everything is checked from the header before the model is built, so a refusal costs no allocation;
    max_elements bounds what the model may allocate (parameters and position tables), e.g. for uploads.
    """
    header = read_header(data)
    meta = header["__metadata__"]
    if meta.get("format") != FORMAT_NAME:
        raise CheckpointError(
            f"not a checkpoint of this project (safetensors metadata 'format' is {meta.get('format')!r})"
        )
    if meta.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"unsupported checkpoint format version {meta.get('format_version')!r}")
    try:
        config = TransformerConfig.from_json(_metadata_field(meta, "config"))
    except ConfigError as error:
        raise CheckpointError(f"invalid config: {error}") from None
    if max_elements is not None and config.element_count() > max_elements:
        raise CheckpointTooLarge(
            f"the model is too large here: {config.element_count():,} parameters and position values, "
            f"over the limit of {max_elements:,}"
        )
    _check_tensors(header, expected_shapes(config), len(data) - 8 - struct.unpack("<Q", data[:8])[0])
    try:
        tokenizer = Tokenizer(base64.b64decode(_metadata_field(meta, "tokenizer"), validate=True))
    except (binascii.Error, TokenizerError) as error:
        raise CheckpointError(f"invalid tokenizer: {error}") from None
    if tokenizer.vocab_size != config.src_vocab_size or tokenizer.vocab_size != config.tgt_vocab_size:
        raise CheckpointError(
            f"tokenizer has {tokenizer.vocab_size} pieces, the config expects {config.src_vocab_size}/{config.tgt_vocab_size}"
        )
    try:
        metadata = json.loads(_metadata_field(meta, "metadata"))
    except json.JSONDecodeError:
        raise CheckpointError("checkpoint metadata 'metadata' is not valid JSON") from None
    model = Transformer(config)
    try:
        tensors = load_safetensors(data)
    except SafetensorError as error:
        raise CheckpointError(f"corrupt tensor data: {error}") from None
    bad = [name for name, t in tensors.items() if not torch.isfinite(t).all()]
    if bad:
        warnings.warn(
            f"checkpoint has NaN or infinite weights in {', '.join(bad[:5])}", CheckpointWarning, stacklevel=2
        )
    model.load_state_dict({name: t.float() for name, t in tensors.items()}, strict=False)
    model.requires_grad_(False)
    return Checkpoint(model.to(device).eval(), tokenizer, metadata if isinstance(metadata, dict) else {}, len(data))


def load_checkpoint(
    path: str | Path, device: torch.device | str = "cpu", max_bytes: int = DEFAULT_MAX_FILE_BYTES
) -> Checkpoint:
    """Reads the whole file once (a file replaced meanwhile cannot mix two versions) and loads it."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint file at {path}")
    size = path.stat().st_size
    if size > max_bytes:
        raise CheckpointError(f"{path.name} is {size:,} bytes, over the limit of {max_bytes:,}")
    return load_checkpoint_bytes(path.read_bytes(), device)
