"""The explorer's step view, stepped in the browser.

A decode's every step (top-k candidates, the text so far, the cross-attention and masked
self-attention rows of every layer and head, what each decoder layer would predict) is sent once, packed; First, Previous, Next,
Last, the slider and Play then never ask the server. What does need it (a what-if branch,
Attention maps at this step) comes back as one action that carries the step the visitor is on; leaving the
page by a link sends the step once, so that the next page opens at it.
"""

from __future__ import annotations

import difflib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

import numpy as np
import streamlit as st

from transformer.analysis.contributions import Contributions
from transformer.analysis.decoder_lens import LayerTranslation
from transformer.analysis.tuned_lens import TunedLens
from transformer.analysis.views import without_sinks
from transformer.analysis.words import over_words
from transformer.decoding.beam_tree import BeamTree
from transformer.decoding.lens import LogitLens
from transformer.decoding.result import DecodeResult
from transformer.model.heads import layer_name
from transformer.text.pieces import readable, readable_label
from transformer.text.tokenizer import TokenizerBase
from transformer.viz.attention import head_row_labels, with_layer_means
from transformer.viz.style import colorscale_stops
from ui.players.packing import QUANTUM, packed, rounded
from ui.state.identity import ResultIdentity

HERE = Path(__file__).parent
PAGE_NAMES = frozenset(path.stem for path in (HERE.parents[1] / "pages").glob("*.py"))  # a page's URL path


PLAYER = st.components.v2.component(
    "step_player",
    css=(HERE / "player.css").read_text() + (HERE / "step_player.css").read_text(),
    js="".join(
        (HERE / name).read_text() for name in ("player_common.js", "beam_tree.js", "step_lens.js", "step_player.js")
    ),
)
STEP_RATES = (1, 2, 5, 10)  # steps a second Play offers
# Rows of heads the step view draws at most (each layer's heads, then their mean), and cells: a step click redraws both
# maps cell by cell, and a deeper or wider model, or a long input, is shown a window of its layers at a time, the
# others sent when chosen. Past these, a click takes longer than the 50 ms it may (measured:
# docs/performance.md).
MAX_STEP_ROWS = 72
MAX_STEP_CELLS = 4096


def layer_windows(layers: int, heads: int, keys: int) -> list[range]:
    """The step view's windows of layers, in order: every layer in one where they fit, else as many consecutive
    layers as fit in each (one at least). A window fits MAX_STEP_ROWS rows and, at the last step, where a row holds
    `keys` cells (the source's pieces in one map, the output's in the other), MAX_STEP_CELLS cells."""
    rows = min(MAX_STEP_ROWS, MAX_STEP_CELLS // max(1, keys))
    size = max(1, rows // (heads + 1))
    return [range(start, min(start + size, layers)) for start in range(0, layers, size)]


def window_name(window: range) -> str:
    """A window of layers as the step view's choice and a link name it, 1-based ("9-12"; "3" for one layer)."""
    first, last = window.start + 1, window.stop
    return str(first) if first == last else f"{first}-{last}"


@dataclass(frozen=True)
class StepAction:
    """What the visitor asked of the server from the step view, at the step shown."""

    name: str  # "what_if": branch from this step with token; "attention": open Attention maps at this step;
    # "leave": the visitor followed a link to `page` after stepping in the browser; "beam_node": open a beam
    # search's hypothesis (`node` of its tree) as a what-if branch; "why": ask Cause why this step's token
    step: int
    token: int | None = None
    page: str | None = None  # the page script to open ("pages/attribution.py")
    node: int | None = None


def page_of_link(path: object) -> str | None:
    """The app's page script a link's path opens (its last part names it; none: the default page), or None."""
    if type(path) is not str or len(path) > 2000:
        return None
    name = path.rstrip("/").rsplit("/", 1)[-1]
    if name in ("", str(st.get_option("server.baseUrlPath") or "").strip("/").rsplit("/", 1)[-1]):
        name = "explorer"
    return f"pages/{name}.py" if name in PAGE_NAMES else None


def lens_data(lens: LogitLens, tokenizer: TokenizerBase) -> dict:
    """A lens' guesses by step (each step's layers together), with the text of every token they name."""
    ids = lens.top_ids.transpose(0, 1).tolist()  # (T, L, LENS_TOP)
    return {
        "top_ids": ids,
        "top_probs": rounded(lens.top_probs.transpose(0, 1).numpy()),
        "rank": lens.chosen_rank.T.tolist(),  # (T, L)
        "chosen_prob": rounded(lens.chosen_probs.T.numpy()),
        "labels": {str(i): readable(tokenizer.id_to_piece(i)) for i in sorted({i for s in ids for r in s for i in r})},
    }


def encoder_lens_data(translations: list[LayerTranslation], lens: LogitLens, tokenizer: TokenizerBase) -> dict:
    """DecoderLens for the view: each encoder layer's guesses at every step (as a lens' data, lens_data), and the
    translation each layer's output makes, word by word, each word marked where it is not the last layer's (the
    words a difflib alignment of the two leaves unmatched)."""
    final = translations[-1].text.split()
    rows = []
    for translation in translations:
        words = translation.text.split()
        differs = [False] * len(words)
        for tag, _, _, first, last in difflib.SequenceMatcher(a=final, b=words, autojunk=False).get_opcodes():
            differs[first:last] = [tag != "equal"] * (last - first)
        rows.append({"layer": translation.layer, "words": words, "differs": differs})
    return lens_data(lens, tokenizer) | {"translations": rows}


def tuned_lens_data(rows: LogitLens, lens: TunedLens, tokenizer: TokenizerBase) -> dict:
    """lens_data of the tuned lens, with each early layer's held-out mean KL from the output, logit then tuned."""
    return lens_data(rows, tokenizer) | {"kl": [rounded(np.array(lens.kl_logit)), rounded(np.array(lens.kl_tuned))]}


def keys_shown(weights: np.ndarray, keys: list[str], words: bool, content: bool) -> tuple[np.ndarray, list[str]]:
    """Maps over keys (..., K) as the step view shows them: merged into words if asked, without sink keys if asked."""
    weights, labels = over_words(weights, keys, words)
    if not content:
        return weights, labels
    weights, kept = without_sinks(weights, labels)
    return weights, [labels[k] for k in kept]


def step_data(
    result: DecodeResult,
    tokenizer: TokenizerBase,
    step: int,
    words: bool,
    player_id: str,
    tuned: tuple[LogitLens, TunedLens] | None = None,
    candidate_words: list[list[str | None]] | None = None,
    contributions: Contributions | None = None,
    content: bool = False,
    layers: range | None = None,
    encoder_lens: tuple[list[LayerTranslation], LogitLens] | None = None,
) -> dict:
    """Everything the step view shows, for every step, as JSON-ready values; `player_id`: the result's identity
    token (the browser keeps its step while it is the same); `tuned`: a tuned lens' guesses and the
    lens (whose held-out KL figures the view gives); `candidate_words`: the word each candidate would make
    (decoding.candidate_words); `contributions`: ALTI+ of the result; `content`: the maps without their sink keys
    (views.without_sinks), as Attention maps' content only; `layers`: the window of layers whose maps are sent
    (layer_windows; None: all); `encoder_lens`: DecoderLens of the result (encoder_lens_data)."""
    layers = range(result.cross.size(0)) if layers is None else layers
    heads, steps = result.cross.size(1), result.steps
    shown = slice(layers.start, layers.stop)
    cross, cross_labels = keys_shown(result.cross[shown].numpy(), result.src_pieces, words, content)  # (L, H, T, S)
    self_labels, self_rows = [], []
    for t in range(steps):
        keys = result.decoder_input_pieces[: t + 1]
        rows, labels = keys_shown(result.decoder_self[shown, :, t, : t + 1].numpy(), keys, words, content)
        self_labels.append([readable_label(label) for label in labels])
        self_rows.append(with_layer_means(rows).reshape(-1))
    topk_ids = result.topk_ids.tolist()
    return {
        "id": player_id,
        "step": step,
        "steps": steps,
        "rows": head_row_labels(len(layers), heads, [layer_name(layer) for layer in layers]),
        "heads": heads,
        "so_far": [tokenizer.decode(result.tgt_ids[:t]) for t in range(steps)],
        "next": [readable(piece) for piece in result.tgt_pieces],
        "forced": result.forced,
        "prob": rounded(result.token_probs.numpy()),
        "chosen": list(result.tgt_ids),
        "topk_ids": topk_ids,
        "topk_labels": [[readable(tokenizer.id_to_piece(i)) for i in ids] for ids in topk_ids],
        "topk_probs": rounded(result.topk_probs.numpy()),
        "topk_words": candidate_words,
        "entropy": rounded(result.entropy_bits.numpy()),
        "lens": lens_data(result.lens, tokenizer) if result.lens.read else None,
        "tuned_lens": None if tuned is None else tuned_lens_data(*tuned, tokenizer),
        "encoder_lens": None if encoder_lens is None else encoder_lens_data(*encoder_lens, tokenizer),
        "cross_labels": [readable_label(label) for label in cross_labels],
        "cross": packed(with_layer_means(cross).transpose(2, 0, 1, 3)),  # (T, L, H + 1, S)
        "self_labels": self_labels,
        "self": packed(np.concatenate(self_rows)),  # step t: (L, H + 1, t + 1 keys, or its words)
        "beam": None if result.beam_tree is None else beam_data(result.beam_tree, tokenizer),
        "contributions": None if contributions is None else contributions_data(contributions, result, words),
        "content_only": content,
        "colors": colorscale_stops(),
        "rates": list(STEP_RATES),
        "quantum": QUANTUM,
    }


def contributions_data(found: Contributions, result: DecodeResult, words: bool) -> dict:
    """ALTI+ for the browser: each step's shares of the source (T, S, or its words) and of the decoder input up to
    the step (its words too, as the self-attention map's keys), and each step's share from the source."""
    sources = len(result.src_ids)
    source, _ = over_words(found.alti_plus[:, :sources], result.src_pieces, words)
    prefix = [
        over_words(found.alti_plus[t, sources : sources + t + 1], result.decoder_input_pieces[: t + 1], words)[0]
        for t in range(result.steps)
    ]
    return {"source": packed(source), "prefix": packed(np.concatenate(prefix)), "share": rounded(found.source_share)}


def beam_data(tree: BeamTree, tokenizer: TokenizerBase) -> dict:
    """A beam search's tree for the browser, a list per field (a node's index is its place in each)."""
    nodes = tree.nodes
    return {
        "width": tree.width,
        "alpha": tree.alpha,
        "winner": tree.winner,
        "best_unpenalised": tree.best_unpenalised,
        "eos_probs": rounded(np.array(tree.eos_probs)),
        "step": [node.step for node in nodes],
        "slot": [node.slot for node in nodes],
        "parent": [-1 if node.parent is None else node.parent for node in nodes],
        "label": [readable(tokenizer.id_to_piece(node.token)) for node in nodes],
        "text": [tokenizer.decode(tree.prefix(i)) for i in range(len(nodes))],
        "log_prob": rounded(np.array([node.log_prob for node in nodes])),
        "score": rounded(np.array([node.score for node in nodes])),
        "finished": [node.finished for node in nodes],
        "dropped": [node.dropped for node in nodes],
        "on_path": [node.winner for node in nodes],
    }


def _refuse(constant: str) -> NoReturn:
    raise ValueError(f"{constant} in the step view's data: the browser could not read it")


def sent_step_data(sent_json: str) -> dict:
    """What a mounted step view was sent, read back from the component's JSON (for tests and the load generator),
    held to strict JSON as a browser's JSON.parse is: NaN or Infinity is an error."""
    (data,) = json.loads(sent_json, parse_constant=_refuse)
    return data


def step_player(
    result: DecodeResult,
    tokenizer: TokenizerBase,
    identity: ResultIdentity,
    step: int,
    words: bool,
    presentation: bool,
    tuned: tuple[LogitLens, TunedLens] | None = None,
    candidate_words: list[list[str | None]] | None = None,
    contributions: Contributions | None = None,
    content: bool = False,
    layers: range | None = None,
    encoder_lens: tuple[list[LayerTranslation], LogitLens] | None = None,
) -> StepAction | None:
    """Mounts the step view (with a tuned lens' guesses, and the lens, where the checkpoint has one; with the words
    the candidates would make, and ALTI+; its maps without sink keys if `content`, of the window `layers`; with
    DecoderLens where asked, its view opening the lens); the visitor's action of this run, if any."""
    extras = (tuned, candidate_words, contributions, content, layers, encoder_lens)
    lens = "tuned" if tuned is not None and st.session_state.get("lens") == "tuned" else "logit"
    data = step_data(result, tokenizer, step, words, identity.token, *extras) | {
        "presentation": presentation,
        "scroll_into_view": st.session_state.pop("scroll_to_output", False),
        "lens_choice": "encoder" if encoder_lens is not None else lens,
    }
    # Sent as a one-item list (read back by sent_step_data): Streamlit scans a dict's values for dataframes, which
    # imports pandas and pyarrow on a process's first page (docs/performance.md); a list goes to JSON as it is.
    action = PLAYER(key="step_player", data=[data], on_action_change=lambda: None).action
    if not isinstance(action, dict) or action.get("name") not in ("what_if", "attention", "leave", "beam_node", "why"):
        return None
    if action["name"] == "beam_node":
        node = action.get("node")
        if result.beam_tree is None or type(node) is not int or not 0 <= node < len(result.beam_tree.nodes):
            return None
        return StepAction("beam_node", result.beam_tree.nodes[node].step, node=node)
    chosen = action.get("step")
    if type(chosen) is not int or not 0 <= chosen < result.steps:  # not True, not 1.0: ids are whole numbers
        return None
    token = action.get("token")
    if action["name"] == "what_if" and (type(token) is not int or token not in result.topk_ids[chosen].tolist()):
        return None  # only the step's own candidates can be branched on
    page = page_of_link(action.get("page")) if action["name"] == "leave" else None
    if action["name"] == "leave" and page is None:
        return None
    return StepAction(action["name"], chosen, token if action["name"] == "what_if" else None, page)
