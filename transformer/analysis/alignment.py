"""Word alignments read from a model, scored against gold alignments: precision, recall and AER.

"This head aligns words" is measured the way papers measure it (Och & Ney 2003): a gold file in the Pharaoh
format gives each sentence pair its sure links ("i-j") and possible ones ("i?j" or "ipj"), source word i with
target word j, words being the whitespace-separated tokens of the two text files. The model reads each pair
teacher forced; each cross-attention head, each layer's mean, the same without their sink keys ("attention, content
only": the weight on `</s>`, `<s>` and punctuation dropped, each row renormalised over the rest, as the maps' content
only view), value-weighted attention, ALTI+ (each step's
contributions from the source through the whole model) and, where asked, integrated gradients and attention flow
through the decoder (decoder_flow) give a target-word x source-word matrix, from which links are extracted (the
argmax per target word, or every weight over a threshold).

Which row of a step's matrix speaks for a target word is a convention that papers differ on, so both are scored:
row t is the query that *produces* target token t ("output"), and the one that was *fed* token t is row t + 1
("input"). Pieces are mapped to the words of the files exactly, by the byte spans SentencePiece gives each piece
(TokenizerBase.encode_words); a target word's row is the mean of its pieces' rows, a source word's weight the sum over
its pieces, each row then shared out over the source words (the end-of-sentence token, which no gold link names,
left out).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import numpy as np

from transformer.analysis.attribution.gradients import source_integrated_gradients
from transformer.analysis.attribution.measures import value_weighted_attention
from transformer.analysis.contributions import contributions
from transformer.analysis.decoder_flow import MAX_DECODER_FLOW_TOKENS, decoder_flow
from transformer.analysis.views import without_sinks
from transformer.decoding.forcing import teacher_force_ids
from transformer.model.encoder_decoder import Transformer
from transformer.model.heads import head_name, layer_name
from transformer.model.kinds import AttentionKind
from transformer.text.tokenizer import TokenizerBase

if TYPE_CHECKING:  # pandas is slow to import (docs/performance.md): only the tables need it
    import pandas as pd

Link = tuple[int, int]  # (source word, target word), 0-based
CONVENTIONS = ("output", "input")
ATTENTION, CONTENT_ONLY = "attention", "attention, content only"  # the heads' maps, and without their sink keys
DEFAULT_THRESHOLD = 0.3
LINK = re.compile(r"(\d{1,9})([-?p])(\d{1,9})")  # a word index of 5,000 digits is no link (and no int)
IG_STEPS = 32  # interpolation steps of integrated gradients when aligning (the attribution page's default is 50)
IG, FLOW = "integrated gradients", "attention flow"  # the measures computed only where asked


class GoldError(ValueError):
    """A gold alignment file that cannot be read against its texts; the message names the line."""


@dataclass(frozen=True)
class GoldAlignment:
    """One sentence pair's gold links; `possible` holds the sure links too (S ⊆ P, as AER assumes)."""

    sure: frozenset[Link]
    possible: frozenset[Link]


def parse_pharaoh(
    lines: Sequence[str], src_lengths: Sequence[int], tgt_lengths: Sequence[int], one_based: bool | None = None
) -> tuple[list[GoldAlignment], bool]:
    """The gold links of every line and whether the file counts words from 1 (`one_based` None: detected, as
    1-based when no link names word 0). GoldError naming the line for anything else."""
    if len(lines) != len(src_lengths):
        raise GoldError(f"the gold file has {len(lines)} lines and the texts {len(src_lengths)}: one line per pair")
    parsed: list[list[tuple[int, str, int]]] = []
    for number, line in enumerate(lines, 1):
        links = []
        for token in line.split():
            match = LINK.fullmatch(token)
            if match is None:
                raise GoldError(f"line {number}: {token[:40]!r} is not a link (i-j for sure, i?j or ipj for possible)")
            links.append((int(match[1]), match[2], int(match[3])))
        parsed.append(links)
    if one_based is None:
        one_based = any(parsed) and all(min(i, j) > 0 for links in parsed for i, _, j in links)
    base = int(one_based)
    golds = []
    for number, (links, src_length, tgt_length) in enumerate(zip(parsed, src_lengths, tgt_lengths), 1):
        sure, possible = set(), set()
        for i, kind, j in links:
            for side, index, length in (("source", i, src_length), ("target", j, tgt_length)):
                if not base <= index < length + base:
                    raise GoldError(
                        f"line {number}: {side} word {index} is out of range: the {side} line has "
                        f"{length} words, counted from {base}"
                    )
            (sure if kind == "-" else possible).add((i - base, j - base))
        golds.append(GoldAlignment(frozenset(sure), frozenset(sure | possible)))
    return golds, one_based


def format_pharaoh(links: Iterable[Link]) -> str:
    """Links as one line of the Pharaoh format, 0-based, in order."""
    return " ".join(f"{i}-{j}" for i, j in sorted(links))


@dataclass(frozen=True)
class Counts:
    """What AER is computed from, summed over a corpus: |A|, |S|, |A ∩ S| and |A ∩ P|."""

    predicted: int = 0
    sure: int = 0
    hits_sure: int = 0
    hits_possible: int = 0

    def __add__(self, other: Counts) -> Counts:
        return Counts(*(a + b for a, b in zip(self.astuple(), other.astuple())))

    def astuple(self) -> tuple[int, int, int, int]:
        return self.predicted, self.sure, self.hits_sure, self.hits_possible

    @property
    def precision(self) -> float:
        return self.hits_possible / self.predicted if self.predicted else 0.0

    @property
    def recall(self) -> float:
        return self.hits_sure / self.sure if self.sure else 0.0

    @property
    def aer(self) -> float:
        """1 - (|A ∩ S| + |A ∩ P|) / (|A| + |S|) (Och & Ney 2003)."""
        total = self.predicted + self.sure
        return 1.0 - (self.hits_sure + self.hits_possible) / total if total else 0.0


def counts(predicted: set[Link] | frozenset[Link], gold: GoldAlignment) -> Counts:
    return Counts(len(predicted), len(gold.sure), len(predicted & gold.sure), len(predicted & gold.possible))


def word_rows(
    piece_rows: np.ndarray, src_words: Sequence[range], tgt_words: Sequence[range], convention: str
) -> np.ndarray:
    """Rows over decoder input positions and source pieces (..., T, S) -> target words x source words (..., Tw, Sw).

    src_words/tgt_words give each piece's words (TokenizerBase.encode_words; empty for the end token); `convention`
    says which row speaks for target token t: "output" row t, "input" row t + 1. A source piece that stands for
    several words shares its weight out among them.
    """
    shift = CONVENTIONS.index(convention)
    n_src, n_tgt = max(r.stop for r in src_words), max(r.stop for r in tgt_words)
    to_words = np.zeros((len(src_words), n_src), dtype=np.float64)
    for piece, words in enumerate(src_words):
        to_words[piece, words.start : words.stop] = 1.0 / max(len(words), 1)
    by_source = piece_rows.astype(np.float64) @ to_words  # (..., T, Sw)
    rows = [
        by_source[..., [t + shift for t, words in enumerate(tgt_words) if word in words], :].mean(axis=-2)
        for word in range(n_tgt)
    ]
    words = np.stack(rows, axis=-2)
    return words / np.maximum(words.sum(axis=-1, keepdims=True), 1e-12)


def argmax_links(matrix: np.ndarray) -> frozenset[Link]:
    """Each target word linked to the source word it weighs most: (Tw, Sw) -> links."""
    return frozenset((int(source), target) for target, source in enumerate(matrix.argmax(axis=-1)))


def threshold_links(matrix: np.ndarray, threshold: float) -> frozenset[Link]:
    """Every (source word, target word) whose weight reaches the threshold."""
    targets, sources = np.nonzero(matrix >= threshold)
    return frozenset(zip(sources.tolist(), targets.tolist()))


@dataclass(frozen=True)
class Method:
    """One way of reading alignments: a measure (attention, value-weighted, ALTI+, integrated gradients), where it is
    read (layer and head, 0-based; head None for the layer's mean; both None for ALTI+ and integrated gradients), a row
    convention and an extraction."""

    measure: str
    layer: int | None
    head: int | None
    convention: str
    extraction: str

    @property
    def label(self) -> str:
        where = (
            ""
            if self.layer is None
            else f" · {layer_name(self.layer)} · " + ("mean" if self.head is None else f"{head_name(self.head)}")
        )
        return " · ".join(part for part in (f"{self.measure}{where}", self.convention, self.extraction) if part)


@dataclass(frozen=True)
class MethodScore:
    method: Method
    counts: Counts


@dataclass
class AlignmentReport:
    """Every method's corpus score (best first) and the links it extracted per sentence."""

    scores: list[MethodScore]
    links: dict[Method, list[frozenset[Link]]] = field(repr=False)  # per aligned pair
    aligned: list[int]  # the 0-based lines aligned: not those longer than the model reads, nor empty ones
    skipped: list[int]  # those left out

    def table(self) -> list[dict]:
        """One row per method, best AER first: what the CLI prints and writes, and the page shows."""
        return [
            {
                "rank": rank,
                "method": s.method.measure,
                "layer": None if s.method.layer is None else s.method.layer + 1,
                "head": "" if s.method.layer is None else "mean" if s.method.head is None else str(s.method.head + 1),
                "convention": s.method.convention,
                "extraction": s.method.extraction,
                "aer": s.counts.aer,
                "precision": s.counts.precision,
                "recall": s.counts.recall,
                "links": s.counts.predicted,
            }
            for rank, s in enumerate(self.scores, 1)
        ]

    def frame(self) -> pd.DataFrame:
        """The table as a DataFrame, layers whole numbers (empty for a method read from no layer: ALTI+)."""
        import pandas as pd

        frame = pd.DataFrame(self.table())
        frame["layer"] = frame["layer"].astype("Int64")
        return frame


def measures(
    model: Transformer,
    tokenizer: TokenizerBase,
    src_ids: list[int],
    tgt_ids: list[int],
    integrated_gradients: bool,
    flow: bool = False,
) -> dict[tuple[str, int | None, int | None], np.ndarray]:
    """Each measure's rows over decoder input positions and source pieces (T, S), keyed (measure, layer, head)."""
    forced = teacher_force_ids(model, tokenizer, src_ids, tgt_ids)
    cross = forced.cross.numpy()  # (L, H, T, S)
    weighted = value_weighted_attention(model, src_ids, tgt_ids)[AttentionKind.CROSS]
    content = np.zeros_like(cross)  # without the sink keys, each piece's row renormalised over the rest (0 if none)
    rows, kept = without_sinks(cross, [tokenizer.id_to_piece(i) for i in src_ids])
    content[..., kept] = np.nan_to_num(rows)
    found: dict[tuple[str, int | None, int | None], np.ndarray] = {}
    for name, maps in ((ATTENTION, cross), (CONTENT_ONLY, content), ("value-weighted", weighted)):
        for layer in range(maps.shape[0]):
            for head in range(maps.shape[1]):
                found[(name, layer, head)] = maps[layer, head]
            found[(name, layer, None)] = maps[layer].mean(axis=0)
    # ALTI+: row t, the step producing token t, over the source, as a share of what it drew from the source (rows
    # summing to 1 as attention rows do, so that one threshold reads both)
    source = contributions(model, src_ids, tgt_ids).alti_plus[:, : len(src_ids)]
    found[("ALTI+", None, None)] = source / np.maximum(source.sum(axis=1, keepdims=True), 1e-12)
    if integrated_gradients:  # row t: the step producing token t, as an attention row
        found[(IG, None, None)] = np.abs(source_integrated_gradients(model, src_ids, tgt_ids, IG_STEPS))
    if flow:  # row t: the step producing token t, its flow from the source as a share, as ALTI+'s
        flows = decoder_flow(forced.encoder_self.numpy(), forced.decoder_self.numpy(), cross)[:, : len(src_ids)]
        found[(FLOW, None, None)] = flows / np.maximum(flows.sum(axis=1, keepdims=True), 1e-12)
    return found


def read_pair(
    model: Transformer,
    tokenizer: TokenizerBase,
    source: str,
    target: str,
    integrated_gradients: bool,
    flow: bool = False,
) -> tuple[dict[tuple[str, int | None, int | None], np.ndarray], list[range], list[range]] | None:
    """A pair's measures (see `measures`) and each source and target piece's words, the end tokens included (no
    word); None for a pair the model cannot read: a side empty, or longer than its max_len with the end token, or
    (with attention flow) than MAX_DECODER_FLOW_TOKENS."""
    eos, max_len = model.config.eos_id, model.config.max_len
    longest = min(max_len, MAX_DECODER_FLOW_TOKENS) if flow else max_len
    src_pieces, src_words = tokenizer.encode_words(source)
    tgt_ids, tgt_words = tokenizer.encode_words(target)
    src_ids = tokenizer.source_ids_of(src_pieces)
    if not src_pieces or not tgt_ids or len(src_ids) > longest or len(tgt_ids) + 1 > longest:
        return None
    found = measures(model, tokenizer, src_ids, [*tgt_ids, eos], integrated_gradients, flow)
    return found, tokenizer.source_word_ranges(src_words), [*tgt_words, range(0)]


def align_corpus(
    model: Transformer,
    tokenizer: TokenizerBase,
    sources: Sequence[str],
    targets: Sequence[str],
    golds: Sequence[GoldAlignment],
    threshold: float = DEFAULT_THRESHOLD,
    integrated_gradients: bool = False,
    progress: Callable[[int, int], None] | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    flow: bool = False,
) -> AlignmentReport:
    """Every method's links for every pair and its score against the gold, best AER first.

    Pairs longer than the model reads (with their end tokens; with attention flow, than it is read for) are left
    out and listed, so that every method is scored on the same pairs. `progress` hears (pairs
    done, pairs) after each; `should_stop` is asked before each, and the pairs done so far are scored.
    """
    extractions = {"argmax": argmax_links, f"≥ {threshold:g}": lambda m: threshold_links(m, threshold)}
    links: dict[Method, list[frozenset[Link]]] = {}
    totals: dict[Method, Counts] = {}
    aligned, skipped = [], []
    for index, (source, target, gold) in enumerate(zip(sources, targets, golds)):
        if should_stop():
            break
        read = read_pair(model, tokenizer, source, target, integrated_gradients, flow)
        if read is None:
            skipped.append(index)
            continue
        aligned.append(index)
        found, src_words, tgt_words = read
        for convention in CONVENTIONS:
            for (measure, layer, head), rows in found.items():
                words = word_rows(rows, src_words, tgt_words, convention)
                for extraction, extract in extractions.items():
                    method = Method(measure, layer, head, convention, extraction)
                    predicted = extract(words)
                    links.setdefault(method, []).append(predicted)
                    totals[method] = totals.get(method, Counts()) + counts(predicted, gold)
        if progress is not None:
            progress(index + 1, len(sources))
    scores = sorted((MethodScore(method, total) for method, total in totals.items()), key=lambda s: s.counts.aer)
    return AlignmentReport(scores, links, aligned, skipped)


def aer_grid(report: AlignmentReport, measure: str, convention: str, extraction: str) -> np.ndarray:
    """(layers, heads + 1) AER of a measure's heads and, in the last column, each layer's mean."""
    found = {
        (s.method.layer, s.method.head): s.counts.aer
        for s in report.scores
        if (s.method.measure, s.method.convention, s.method.extraction) == (measure, convention, extraction)
        and s.method.layer is not None
    }
    layers = max(layer for layer, _ in found) + 1
    heads = max(head for _, head in found if head is not None) + 1
    grid = np.full((layers, heads + 1), np.nan)
    for (layer, head), aer in found.items():
        grid[layer, heads if head is None else head] = aer
    return grid


def pair_matrix(model: Transformer, tokenizer: TokenizerBase, source: str, target: str, method: Method) -> np.ndarray:
    """The target-word x source-word matrix a method reads for one aligned pair (what it extracted its links from)."""
    read = read_pair(model, tokenizer, source, target, method.measure == IG, method.measure == FLOW)
    if read is None:
        raise ValueError("the model cannot read this pair: a side is empty or longer than its max_len")
    found, src_words, tgt_words = read
    return word_rows(found[(method.measure, method.layer, method.head)], src_words, tgt_words, method.convention)


def reversed_gold(gold: GoldAlignment) -> GoldAlignment:
    """The same links read from the target side: what a reverse-direction model is scored against."""
    return GoldAlignment(*(frozenset((j, i) for i, j in links) for links in (gold.sure, gold.possible)))


def with_intersection(forward: AlignmentReport, reverse: AlignmentReport, golds: Sequence[GoldAlignment]) -> Method:
    """Adds to `forward` the links both directions agree on (its best method's, and the reverse-direction model's
    best method's read back from the source side): the symmetrisation of statistical aligners, which trades recall
    for precision. Returns the new method, ranked among the others."""
    best, best_reverse = forward.scores[0].method, reverse.scores[0].method
    reverse_links = dict(zip(reverse.aligned, reverse.links[best_reverse]))
    method = Method("both directions", None, None, "", f"{best.label} ∩ reverse {best_reverse.label}")
    links, total = [], Counts()
    for line, found in zip(forward.aligned, forward.links[best]):
        agreed = found & frozenset((i, j) for j, i in reverse_links.get(line, frozenset()))
        links.append(agreed)
        total += counts(agreed, golds[line])
    forward.links[method] = links
    forward.scores = sorted([*forward.scores, MethodScore(method, total)], key=lambda s: s.counts.aer)
    return method
