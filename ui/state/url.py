"""The URL names the view on screen, so that a copied link opens the same view."""

from __future__ import annotations

import base64
import re
from collections.abc import Callable, Sequence
from typing import TypeVar
from urllib.parse import quote

import streamlit as st

from transformer.decoding.strategies import STRATEGIES, DecodeSettings
from transformer.io.checkpoint import RENAMED_CHECKPOINTS
from transformer.model.kinds import AttentionKind
from ui.state.keys import ATTENTION_VIEWS, MAX_CHARACTERS, SETTING_RANGES, SETTINGS

T = TypeVar("T")


# The Attention maps page's yes/no controls a link names, by parameter: fitted colours, content only.
ATTENTION_FLAGS = {"fit": "attention_fit", "content": "attention_content"}


def read_url_once(checkpoints: dict) -> None:
    """On a visitor's first run, take the view named in the URL (a shared link)."""
    if st.session_state.get("url_read"):
        return
    st.session_state.url_read = True
    params = st.query_params
    named = params.get("ckpt")
    named = named if named in checkpoints else RENAMED_CHECKPOINTS.get(named)
    if named in checkpoints:
        st.session_state.checkpoint = named
    for name, param in (("source_language", "from"), ("target_language", "into")):
        if re.fullmatch(r"[A-Za-z_]{2,16}", params.get(param, "")):
            st.session_state[name] = params[param]  # checked against the model's codes when the sidebar draws
    if params.get("text", "").strip():
        st.session_state.text = params["text"][:MAX_CHARACTERS]
    for name in ("step", "layer", "head"):
        number = _position(params.get(name, ""))
        if number is not None:
            st.session_state[f"url_{name}"] = number - 1  # applied once the result says what is in range
            if name == "step":
                st.session_state.stepped = True  # the link's sender had chosen a step
    if re.fullmatch(rf"{BRANCH_STEP}(,{BRANCH_STEP}){{0,{MAX_BRANCHES - 1}}}", params.get("what_if", "")):
        steps = [step.split(".") for step in params["what_if"].split(",")]
        st.session_state.url_branch = tuple((int(step) - 1, int(token)) for step, token in steps)  # checked later
    if params.get("kind") in [kind.value for kind in AttentionKind]:
        st.session_state.kind = params["kind"]
        st.session_state.kind_chosen = True
    if params.get("strategy") in STRATEGIES:
        st.session_state.strategy = params["strategy"]
    for name, (low, high) in SETTING_RANGES.items():
        value = _number(params.get(name, ""), type(low))
        if value is not None and low <= value <= high:
            st.session_state[name] = value
    if params.get("view") in ATTENTION_VIEWS:
        st.session_state.view = params["view"]
    if params.get("lens") in ("logit", "tuned"):
        st.session_state.lens = params["lens"]
    for name, key in ATTENTION_FLAGS.items():
        flag = link_flag(name)
        if flag is not None:
            st.session_state[key] = flag
    for name, key in (("words", "words"), ("presentation", "presentation"), ("dlens", "encoder_lens")):
        flag = link_flag(name)
        if flag is not None:
            st.session_state[key] = flag
    # A page's own controls: each takes its value when the page draws it (from_link), where it is one of its choices.
    st.session_state.url_page = {name: params[name][:MAX_PAGE_VALUE] for name in PAGE_PARAMETERS if name in params}


# The page controls a link names, by their URL parameter: the checkpoint Compare compares with, Attribution's mean
# over heads and its foil, the heads Head statistics switches off and its statistics, the dimensions Positional
# encoding draws, whether Attention, step by step draws whole weight matrices, the explorer's step view's layers,
# Cause's corrupted sentence, target, the token it is read against, its direction and encoder layer shown, and the
# step view's knockout: the source words it blocks (1-based), in which decoder layers, the head pinned and its word;
# Pair sets' built-in set (or "own": an upload), how many of its pairs, the method and whether heads are switched off.
PAGE_PARAMETERS = (
    "with",
    "mean",
    "foil",
    "off",
    "statistic",
    "dims",
    "weights",
    "layers",
    "corrupt",
    "target",
    "against",
    "noising",
    "encoder_layer",
    "cut",
    "cut_layers",
    "pin",
    "pin_to",
    "set",
    "pairs",
    "method",
    "ablation",
)
MAX_PAGE_VALUE = 2000  # characters of one such value a link may hold


def from_link(widget_key: str, parameter: str, choices: Sequence[T], name: Callable[[T], str] = str) -> bool:
    """Sets a page's control from the visit's link, once, where the link names one of its choices (by `name`);
    whether it did."""
    named = st.session_state.get("url_page", {}).pop(parameter, None)
    chosen = [choice for choice in choices if name(choice) == named]
    if named is not None and chosen:
        st.session_state[widget_key] = chosen[0]
    return bool(named is not None and chosen)


def many_from_link(widget_key: str, parameter: str, choices: Sequence[T], name: Callable[[T], str] = str) -> bool:
    """Sets a page's multiple choice from the visit's link, once, to the choices it names (comma-separated, or a
    mask: choices_text); whether it did."""
    named = st.session_state.get("url_page", {}).pop(parameter, None)
    if named is not None:
        if named.startswith(CHOICE_MASK):
            bits = _mask_bits(named[len(CHOICE_MASK) :], len(choices))
            st.session_state[widget_key] = [choice for choice, bit in zip(choices, bits) if bit]
        else:
            wanted = set(named.split(",")[: len(choices)])
            st.session_state[widget_key] = [choice for choice in choices if name(choice) in wanted]
    return named is not None


# A multiple choice written as a bit mask over its choices in their order, base64url: 461 of a model's 768 heads
# named one by one made an 8,413-character link (nginx answered 414), and cut at MAX_PAGE_VALUE it switched off 179.
CHOICE_MASK = "~"
MAX_NAMED_CHARACTERS = 300


def choices_text(chosen: Sequence[T], choices: Sequence[T], name: Callable[[T], str] = str) -> str:
    """The chosen among `choices` as a link writes them: their names comma-separated, readable, up to
    MAX_NAMED_CHARACTERS; past that a mask where shorter (as long whatever is chosen: a bit a choice)."""
    named = ",".join(name(choice) for choice in chosen)
    wanted, bits = set(chosen), bytearray((len(choices) + 7) // 8)
    for index, choice in enumerate(choices):
        if choice in wanted:
            bits[index // 8] |= 1 << index % 8
    mask = CHOICE_MASK + base64.urlsafe_b64encode(bytes(bits)).decode().rstrip("=")
    return named if len(named) <= MAX_NAMED_CHARACTERS or len(named) <= len(mask) else mask


def _mask_bits(text: str, count: int) -> list[bool]:
    """The first `count` bits of a choices_text mask; none set where the text is not one."""
    try:
        data = base64.b64decode(text + "=" * (-len(text) % 4), altchars=b"-_", validate=True)
    except ValueError:
        return [False] * count
    return [bool(data[i // 8] >> i % 8 & 1) if i // 8 < len(data) else False for i in range(count)]


def flag_text(value: bool) -> str:
    return "1" if value else "0"


def link_flag(name: str) -> bool | None:
    """A yes/no the link sets ("1" or "0"), or None when it says nothing of it."""
    value = st.query_params.get(name)
    return value == "1" if value in ("0", "1") else None


BRANCH_STEP = r"[1-9][0-9]{0,5}\.[0-9]{1,9}"  # a what-if in a link: its step (1-based) and token id
MAX_BRANCHES = 20  # a branch of a branch ... in a link, at most this deep (each is a decode to redo)

# Links stay under the length every browser, proxy and server takes (nginx's default line buffer is 8 KB).
MAX_URL_TEXT_BYTES = 2000


def _number(value: str, kind: type) -> int | float | None:
    """An ASCII decimal number of the given type from a URL, or None (never an exception, never NaN)."""
    pattern = r"[0-9]{1,10}" if kind is int else r"[0-9]{1,6}(\.[0-9]{1,6})?"
    return kind(value) if re.fullmatch(pattern, value) else None


def _position(value: str) -> int | None:
    """A 1-based position from a URL, or None: only ASCII digits count ("²" and "①" pass str.isdigit)."""
    return int(value) if re.fullmatch(r"[0-9]{1,6}", value) and int(value) >= 1 else None


def url_text(text: str) -> str:
    """A prefix of the sentence whose percent-encoding fits MAX_URL_TEXT_BYTES (a link that always opens)."""
    text = text[:MAX_URL_TEXT_BYTES]
    while len(quote(text)) > MAX_URL_TEXT_BYTES:
        text = text[: min(len(text) * MAX_URL_TEXT_BYTES // len(quote(text)), len(text) - 1)]
    return text


def write_url(page: dict[str, str] | None = None) -> None:
    """The URL names the view on screen: checkpoint, a language-pair model's languages, sentence, decoding settings that differ from the
    defaults, step, layer, head (1-based), kind, the attention view, words, presentation mode, fitted colours,
    DecoderLens asked for (dlens=1), the lens a link opened with and the what-if branch on screen (its step, 1-based, and token id: "what_if=2.417");
    `page`: the page's own controls, by their PAGE_PARAMETERS name."""
    state = st.session_state
    text = state.get("applied_text", "")
    params = {
        "ckpt": state.get("checkpoint"),
        "from": state.get("source_language"),
        "into": state.get("target_language"),
        "text": url_text(text) if text.strip() else "",  # an empty box: no sentence named
    }
    if len(params["text"]) < len(text):
        st.caption(
            f"The link to this view holds the sentence's first {len(params['text']):,} characters only, "
            "so that it opens in every browser."
        )
    applied, default = state.get("applied_settings"), DecodeSettings()
    if applied is not None:
        params |= {
            name: f"{getattr(applied, name):g}"
            if isinstance(getattr(applied, name), float)
            else str(getattr(applied, name))
            for name in SETTINGS
            if getattr(applied, name) != getattr(default, name)
        }
    if state.get("view", "head") != "head":
        params["view"] = state.view
    params |= {name: "1" for name in ("words", "presentation") if state.get(name)}
    params |= {"dlens": "1"} if state.get("encoder_lens") else {}
    params |= {name: "1" for name, key in ATTENTION_FLAGS.items() if state.get(key)}
    if state.get("lens") == "tuned":  # the lens a link opened with (the step view writes the visitor's own)
        params["lens"] = "tuned"
    for name in ("step", "layer", "head"):
        if isinstance(state.get(name), int) and (name != "step" or state.get("stepped")):
            params[name] = str(state[name] + 1)
    if state.get("kind"):
        params["kind"] = state.kind
    if state.get("show_branch") and state.get("branch_from"):
        params["what_if"] = ",".join(f"{step + 1}.{token}" for step, token in state.branch_from[-MAX_BRANCHES:])
    params |= {name: value for name, value in (page or {}).items() if name in PAGE_PARAMETERS}
    st.query_params.from_dict({k: v for k, v in params.items() if v})
