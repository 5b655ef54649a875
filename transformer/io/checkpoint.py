"""The single-file checkpoint: safetensors tensors plus string metadata, loaded as data only.

Specified completely in FORMAT.md: the model's tensors under their state-dict names (tied aliases
stored once), and `__metadata__` with `format`, `format_version`, `config` (JSON), `tokenizer`
(base64 SentencePiece model) and `metadata` (JSON: languages, data, training curves, scores).
Nothing in the file is ever executed.
"""

from __future__ import annotations

import base64
import glob
import io
import json
import os
import shutil
import struct
import tempfile
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, BinaryIO

import torch

from transformer.io.header import (
    CheckpointError,
    check_tensors,
    declared_size,
    read_file_header,
    read_header,
    stored_elements,
)
from transformer.io.memory import memory_available
from transformer.io.metadata import read_metadata
from transformer.io.tensor_bytes import header_bytes, tensor_in, write_tensors
from transformer.model.config import ConfigError, TransformerConfig, shown
from transformer.model.encoder_decoder import Transformer
from transformer.text.files import FileRefused, read_regular
from transformer.text.json_tokenizer import JsonTokenizer
from transformer.text.tokenizer import Tokenizer, TokenizerBase, TokenizerError

FORMAT_NAME = "transformer-explorer-checkpoint"
# FORMAT.md; versions 2 to 5 added the families' conventions to the config and 6 a source without its end token, each
# with the earlier version's defaults
FORMAT_VERSION = "6"
READABLE_VERSIONS = ("1", "2", "3", "4", "5", "6")
APP_ROOM_BYTES = 1024**3  # left free beside an opened checkpoint: the app, its visitors' decodes and maps
UNKNOWN_MEMORY_LIMIT = 2 * 1024**3  # the file limit where the machine does not say how much memory is free
COPY_BYTES = 8 * 1024**2  # what a metadata rewrite holds of the tensors at once
CHECKPOINT_DIR = Path(__file__).resolve().parents[2] / "checkpoints"
DEFAULT_CHECKPOINT = CHECKPOINT_DIR / "en-fr-general.safetensors"
# Shipped checkpoints that were renamed, by their former names: a link made before the rename still opens the same model.
RENAMED_CHECKPOINTS = {"en-fr": "en-fr-captions"}


class CheckpointTooLarge(CheckpointError):
    """A valid checkpoint whose model is larger than this load allows (an upload's limit, say)."""


class CheckpointWarning(UserWarning):
    """A checkpoint that loads but looks damaged (e.g. NaN weights)."""


@dataclass
class Checkpoint:
    """A loaded model with its tokenizer and the metadata written by training."""

    model: Transformer
    tokenizer: TokenizerBase
    metadata: dict[str, Any] = field(default_factory=dict)
    file_bytes: int = 0
    problems: tuple[str, ...] = ()  # what looks damaged though it loads (NaN weights): shown with the checkpoint

    @property
    def config(self) -> TransformerConfig:
        return self.model.config

    def same_model_as(self, other: Checkpoint) -> bool:
        """Whether two checkpoints hold the same network and vocabulary (epochs of one run, their mean): the
        weights may differ, and so may dropout, a training setting."""
        return self.config.same_model(other.config) and self.tokenizer.same_as(other.tokenizer)


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


def checkpoint_header(model: Transformer, tokenizer: TokenizerBase, metadata: dict[str, Any] | None) -> dict[str, str]:
    """The checkpoint format's metadata of a model: its config, tokenizer and the caller's metadata."""
    header = {
        "format": FORMAT_NAME,
        "format_version": FORMAT_VERSION,
        "config": model.config.to_json(),
        "metadata": json.dumps(metadata or {}, sort_keys=True),
    }
    if isinstance(tokenizer, JsonTokenizer):
        header["tokenizer_json"] = tokenizer.json_text
    else:
        header["tokenizer"] = base64.b64encode(tokenizer.model_proto).decode("ascii")
        if tokenizer.target_proto is not None:
            header["target_tokenizer"] = base64.b64encode(tokenizer.target_proto).decode("ascii")
        if tokenizer.vocabulary is not None:
            header["vocabulary"] = json.dumps(tokenizer.vocabulary, ensure_ascii=False)
    for key in ("source_prefix", "target_prefix"):
        if getattr(tokenizer, key) is not None:
            header[key] = getattr(tokenizer, key)
    if not tokenizer.source_eos:
        header["source_eos"] = "false"
    return header


def checkpoint_bytes(
    model: Transformer,
    tokenizer: TokenizerBase,
    metadata: dict[str, Any] | None = None,
    dtype: torch.dtype = torch.float32,
) -> bytes:
    """Serialises model, tokenizer and metadata into the checkpoint format, in memory."""
    buffer = io.BytesIO()
    write_tensors(buffer, unique_state(model), dtype, checkpoint_header(model, tokenizer, metadata))
    return buffer.getvalue()


def save_checkpoint(
    path: str | Path,
    model: Transformer,
    tokenizer: TokenizerBase,
    metadata: dict[str, Any] | None = None,
    dtype: torch.dtype = torch.float32,
) -> None:
    """Writes the checkpoint atomically, so a crash never leaves a half-written file, and a tensor at a time, so that
    saving holds one tensor's copy beside the model (tensor_bytes)."""
    header = checkpoint_header(model, tokenizer, metadata)
    write_atomically(Path(path), lambda handle: write_tensors(handle, unique_state(model), dtype, header))


def write_atomically(path: Path, data: bytes | Callable[[BinaryIO], None]) -> None:
    """Writes beside the target, then renames: readers see the old file or the new, never half. `data`: the bytes,
    or what writes them into the open file. A link is written through: its target is replaced, the link kept."""
    path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.NamedTemporaryFile(dir=path.parent, prefix=_temporary_prefix(path), delete=False) as handle:
        try:
            handle.write(data) if isinstance(data, bytes) else data(handle)
        except BaseException:  # a full disk or a Ctrl-C mid-write: the partial temporary goes too
            Path(handle.name).unlink()
            raise
    os.chmod(handle.name, 0o644)
    os.replace(handle.name, path)


def _temporary_prefix(path: Path) -> str:
    return f".{path.name}."


def remove_stale_temporaries(path: Path) -> list[Path]:
    """Deletes what saves of `path` killed mid-write left beside it; only for a process that owns `path`."""
    stale = sorted(path.parent.glob(glob.escape(_temporary_prefix(path)) + "*"))
    for temporary in stale:
        temporary.unlink(missing_ok=True)
    return stale


def update_metadata(path: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Rewrites a checkpoint's metadata in place: a new header, then its tensors' bytes copied through unchanged, a
    few MiB at a time (`evaluate` stores its scores so in a checkpoint of any size, beside the model it scored)."""
    entries = read_file_header(path)
    if path.stat().st_size != declared_size(path):  # the tensors' bytes are copied unread: a damaged file stays so
        raise CheckpointError(f"{path} is not the size its header describes: it is damaged, and was left as it is")
    metadata = json.loads(entries["__metadata__"].get("metadata", "{}"))
    change(metadata)
    entries["__metadata__"] = {**entries["__metadata__"], "metadata": json.dumps(metadata, sort_keys=True)}
    with path.open("rb") as source:
        source.seek(8 + struct.unpack("<Q", source.read(8))[0])  # the tensors' bytes: offsets count from here

        def write(handle: BinaryIO) -> None:
            handle.write(header_bytes(entries))
            shutil.copyfileobj(source, handle, COPY_BYTES)

        write_atomically(path, write)


def describe(path: str | Path) -> str:
    """A one-line label for a checkpoint file: its name, language pair and size."""
    path = Path(path)
    try:
        size = f"{path.stat().st_size / 1e6:.1f} MB"
        pair = read_metadata(json.loads(read_file_header(path)["__metadata__"].get("metadata", "{}"))).language_pair
    except (OSError, ValueError, RecursionError, AttributeError, TypeError):  # ValueError: CheckpointError too
        return f"{path.stem} · unreadable"
    return f"{path.stem} · {pair} · {size}"


def _metadata_field(metadata: dict[str, str], key: str) -> str:
    value = metadata.get(key)
    if not isinstance(value, str):
        raise CheckpointError(f"checkpoint metadata lacks '{key}'")
    return value


def _tokenizer(meta: dict[str, Any]) -> TokenizerBase:
    """The tokenizer of FORMAT.md section 3: one SentencePiece model, source and target ones over a vocabulary, or a
    tokenizer.json; with the language codes and the source's end it frames a text's ids with."""
    try:
        prefixes = [meta.get(key) for key in ("source_prefix", "target_prefix")]
        if not all(prefix is None or isinstance(prefix, str) for prefix in prefixes):
            raise TokenizerError("a language code is not a piece")
        if meta.get("source_eos", "true") not in ("true", "false"):
            raise TokenizerError(f"source_eos is {shown(meta['source_eos'])}, neither 'true' nor 'false'")
        tokenizer = _pieces_tokenizer(meta, prefixes)
    except (ValueError, TypeError, RecursionError) as error:  # bad base64 or JSON, non-ASCII text, a bad model
        raise CheckpointError(f"invalid tokenizer: {str(error)[:200]}") from None
    return tokenizer.without_source_eos() if meta.get("source_eos") == "false" else tokenizer


def _pieces_tokenizer(meta: dict[str, Any], prefixes: list[str | None]) -> TokenizerBase:
    if "tokenizer_json" in meta:
        return JsonTokenizer(_metadata_field(meta, "tokenizer_json"), *prefixes)
    model = base64.b64decode(_metadata_field(meta, "tokenizer"), validate=True)
    target = base64.b64decode(meta["target_tokenizer"], validate=True) if "target_tokenizer" in meta else None
    vocabulary = json.loads(meta["vocabulary"]) if "vocabulary" in meta else None
    if vocabulary is not None and not (isinstance(vocabulary, list) and all(isinstance(p, str) for p in vocabulary)):
        raise TokenizerError("the vocabulary is not a list of pieces")
    return Tokenizer(model, target, vocabulary, *prefixes)


# What a loaded tokenizer holds per byte of its text in the file, in numbers of 4 bytes (a model's unit): a
# tokenizer.json of 3.3M BPE merges held 31 bytes a byte; a SentencePiece model less.
TOKENIZER_ELEMENTS_PER_BYTE = 8
TOKENIZER_FIELDS = ("tokenizer", "target_tokenizer", "vocabulary", "tokenizer_json")
SOURCE_FIELDS = ("source_prefix", "target_prefix", "source_eos")  # how a text's ids are framed (FORMAT.md 3)


def load_cost(data: bytes) -> tuple[TransformerConfig, int]:
    """A checkpoint's config and what loading it holds, in numbers of 4 bytes: its parameters and position tables,
    and its tokenizer (from the length of its text); read from the header alone, before anything is built, so that
    a budget is consulted before the cost is paid. CheckpointError for a file that is no checkpoint."""
    header, config = _header_and_config(data)
    tokenizer_bytes = sum(len(str(header["__metadata__"].get(name, ""))) for name in TOKENIZER_FIELDS)
    return config, config.element_count() + TOKENIZER_ELEMENTS_PER_BYTE * tokenizer_bytes


def _header_and_config(data: bytes) -> tuple[dict[str, Any], TransformerConfig]:
    header = read_header(data)
    return header, _config_of(header)


def file_model(path: str | Path) -> tuple[TransformerConfig, tuple]:
    """A checkpoint file's config and tokenizer fields, from its header alone: what Checkpoint.same_model_as
    compares, known before any weights are read."""
    header = read_file_header(path)
    meta = header["__metadata__"]
    return _config_of(header), tuple(meta.get(name) for name in (*TOKENIZER_FIELDS, *SOURCE_FIELDS))


def _config_of(header: dict[str, Any]) -> TransformerConfig:
    meta = header["__metadata__"]
    if meta.get("format") != FORMAT_NAME:
        raise CheckpointError(
            f"not a checkpoint of this project (safetensors metadata 'format' is {shown(meta.get('format'))})"
        )
    if meta.get("format_version") not in READABLE_VERSIONS:
        raise CheckpointError(f"unsupported checkpoint format version {shown(meta.get('format_version'))}")
    try:
        return TransformerConfig.from_json(_metadata_field(meta, "config"))
    except ConfigError as error:
        raise CheckpointError(f"invalid config: {error}") from None


def load_checkpoint_bytes(data: bytes, device: torch.device | str = "cpu") -> Checkpoint:
    """Validates and loads a checkpoint held in memory; raises CheckpointError naming the problem.

    Everything is checked from the header before the model is built, so a refusal costs no allocation; what a
    load will hold is load_cost's, read from the header alone, for a caller with a budget (the app's uploads).
    """
    header, config = _header_and_config(data)
    meta = header["__metadata__"]
    check_tensors(header, config.parameter_shapes(), len(data) - 8 - struct.unpack("<Q", data[:8])[0])
    tokenizer = _tokenizer(meta)
    if tokenizer.vocab_size != config.src_vocab_size or tokenizer.vocab_size != config.tgt_vocab_size:
        raise CheckpointError(
            f"tokenizer has {tokenizer.vocab_size} pieces, the config expects {config.src_vocab_size}/{config.tgt_vocab_size}"
        )
    ids = (tokenizer.pad_id, tokenizer.unk_id, tokenizer.bos_id, tokenizer.eos_id)
    if ids != (config.pad_id, config.unk_id, config.bos_id, config.eos_id):
        raise CheckpointError(
            f"tokenizer's pad/unk/bos/eos ids are {'/'.join(map(str, ids))}, the config's "
            f"{config.pad_id}/{config.unk_id}/{config.bos_id}/{config.eos_id}"
        )
    try:
        metadata = json.loads(_metadata_field(meta, "metadata"))
    except (ValueError, RecursionError):  # also a number past Python's 4,300 digits
        raise CheckpointError("checkpoint metadata 'metadata' is not valid JSON") from None
    model, problems = model_from_tensors(config, tensors_of(data, header), device)
    metadata = metadata if isinstance(metadata, dict) else {}
    return Checkpoint(model, tokenizer, metadata, len(data), problems)


def tensors_of(data: bytes, header: dict[str, Any]) -> dict[str, torch.Tensor]:
    """Each tensor of a safetensors buffer whose header check_tensors passed, as a view of its bytes: nothing is
    copied until the model lays each weight out in memory of its own (Transformer.holding, which keeps no view),
    and the buffer goes with the last view. Copied out (safetensors' load), a file was held three times over at
    once: its bytes, their tensors and the weight being laid out (measured: docs/performance.md)."""
    body = 8 + struct.unpack("<Q", data[:8])[0]
    with warnings.catch_warnings():  # read, never written: every tensor the model keeps is a copy
        warnings.filterwarnings("ignore", message="The given buffer is not writable")
        return {
            name: tensor_in(data, body + entry["data_offsets"][0], entry["dtype"], tuple(entry["shape"]))
            for name, entry in header.items()
            if name != "__metadata__"
        }


def model_from_tensors(
    config: TransformerConfig, tensors: dict[str, torch.Tensor], device: torch.device | str
) -> tuple[Transformer, tuple[str, ...]]:
    """The read-only model in eval mode holding these (already checked) tensors, and what looks damaged in them
    (NaN or infinite weights: warned, and kept to show with the checkpoint). It takes the tensors: the dict is
    emptied, so that each weight's original is freed as the model lays it out (a 600M model is held once). The
    weights are checked once laid out: checked before, a memory-mapped file's every page was read in at once."""
    model = Transformer.holding(config, {name: tensors.pop(name).float() for name in list(tensors)})
    bad = [name for name, t in [*model.named_parameters(), *model.named_buffers()] if not all_finite(t)]
    problems = (f"checkpoint has NaN or infinite weights in {', '.join(bad[:5])}",) if bad else ()
    for problem in problems:
        warnings.warn(problem, CheckpointWarning, stacklevel=3)
    model.requires_grad_(False)
    return model.to(device).eval(), problems


def all_finite(tensor: torch.Tensor, rows: int = 4096) -> bool:
    """Whether a tensor holds no NaN or infinity, read a few rows at a time: isfinite of a whole tensor makes
    temporaries twice its size (its absolute values among them; measured: docs/performance.md)."""
    return all(bool(torch.isfinite(part).all()) for part in tensor.detach().reshape(-1, *tensor.shape[-1:]).split(rows))


def file_limit(available: int | None) -> int:
    """The largest checkpoint file that opens with `available` bytes free: opening holds the file's bytes and then
    its weights (twice its size at the peak, the weights alone after), with APP_ROOM_BYTES left for the app."""
    if available is None:
        return UNKNOWN_MEMORY_LIMIT
    return max(0, (available - APP_ROOM_BYTES) // 2)


LAID_OUT_BYTES = 4  # a weight's bytes once the model lays it out: float32, whatever the file stores (F16: twice)


def _check_room(path: Path, size: int, available: int) -> None:
    """CheckpointTooLarge unless the file's bytes and its weights laid out in float32 fit in `available` beside
    APP_ROOM_BYTES, from the header alone: file_limit's twice the file undercounts F16 and BF16 weights by half."""
    needed = size + LAID_OUT_BYTES * stored_elements(read_file_header(path))
    if needed + APP_ROOM_BYTES > available:
        raise CheckpointTooLarge(
            f"{path} is {size / 1e9:.2f} GB: opening it needs about {(needed + APP_ROOM_BYTES) / 1e9:.1f} GB of "
            f"memory (the file, then its weights in float32, and {APP_ROOM_BYTES / 2**30:g} GiB for the app) and "
            f"{available / 1e9:.1f} GB is free now"
        )


def load_checkpoint(path: str | Path, device: torch.device | str = "cpu", max_bytes: int | None = None) -> Checkpoint:
    """Reads the whole file once (a file replaced meanwhile cannot mix two versions) and loads it. Without
    max_bytes, a file is refused only where this machine has not the memory to open it now (`file_limit`)."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise CheckpointError(f"no checkpoint file at {path}")
    available = memory_available() if max_bytes is None else None
    limit = file_limit(available) if max_bytes is None else max_bytes
    try:
        size, declared = path.stat().st_size, declared_size(path)  # the header first: a hostile body stays unread
        if size != declared and size <= limit:
            raise CheckpointError(f"{path} is {size:,} bytes, but its header describes {declared:,}: it is damaged")
        if available is not None and size <= limit:
            _check_room(path, size, available)
        data = read_regular(path, limit)
    except FileRefused as error:
        if not error.over_limit or max_bytes is not None:
            raise CheckpointError(str(error)) from None
        size = path.stat().st_size
        free = "an unknown amount is free" if available is None else f"{available / 1e9:.1f} GB is free now"
        raise CheckpointTooLarge(
            f"{path} is {size / 1e9:.2f} GB: opening it needs about {(2 * size + APP_ROOM_BYTES) / 1e9:.1f} GB of "
            f"memory (the file, then its weights, and {APP_ROOM_BYTES / 2**30:g} GiB for the app) and {free}"
        ) from None
    return load_checkpoint_bytes(data, device)
