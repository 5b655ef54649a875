"""What one visitor is looking at, kept in st.session_state: every key declared once, with its type and default.

Pages and the sidebar read and write these names only (a test holds the code to the list); widgets
bind to them through `shared`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from typing import TYPE_CHECKING, Any

import numpy as np
import streamlit as st

from transformer.analysis.alignment import AlignmentReport, GoldAlignment
from transformer.decoding.result import DecodeResult
from transformer.decoding.strategies import DecodeSettings
from ui.state.identity import ResultIdentity

if (
    TYPE_CHECKING
):  # pandas is slow to import (docs/performance.md), and only the Corpus and Head statistics pages need it
    import pandas as pd

    from transformer.analysis.heads.survey import Survey

# The sentence box's label: it says how to translate where the Translate button is out of view (a projector's screen).
SENTENCE_LABEL = "Sentence · Ctrl+Enter translates"
DEFAULT_SENTENCE = "The black cat is sleeping on the red chair near the window."  # two adjective-noun crossings
MAX_CHARACTERS = 2000  # longer text is cut before tokenizing (the model reads at most max_len tokens anyway)
MAX_TYPED_CHARACTERS = 20_000  # what the text box takes; past MAX_CHARACTERS the page says it cut the text
SETTINGS = tuple(field.name for field in fields(DecodeSettings))  # each has a sidebar widget of that name
# The sidebar's range of each numeric setting (a link's values are held to them too).
SETTING_RANGES = {"beam_width": (1, 10), "length_penalty": (0.0, 2.0), "temperature": (0.1, 2.0), "top_k": (0, 1000),
                  "seed": (0, 2**31 - 1), "max_new_tokens": (0, 1024)}  # fmt: skip
ATTENTION_VIEWS = {
    "head": "one head",
    "layer": "all heads of a layer",
    "model": "whole model (layers × heads)",
    "mean": "mean over heads",
    "rollout": "rollout (encoder)",
    "flow": "flow (encoder)",
}


@dataclass(frozen=True)
class DecodeRequest:
    """What the kept result was decoded from (session key result_request): a new one decodes again. A request, not
    a result: what is computed from the result is keyed by its ResultIdentity."""

    checkpoint_key: str
    text: str
    settings: DecodeSettings


@dataclass(frozen=True)
class CorpusRun:
    """A translated file on the Corpus page (session key corpus_run)."""

    checkpoint_key: str
    table: pd.DataFrame  # source, translation and, with references, reference, BLEU, chrF
    score: str | None  # corpus BLEU with its signature, when references were given


@dataclass(frozen=True)
class CorpusStatistics:
    """Head statistics averaged over an uploaded file (session key stats_over_corpus)."""

    kind: str
    checkpoint_key: str
    sentences: int
    statistics: dict[str, np.ndarray]  # each (L, H)


@dataclass(frozen=True)
class AlignmentRun:
    """The Alignment page's scored corpus (session key alignment_run)."""

    checkpoint_key: str
    name: str  # what was aligned, as the page says it
    sources: list[str]
    targets: list[str]
    golds: list[GoldAlignment]
    report: AlignmentReport


@dataclass(frozen=True)
class CorpusAgreement:
    """Each head's agreement with integrated gradients over the Corpus page's file (session key corpus_agreement)."""

    checkpoint_key: str
    sentences: int
    agreement: np.ndarray  # (L, H) Spearman, mean over sentences


@dataclass(frozen=True)
class HeadsRun:
    """Head statistics' measures of every head over a visitor's sample (session key heads_matter)."""

    checkpoint_key: str
    name: str  # the sample's file, as the page says it
    sentences: int
    survey: Survey


@dataclass(frozen=True)
class Key:
    """One value kept in a visitor's session."""

    type: type | tuple[type, ...]
    default: Any  # set at the start of every run when absent; None: absent until something sets it
    meaning: str


KEYS: dict[str, Key] = {
    "checkpoint": Key(str, None, "the chosen checkpoint's name in the sidebar list"),
    "source_language": Key(str, None, "a language-pair model's source language code piece (__en__, en_XX)"),
    "target_language": Key(str, None, "a language-pair model's target language code piece (__fr__, fr_XX)"),
    "text": Key(str, DEFAULT_SENTENCE, "the sentence in the sidebar's text box"),
    **{
        name: Key(type(value), value, "a decoding setting in the sidebar")
        for name, value in asdict(DecodeSettings()).items()
    },
    "applied_text": Key(str, None, "the sentence last translated, cut to MAX_CHARACTERS"),
    "applied_settings": Key(DecodeSettings, None, "the settings it was translated with"),
    "result": Key(DecodeResult, None, "the decode of applied_text with applied_settings"),
    "result_request": Key(DecodeRequest, None, "what `result` was decoded from"),
    "branch": Key(DecodeResult, None, "a what-if decode from a step of `result`"),
    "branch_from": Key(tuple, None, "the (step, token id) pairs that lead from `result` to `branch`, for the link"),
    "show_branch": Key(bool, None, "whether the pages show the branch instead of the result"),
    "scroll_to_output": Key(bool, None, "a beam hypothesis opened as a branch: the step view scrolls to the top once"),
    "step": Key(int, None, "the decoding step on screen (0-based)"),
    "stepped": Key(bool, None, "whether the visitor has chosen a step (until then, maps show the whole decode)"),
    "layer": Key(int, None, "the layer on screen (0-based)"),
    "head": Key(int, None, "the head on screen (0-based)"),
    "kind": Key(str, None, "the attention kind on screen (an AttentionKind value)"),
    "kind_chosen": Key(
        bool, None, "whether the visitor (or a link) chose the kind; until then a page may pick its own"
    ),
    **{
        f"url_{name}": Key(int, None, f"a link's {name}, applied once the result says what is in range")
        for name in ("step", "layer", "head")
    },
    "url_branch": Key(tuple, None, "a link's what-if (step, token id) pairs, applied once the result is decoded"),
    "url_read": Key(bool, None, "whether this visit's link has been read"),
    "url_page": Key(dict, None, "a link's values of page controls (url.PAGE_PARAMETERS), each taken when drawn"),
    "view": Key(str, None, "the Attention maps page's view"),
    "words": Key(bool, None, "pieces merged into words wherever attention maps are drawn"),
    "presentation": Key(bool, None, "presentation mode"),
    "lens": Key(str, None, "the lens the step view opens with (logit or tuned), as a link named it"),
    "encoder_lens": Key(bool, None, "the step view's DecoderLens asked for: what each encoder layer already says"),
    "attention_fit": Key(bool, None, "the Attention maps page's colours fitted to the weights drawn"),
    "attention_content": Key(bool, None, "the Attention maps page's maps without sink keys (</s>, <s>, punctuation)"),
    "sidebar_collapsed": Key(bool, None, "presentation mode collapsed the sidebar (once: it may be reopened)"),
    "target": Key(str, None, "the translation given for teacher forcing"),
    "tf_layer": Key(int, None, "the layer teacher forcing draws (1-based, its slider), a textbook example's"),
    "tf_head": Key(str, None, "the head teacher forcing draws, or the mean over heads (its menu's entry)"),
    "uploads": Key(dict, None, "this session's uploaded checkpoints by name (KeyedCheckpoint values)"),
    "upload_done": Key(str, None, "the last upload handled, so a rerun does not load it again"),
    "corpus_run": Key(CorpusRun, None, "the Corpus page's translated file"),
    "stats_over_corpus": Key(CorpusStatistics, None, "head statistics over an uploaded file"),
    "stats_sample": Key(int, None, "the sentences Head statistics takes from its file (its slider), for the pace"),
    "align_limit": Key(int, None, "the pairs Alignment takes from its files (its input), for the pace"),
    "ablated": Key(tuple, None, "the heads switched off on Head statistics, applied with its button"),
    "report_built": Key(tuple, None, "the view whose HTML report was built, offered for download"),
    "attribution_stopped": Key(ResultIdentity, None, "the result whose attribution the visitor stopped"),
    "corpus_agreement": Key(CorpusAgreement, None, "heads' agreement with the gradients over the Corpus file"),
    "probe": Key(int, None, "the probe sentence on How it learned (0-based)"),
    "learned_text": Key(str, None, "a sentence of the visitor's read through the run on How it learned"),
    "alignment_run": Key(AlignmentRun, None, "the Alignment page's corpus, aligned by every method and scored"),
    "compare_with": Key(str, None, "the checkpoint Compare checkpoints compares with (its widget, named in the link)"),
    "pe_dims": Key(list, None, "the dimensions Positional encoding draws (its widget, named in the link)"),
    "heads_matter": Key(HeadsRun, None, "every head's importance, roles and pruning curve over the visitor's sample"),
    "heads_matter_kept": Key(HeadsRun, None, "what finished of the run under way: what its Stop keeps"),
    "ablate_heads": Key(list, None, "the heads picked on Head statistics, as Head values (its widget)"),
    "step_layers": Key(str, None, "the window of layers the explorer's step view is sent ('9-12'; its widget, linked)"),
    "knockout_source": Key(tuple, None, "the checkpoint key and source ids the knockout's choices are for"),
    "knockout_words": Key(list, None, "the source words the step view's knockout blocks (0-based; its widget, linked)"),
    "knockout_layers": Key(
        list, None, "the decoder layers where the knockout blocks them (0-based; its widget, linked)"
    ),
    "knockout_pin": Key(tuple, None, "the (layer, head) the step view pins to a word, or None (its widget, linked)"),
    "knockout_pin_word": Key(int, None, "the source word the pinned head looks at (0-based; its widget, linked)"),
    "page_shown": Key(
        str, None, "the page script the last run drew: another one is a page chosen (presentation folds)"
    ),
    "knockout_opened": Key(bool, None, "whether the step view's knockout panel was opened by an edit: it stays open"),
    "cause_corrupt": Key(str, None, "the corrupted sentence Cause patches against the sidebar's (its widget, linked)"),
    "cause_target": Key(str, None, "the output token Cause reads (its widget, linked)"),
    "cause_foil": Key(str, None, "the token Cause reads it against, or none (its widget, linked as against=)"),
    "cause_noising": Key(bool, None, "whether Cause patches the corrupted run into the clean one (its widget, linked)"),
    "cause_layer": Key(int, None, "the encoder layer whose heads Cause draws (0-based; its widget, linked)"),
    "cause_stopped": Key(tuple, None, "the checkpoint key, contrast and direction whose patching the visitor stopped"),
    "sets_source": Key(str, None, "whether Pair sets runs a built-in set or an upload (its widget, linked as set=)"),
    "sets_builtin": Key(str, None, "the built-in set Pair sets runs (its widget, linked as set=)"),
    "sets_method": Key(str, None, "exact, attribution or both: how Pair sets patches (its widget, linked)"),
    "sets_noising": Key(bool, None, "whether Pair sets patches the corrupted run into the clean one (linked)"),
    "sets_ablation": Key(bool, None, "whether Pair sets switches each head off (its widget, linked as ablation=0)"),
    "sets_pairs": Key(int, None, "how many of the set's first pairs Pair sets runs (its widget, linked)"),
    "sets_link_read": Key(bool, None, "whether Pair sets has taken its form's fields from the link this session"),
    "sets_linked_pairs": Key(int, None, "the count a link names, applied once the set says it is in range"),
    "sets_asked": Key(tuple, None, "the run (checkpoint, pairs, settings) the visitor pressed Run for, until done"),
}


def set_defaults() -> None:
    """The declared defaults for the keys a visitor has not set yet."""
    for name, key in KEYS.items():
        if key.default is not None:
            st.session_state.setdefault(name, key.default)


def shared(name: str, in_form: bool = False) -> dict:
    """Keyword arguments binding a widget to the shared value `name`.

    Streamlit gives a widget a new identity on each page (and forgets its value there),
    so the value lives under its own key: the widget starts from it and writes back to
    it on change, or, inside a form, when the form's submit button calls store().
    """
    widget_key = f"widget_{name}"
    if name in st.session_state:
        st.session_state[widget_key] = st.session_state[name]
    return {"key": widget_key} if in_form else {"key": widget_key, "on_change": store, "args": (name,)}


def store(*names: str) -> None:
    for name in names:
        st.session_state[name] = st.session_state[f"widget_{name}"]
    if "step" in names:
        st.session_state.stepped = True
    if "kind" in names:
        st.session_state.kind_chosen = True


def clamp_index(name: str, size: int, default: int = 0) -> int:
    """A 0-based index widget value kept inside range(size) (a new result may be shorter); a URL value first."""
    pending = st.session_state.pop(f"url_{name}", None)
    value = pending if pending is not None else st.session_state.get(name, default)
    st.session_state[name] = max(0, min(int(value), size - 1))
    return st.session_state[name]
