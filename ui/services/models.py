"""Every model call a page makes, cached: pages only read.

The models are ui.services.checkpoints', loaded once per process and never changed. Results are
immutable values, so visitors asking the same question share one (ui.services.cache, bounded by bytes and age);
stepping, switching pages or choosing a layer only reads them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import streamlit as st
import torch

from transformer.analysis.alignment import Method, pair_matrix
from transformer.analysis.attribution.measures import Attribution, attribute, contrastive
from transformer.analysis.contributions import Contributions, contributions
from transformer.analysis.decoder_lens import LayerTranslation, decoder_lens, encoder_layers_lens
from transformer.analysis.interventions.knockout import AttentionEdit, edited_decode
from transformer.analysis.interventions.patching import Contrast
from transformer.analysis.interventions.sites import Patching, patch_every_site
from transformer.analysis.timeline import Timeline
from transformer.analysis.tuned_lens import TunedLens, read_with
from transformer.analysis.walkthrough import SublayerInputs, sublayer_inputs
from transformer.decoding.candidate_words import candidate_words
from transformer.decoding.forcing import teacher_force, teacher_force_ids
from transformer.decoding.greedy import decode_with_chooser
from transformer.decoding.lens import LogitLens, read_lens
from transformer.decoding.result import DecodeResult
from transformer.decoding.strategies import DecodeSettings, decode_text
from transformer.io.checkpoint import Checkpoint
from transformer.model.heads import Head
from transformer.model.probes import Probe
from transformer.training.snapshots import sentence_timeline, snapshot_files
from transformer.viz.report import html_report
from ui.services.cache import RESULTS
from ui.services.checkpoints import checkpoint_files, load
from ui.services.work import computing_clock, heavy_job
from ui.state.identity import ResultIdentity

if TYPE_CHECKING:
    from transformer.analysis.heads.survey import Survey
    from transformer.analysis.heads.syntax import ParsedSentence

# The most one decode may hold (its attention maps above all: transformer.decoding.strategies), asked before it runs.
DECODE_LIMIT_BYTES = int(os.environ.get("TRANSFORMER_EXPLORER_DECODE_MB", "1024")) << 20
# The most forward passes one activation patching run may make (the Cause page): the shipped model's pairs make 17.
PATCH_MAX_PASSES = int(os.environ.get("TRANSFORMER_EXPLORER_PATCH_PASSES", "1000"))


@st.cache_resource(show_spinner=False, max_entries=16)
def _sentence_timeline(
    name: str, stamps: tuple[str, ...], source: str, _timeline: Timeline, _files: list[Path | None]
) -> Timeline:
    """One visitor's sentence through the run: the same for every visitor who types it (stamps name file versions),
    read in one of the heavy-job slots with the server's one copy of each epoch's checkpoint (tabs typing at once each
    loaded every epoch from disk otherwise; measured: docs/performance.md)."""
    with heavy_job("sentences read through the run"):
        return sentence_timeline(_timeline, _files, source, None, load=load)


def typed_timeline(name: str, timeline: Timeline, source: str) -> tuple[Timeline, list[Path | None]]:
    """The timeline of a typed sentence through the snapshots of `timeline` whose checkpoints are in the checkpoints
    folder, and for each snapshot its file (None where it is not here); ValueError where it cannot be read."""
    files = snapshot_files(timeline, [path for path in checkpoint_files().values() if path.is_file()])
    stamps = tuple(f"{f}:{f.stat().st_mtime_ns}" if f else "" for f in files)  # a replaced file: read anew
    return _sentence_timeline(name, stamps, source, _timeline=timeline, _files=files), files


@RESULTS
def tuned_lens_cached(
    _checkpoint: Checkpoint,
    identity: ResultIdentity,
    *,
    _result: DecodeResult,
    _tuned: TunedLens,
) -> LogitLens:
    """The tuned lens over a result's layer outputs, shared by the visitors who look at the same result."""
    return read_with(_checkpoint.model, _tuned, _result.lens, _result.tgt_ids)


@RESULTS
def lens_read_cached(_checkpoint: Checkpoint, identity: ResultIdentity, *, _result: DecodeResult) -> LogitLens:
    """Every layer's guesses where the decode left them unread (a large vocabulary: decoding.lens.read_at_decode)."""
    return read_lens(_checkpoint.model, _result.lens, _result.tgt_ids)


@RESULTS
def candidate_words_cached(
    _checkpoint: Checkpoint,
    identity: ResultIdentity,
    *,
    _result: DecodeResult,
) -> list[list[str | None]]:
    """The word each of a result's candidates would make, shared by the visitors who look at the same result."""
    return candidate_words(_checkpoint.model, _checkpoint.tokenizer, _result)


@RESULTS
def contributions_cached(_checkpoint: Checkpoint, identity: ResultIdentity, *, _result: DecodeResult) -> Contributions:
    """ALTI+ of a result: each output step's shares of the source and of the output so far."""
    return contributions(_checkpoint.model, _result.src_ids, _result.tgt_ids)


@RESULTS
def decoder_lens_cached(
    _checkpoint: Checkpoint, identity: ResultIdentity, *, _result: DecodeResult
) -> tuple[list[LayerTranslation], LogitLens]:
    """DecoderLens of a result: the greedy translation from each encoder layer's output, and each layer's guesses
    at every step of the output on screen."""
    model, tokenizer = _checkpoint.model, _checkpoint.tokenizer
    return decoder_lens(model, tokenizer, list(_result.src_ids)), encoder_layers_lens(
        model, list(_result.src_ids), list(_result.tgt_ids)
    )


@RESULTS
def pair_matrix_cached(
    _checkpoint: Checkpoint, checkpoint_key: str, source: str, target: str, method: Method
) -> np.ndarray:
    """The word matrix an alignment method reads for one pair: the Alignment page's reruns read it, not compute it."""
    return pair_matrix(_checkpoint.model, _checkpoint.tokenizer, source, target, method)


@RESULTS
def decode_cached(_checkpoint: Checkpoint, checkpoint_key: str, text: str, settings: DecodeSettings) -> DecodeResult:
    """Results are immutable, so visitors decoding the same sentence the same way share one."""
    return decode_text(_checkpoint.model, _checkpoint.tokenizer, text, settings, DECODE_LIMIT_BYTES)


@RESULTS
def teacher_force_cached(_checkpoint: Checkpoint, checkpoint_key: str, text: str, target: str) -> DecodeResult:
    return teacher_force(_checkpoint.model, _checkpoint.tokenizer, text, target, DECODE_LIMIT_BYTES)


@RESULTS
def report_cached(
    _checkpoint: Checkpoint,
    identity: ResultIdentity,
    text: str,
    name: str,
    words: bool,
    *,
    _result: DecodeResult,
    _progress: Callable[[int], None] | None = None,
) -> str:
    """The HTML report of a result (most of it plotly.js), shared by the visitors who ask for the same one."""
    return html_report(_result, text, name, _progress, words)


@RESULTS
def teacher_force_ids_cached(
    _checkpoint: Checkpoint, checkpoint_key: str, src_ids: tuple[int, ...], tgt_ids: tuple[int, ...], truncated: bool
) -> DecodeResult:
    """A checkpoint run on given tokens (another checkpoint's output, on the comparison page)."""
    model, tokenizer = _checkpoint.model, _checkpoint.tokenizer
    return teacher_force_ids(model, tokenizer, list(src_ids), list(tgt_ids), truncated, DECODE_LIMIT_BYTES)


@RESULTS
def sublayer_inputs_cached(_checkpoint: Checkpoint, identity: ResultIdentity, kind: str, layer: int) -> SublayerInputs:
    """What one attention sublayer received for a result's tokens (the stage-by-stage and masks pages)."""
    return sublayer_inputs(_checkpoint.model, list(identity.src_ids), list(identity.tgt_ids), kind, layer)


@RESULTS
def ablation_cached(_checkpoint: Checkpoint, checkpoint_key: str, text: str, heads: tuple[Head, ...]) -> DecodeResult:
    """A greedy decode with the given heads switched off."""
    return decode_with_chooser(_checkpoint.model, _checkpoint.tokenizer, text, probe=Probe.ablating(heads))


@RESULTS
def knockout_cached(
    _checkpoint: Checkpoint, identity: ResultIdentity, step: int, edit: AttentionEdit, *, _result: DecodeResult
) -> DecodeResult:
    """A result decoded again from a step with the decoder's cross-attention edited (knockout, pinning)."""
    return edited_decode(_checkpoint.model, _checkpoint.tokenizer, _result, step, edit)


@RESULTS
def source_embeddings_cached(_checkpoint: Checkpoint, identity: ResultIdentity) -> np.ndarray:
    """A result's source tokens' embeddings as the model scales them (times sqrt(d_model)), (S, d_model),
    read-only."""
    model = _checkpoint.model
    with torch.inference_mode():
        ids = torch.tensor([identity.src_ids], device=next(model.parameters()).device)
        embedded = model.src_embed(ids)[0].float().cpu().numpy()
    embedded.flags.writeable = False
    return embedded


@RESULTS
def attribution_cached(
    _checkpoint: Checkpoint,
    identity: ResultIdentity,
    n_steps: int,
    *,
    _result: DecodeResult,
    _should_stop: Callable[[], bool],
    _progress: Callable[[int, int], None] | None = None,
) -> Attribution:
    """Every attribution of a result."""
    return attribute(_checkpoint.model, _result, n_steps, _should_stop, _progress)


@RESULTS
def contrastive_cached(
    _checkpoint: Checkpoint,
    identity: ResultIdentity,
    step: int,
    foil: int,
    n_steps: int,
    *,
    _result: DecodeResult,
    _should_stop: Callable[[], bool],
    _progress: Callable[[int, int], None] | None = None,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Integrated gradients of log p(output token) - log p(foil) at one step."""
    return contrastive(_checkpoint.model, _result, step, foil, n_steps, _should_stop, _progress)


@RESULTS
def heads_survey_cached(
    _checkpoint: Checkpoint,
    checkpoint_key: str,
    sources: tuple[str, ...],
    references: tuple[str, ...] | None,
    ablation: bool,
    treebank: tuple[ParsedSentence, ...] | None,
    prune_by: str | None,
    *,
    _progress: Callable[[str, int, int], None],
    _should_stop: Callable[[], bool],
    _computed: Callable[[float], None],
    _kept: Callable[[Survey], None] | None = None,
) -> Survey:
    """Every measure of every head over a sample (a classroom measuring the teacher's file measures it once);
    `_computed` hears the computing seconds of a survey made here, never of one the cache held (a page's pace);
    `_kept`, the survey as it stands as each part ends with more to come (what a Stop keeps)."""
    from transformer.analysis.heads.survey import survey_heads  # pandas and sacrebleu: only this page needs them

    started = computing_clock()
    survey = survey_heads(
        _checkpoint.model,
        _checkpoint.tokenizer,
        list(sources),
        None if references is None else list(references),
        ablation,
        treebank,
        prune_by,
        _progress,
        _should_stop,
        _kept,
    )
    _computed(computing_clock() - started)
    return survey


@RESULTS
def patching_cached(
    _checkpoint: Checkpoint,
    checkpoint_key: str,
    clean_src: tuple[int, ...],
    corrupt_src: tuple[int, ...],
    output: tuple[int, ...],
    step: int,
    target: int,
    foil: int | None,
    noising: bool,
    spans: tuple[tuple[int, int], ...] | None,
    *,
    _progress: Callable[[int, int], None],
    _should_stop: Callable[[], bool],
) -> Patching:
    """Every site of a contrast patched, by word where `spans` are given (a classroom patching the teacher's pair
    patches it once)."""
    contrast = Contrast(list(clean_src), list(corrupt_src), list(output), step, target, foil)
    return patch_every_site(
        _checkpoint.model,
        contrast,
        noising,
        progress=_progress,
        should_stop=_should_stop,
        spans=None if spans is None else list(spans),
    )
