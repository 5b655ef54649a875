"""The shared, read-only checkpoints: found in the checkpoints folder (files and Hugging Face directories) or
uploaded in this session, each file loaded once per process (st.cache_resource) and never changed; their timelines,
tuned lenses and languages."""

from __future__ import annotations

import functools
from dataclasses import dataclass, replace
from pathlib import Path

import langcodes
import streamlit as st
import torch

from transformer.analysis.timeline import Timeline
from transformer.analysis.tuned_lens import TunedLens
from transformer.io.checkpoint import (
    CHECKPOINT_DIR,
    DEFAULT_CHECKPOINT,
    Checkpoint,
    describe,
)
from transformer.io.timeline_file import load_timeline, timeline_path
from transformer.io.tuned_lens_file import file_sha256, load_tuned_lens, tuned_lens_path
from transformer.toolkits.opening import describe_directory, is_model_directory, load_any_checkpoint


def serving_device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def checkpoint_files() -> dict[str, Path]:
    """Checkpoints in the checkpoints folder by name, the default first: files, then model directories (Hugging
    Face's, fairseq's)."""
    # Regular files only (is_file reads the inode, opening nothing): a pipe or a device named *.safetensors would
    # block or stream forever when its header is read for the list.
    files = sorted(
        (path for path in CHECKPOINT_DIR.glob("*.safetensors") if path.is_file()),
        key=lambda p: (p != DEFAULT_CHECKPOINT, p.name),
    )
    directories = sorted(path for path in CHECKPOINT_DIR.iterdir() if is_model_directory(path))
    return {path.stem: path for path in files} | {path.name: path for path in directories}


def describe_checkpoint(path: Path) -> str:
    """The checkpoint list's label: name, language pair, size, and the toolkit of a model directory."""
    return describe_directory(path) if path.is_dir() else describe(path)


@st.cache_resource(show_spinner=False, max_entries=8)
def _load_shared(path: str, modified_ns: int, device_name: str) -> Checkpoint:
    """One copy per process of each checkpoint file version (a replaced file has a new mtime and reloads)."""
    return load_any_checkpoint(path, device_name)


def load(path: Path) -> Checkpoint:
    return _load_shared(str(path), modified_ns(path), str(serving_device()))


@st.cache_resource(show_spinner=False, max_entries=4)
def _load_timeline(path: str, modified_ns: int) -> Timeline:
    """One copy per process of each timeline file version."""
    return load_timeline(path)


def timeline(name: str) -> Timeline | None:
    """The timeline of a shipped checkpoint (timelines/NAME.safetensors beside it), if it has one; a TimelineError
    where the file is there but cannot be read."""
    path = checkpoint_files().get(name)
    found = None if path is None or not path.is_file() else timeline_path(path)
    if found is None or not found.is_file():
        return None
    return _load_timeline(str(found), found.stat().st_mtime_ns)


@st.cache_resource(show_spinner=False, max_entries=8)
def _load_tuned_lens(lens_path: str, modified_ns: int, checkpoint_path: str, checkpoint_modified_ns: int) -> TunedLens:
    """One copy per process of a checkpoint file's tuned lens, checked against that very file."""
    path = Path(checkpoint_path)
    return load_tuned_lens(lens_path, load(path).model, file_sha256(path))


def tuned_lens(name: str) -> TunedLens | None:
    """The tuned lens fitted to a shipped checkpoint file (lenses/NAME.safetensors beside it), if it has one;
    a TunedLensError where the file is there but does not fit."""
    path = checkpoint_files().get(name)
    lens_path = None if path is None or not path.is_file() else tuned_lens_path(path)
    if lens_path is None or not lens_path.is_file():
        return None
    return _load_tuned_lens(str(lens_path), lens_path.stat().st_mtime_ns, str(path), path.stat().st_mtime_ns)


@dataclass(frozen=True)
class KeyedCheckpoint:
    """A checkpoint and the key that names its results in the caches (file and modification time, or upload digest)."""

    checkpoint: Checkpoint
    key: str
    cost: int = 0  # an upload's share of the budgets, in numbers of 4 bytes (see uploads.add_upload)
    ledger_key: int | None = None  # an upload's entry in the server's ledger (uploads.SERVER_UPLOADS)


def open_checkpoint(name: str) -> KeyedCheckpoint:
    """A shipped checkpoint file or one of this session's uploads, by its name in the checkpoint list."""
    uploads = st.session_state.get("uploads", {})
    if name in uploads:
        return uploads[name]
    path = checkpoint_files()[name]
    return KeyedCheckpoint(load(path), checkpoint_key(path))


def language_name(code: str) -> str:
    """A language code piece as people write it: M2M100's __fr__ is fr, mBART-50's fr_XX stays."""
    return code.strip("_")


@functools.lru_cache(maxsize=1024)
def language_display(code: str | None) -> str | None:
    """A language code's name, its script's with it ("English" for en, "Chinese (Simplified)" for zho_Hans), or None
    where it names no language. mBART-50's regions, as in ar_AR, are not the language's country: left out."""
    written = language_name(code) if code else ""
    try:
        tag = langcodes.Language.get(written.replace("_", "-"))
    except (LookupError, ValueError):  # not a language tag at all
        return None
    if not tag.language or not tag.is_valid():
        return None
    return langcodes.Language.make(language=tag.language, script=tag.script).display_name()


def language_label(code: str) -> str:
    """A language chooser's entry, found by typing the name or the code: "German · deu_Latn"; a code that names no
    language stays as it is."""
    name = language_display(code)
    return language_name(code) if name is None else f"{name} · {language_name(code)}"


def with_languages(opened: KeyedCheckpoint, source: str, target: str) -> KeyedCheckpoint:
    """A language-pair model (M2M100, mBART-50) translating from `source` into `target` (code pieces): the same
    shared model, a tokenizer with those codes, and a key of its own so that no cached result of another pair
    is shown."""
    tokenizer = opened.checkpoint.tokenizer
    if (source, target) == (tokenizer.source_prefix, tokenizer.target_prefix):
        return opened
    pair = {"src": language_name(source), "tgt": language_name(target)}
    checkpoint = replace(
        opened.checkpoint,
        tokenizer=tokenizer.with_prefixes(source, target),
        metadata=opened.checkpoint.metadata | {"languages": pair},
    )
    return KeyedCheckpoint(checkpoint, f"{opened.key}|{source}>{target}")


def modified_ns(path: Path) -> int:
    """When a checkpoint last changed: a file's modification time, or a model directory's newest among itself and its
    files (a checkpoint copied over another in place leaves the directory's own time as it was)."""
    if not path.is_dir():
        return path.stat().st_mtime_ns
    return max([path.stat().st_mtime_ns] + [file.stat().st_mtime_ns for file in path.iterdir() if file.is_file()])


def checkpoint_key(path: Path) -> str:
    return f"{path}:{modified_ns(path)}"
