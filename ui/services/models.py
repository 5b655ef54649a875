"""The shared, read-only models and every model call a page makes, cached: pages only read.

A checkpoint file is loaded once per process (st.cache_resource) and never mutated. Results are
immutable values, so visitors asking the same question share one (ui.services.cache, bounded by bytes and age);
stepping, switching pages or choosing a layer only reads them.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import langcodes
import numpy as np
import streamlit as st
import torch

from transformer.analysis.alignment import Method, pair_matrix
from transformer.analysis.attribution import Attribution, attribute, contrastive
from transformer.analysis.timeline import Timeline
from transformer.analysis.tuned_lens import TunedLens, file_sha256, load_tuned_lens, read_with, tuned_lens_path
from transformer.analysis.walkthrough import SublayerInputs, sublayer_inputs
from transformer.decoding.candidate_words import candidate_words
from transformer.decoding.forcing import teacher_force, teacher_force_ids
from transformer.decoding.greedy import decode
from transformer.decoding.lens import LogitLens
from transformer.decoding.result import DecodeResult
from transformer.decoding.settings import DecodeSettings, decode_text
from transformer.hugging_face.directory import describe_hf, is_hf_directory, load_checkpoint_or_hf
from transformer.io.checkpoint import (
    CHECKPOINT_DIR,
    DEFAULT_CHECKPOINT,
    Checkpoint,
    CheckpointError,
    describe,
)
from transformer.io.timeline_file import load_timeline, timeline_path
from transformer.model.probes import Probe
from transformer.training.snapshots import sentence_timeline, snapshot_files
from transformer.viz.report import html_report
from ui.services.cache import RESULTS
from ui.services.work import heavy_job
from ui.widgets.text import literal


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def checkpoint_files() -> dict[str, Path]:
    """Checkpoints in the checkpoints folder by name, the default first: files, and Marian model directories."""
    # Regular files only (is_file reads the inode, opening nothing): a pipe or a device named *.safetensors would
    # block or stream forever when its header is read for the list.
    files = sorted(
        (path for path in CHECKPOINT_DIR.glob("*.safetensors") if path.is_file()),
        key=lambda p: (p != DEFAULT_CHECKPOINT, p.name),
    )
    directories = sorted(path for path in CHECKPOINT_DIR.iterdir() if is_hf_directory(path))
    return {path.stem: path for path in files} | {path.name: path for path in directories}


def describe_checkpoint(path: Path) -> str:
    """The checkpoint list's label: name, language pair, size, or that it is a Hugging Face Marian model."""
    return describe_hf(path) if path.is_dir() else describe(path)


@st.cache_resource(show_spinner=False, max_entries=8)
def _load_shared(path: str, modified_ns: int, device_name: str) -> Checkpoint:
    """One copy per process of each checkpoint file version (a replaced file has a new mtime and reloads)."""
    return load_checkpoint_or_hf(path, device_name)


def load(path: Path) -> Checkpoint:
    return _load_shared(str(path), path.stat().st_mtime_ns, str(device()))


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


@st.cache_resource(show_spinner=False, max_entries=16)
def _sentence_timeline(
    name: str, stamps: tuple[str, ...], source: str, _timeline: Timeline, _files: list[Path | None]
) -> Timeline:
    """One visitor's sentence through the run: the same for every visitor who types it (stamps name file versions),
    read in one of the heavy-job slots with the server's one copy of each epoch's checkpoint (8 tabs typing at once
    each loaded every epoch from disk: +1.4 GB that stayed)."""
    with heavy_job("sentences read through the run"):
        return sentence_timeline(_timeline, _files, source, None, load=load)


def typed_timeline(name: str, timeline: Timeline, source: str) -> tuple[Timeline, list[Path | None]]:
    """The timeline of a typed sentence through the snapshots of `timeline` whose checkpoints are in the checkpoints
    folder, and for each snapshot its file (None where it is not here); ValueError where it cannot be read."""
    files = snapshot_files(timeline, [path for path in checkpoint_files().values() if path.is_file()])
    stamps = tuple(f"{f}:{f.stat().st_mtime_ns}" if f else "" for f in files)  # a replaced file: read anew
    return _sentence_timeline(name, stamps, source, _timeline=timeline, _files=files), files


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


@RESULTS
def tuned_lens_cached(
    _checkpoint: Checkpoint,
    checkpoint_key: str,
    strategy: str,
    src_ids: tuple[int, ...],
    tgt_ids: tuple[int, ...],
    *,
    _result: DecodeResult,
    _tuned: TunedLens,
) -> LogitLens:
    """The tuned lens over a result's layer outputs, shared by the visitors who look at the same result."""
    return read_with(_checkpoint.model, _tuned, _result.lens, _result.tgt_ids)


@RESULTS
def candidate_words_cached(
    _checkpoint: Checkpoint,
    checkpoint_key: str,
    strategy: str,
    src_ids: tuple[int, ...],
    tgt_ids: tuple[int, ...],
    *,
    _result: DecodeResult,
) -> list[list[str | None]]:
    """The word each of a result's candidates would make, shared by the visitors who look at the same result."""
    return candidate_words(_checkpoint.model, _checkpoint.tokenizer, _result)


@RESULTS
def pair_matrix_cached(
    _checkpoint: Checkpoint, checkpoint_key: str, source: str, target: str, method: Method
) -> np.ndarray:
    """The word matrix an alignment method reads for one pair: the Alignment page's reruns read it, not compute it."""
    return pair_matrix(_checkpoint.model, _checkpoint.tokenizer, source, target, method)


@RESULTS
def decode_cached(_checkpoint: Checkpoint, checkpoint_key: str, text: str, settings: DecodeSettings) -> DecodeResult:
    """Results are immutable, so visitors decoding the same sentence the same way share one."""
    return decode_text(_checkpoint.model, _checkpoint.tokenizer, text, settings)


@RESULTS
def teacher_force_cached(_checkpoint: Checkpoint, checkpoint_key: str, text: str, target: str) -> DecodeResult:
    return teacher_force(_checkpoint.model, _checkpoint.tokenizer, text, target)


@RESULTS
def report_cached(
    _checkpoint: Checkpoint,
    checkpoint_key: str,
    text: str,
    strategy: str,
    tgt_ids: tuple[int, ...],
    name: str,
    *,
    _result: DecodeResult,
    _progress: Callable[[int], None] | None = None,
) -> str:
    """The HTML report of a result (5 MB, most of it plotly.js), shared by the visitors who ask for the same one."""
    return html_report(_result, text, name, _progress)


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


def open_or_explain(name: str) -> KeyedCheckpoint | None:
    """open_checkpoint behind a spinner (a first load takes seconds); None, with the reason on the page,
    when the file cannot be used (corrupt, refused, removed, or no memory left for it)."""
    try:
        with st.spinner(f"Loading {name} ..."):
            return open_checkpoint(name)
    except (CheckpointError, OSError, MemoryError, torch.OutOfMemoryError) as error:
        st.error(literal(f"Checkpoint {name} cannot be used: {str(error) or 'the server is out of memory'}"))
        return None


def language_name(code: str) -> str:
    """A language code piece as people write it: M2M100's __fr__ is fr, mBART-50's fr_XX stays."""
    return code.strip("_")


@functools.lru_cache(maxsize=1024)
def language_label(code: str) -> str:
    """A language chooser's entry, found by typing the name or the code: "German · deu_Latn". The name is the
    language's and script's (mBART-50's regions, as in ar_AR, are not the language's country); a code that names no
    language stays as it is."""
    written = language_name(code)
    try:
        tag = langcodes.Language.get(written.replace("_", "-"))
    except (LookupError, ValueError):  # not a language tag at all
        return written
    if not tag.language or not tag.is_valid():
        return written
    return f"{langcodes.Language.make(language=tag.language, script=tag.script).display_name()} · {written}"


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


def checkpoint_key(path: Path) -> str:
    return f"{path}:{path.stat().st_mtime_ns}"


@RESULTS
def teacher_force_ids_cached(
    _checkpoint: Checkpoint, checkpoint_key: str, src_ids: tuple[int, ...], tgt_ids: tuple[int, ...], truncated: bool
) -> DecodeResult:
    """A checkpoint run on given tokens (another checkpoint's output, on the comparison page)."""
    return teacher_force_ids(_checkpoint.model, _checkpoint.tokenizer, list(src_ids), list(tgt_ids), truncated)


@RESULTS
def sublayer_inputs_cached(
    _checkpoint: Checkpoint,
    checkpoint_key: str,
    src_ids: tuple[int, ...],
    tgt_ids: tuple[int, ...],
    kind: str,
    layer: int,
) -> SublayerInputs:
    """What one attention sublayer received for a result's tokens (the stage-by-stage and masks pages)."""
    return sublayer_inputs(_checkpoint.model, list(src_ids), list(tgt_ids), kind, layer)


@RESULTS
def ablation_cached(
    _checkpoint: Checkpoint, checkpoint_key: str, text: str, heads: tuple[tuple[str, int, int], ...]
) -> DecodeResult:
    """A greedy decode with the given (kind, layer, head) switched off."""
    return decode(_checkpoint.model, _checkpoint.tokenizer, text, probe=Probe.ablating(heads))


@RESULTS
def source_embeddings_cached(_checkpoint: Checkpoint, checkpoint_key: str, src_ids: tuple[int, ...]) -> np.ndarray:
    """The source tokens' embeddings as the model scales them (times sqrt(d_model)), (S, d_model), read-only."""
    model = _checkpoint.model
    with torch.inference_mode():
        ids = torch.tensor([src_ids], device=next(model.parameters()).device)
        embedded = model.src_embed(ids)[0].float().cpu().numpy()
    embedded.flags.writeable = False
    return embedded


@RESULTS
def attribution_cached(
    _checkpoint: Checkpoint,
    checkpoint_key: str,
    src_ids: tuple[int, ...],
    tgt_ids: tuple[int, ...],
    n_steps: int,
    *,
    _result: DecodeResult,
    _should_stop: Callable[[], bool],
    _progress: Callable[[int, int], None] | None = None,
) -> Attribution:
    """Every attribution of a result, keyed by its tokens (a decode and a teacher forcing of the same tokens agree)."""
    return attribute(_checkpoint.model, _result, n_steps, _should_stop, _progress)


@RESULTS
def contrastive_cached(
    _checkpoint: Checkpoint,
    checkpoint_key: str,
    src_ids: tuple[int, ...],
    tgt_ids: tuple[int, ...],
    step: int,
    foil: int,
    n_steps: int,
    *,
    _result: DecodeResult,
    _should_stop: Callable[[], bool],
) -> tuple[np.ndarray, np.ndarray, float]:
    """Integrated gradients of log p(output token) - log p(foil) at one step."""
    return contrastive(_checkpoint.model, _result, step, foil, n_steps, _should_stop)
