"""Syntactic heads (Voita, Talbot, Moiseev, Sennrich and Titov 2019, section 5.2), read against gold parses.

For each relation (nsubj, obj, amod, advmod) in each direction, a head's accuracy is the share of the relation's
arcs on which its largest weight, from one end's word, falls on the other end's word: `to_head` reads the
dependent's row (does "cat" look at "sleeps"?), `from_head` the head word's row. The positional baseline of a
relation and direction is the share of its arcs at its most frequent word offset (what the best head that only
counts positions would score); a head is syntactic for it when it beats that baseline by 10 points or more.

Words: the treebank's sentence is given to the model as its text, the surface tokens spaced as the treebank says
(`SpaceAfter=No`), and read back over whitespace-separated words (TokenizerBase.encode_words): a word's row is the
mean of its pieces' rows, its weight as a key the sum over its pieces (alignment.word_rows). A gold word is the
whitespace word that holds it; an arc is left out where its two ends share a whitespace word, or where an end's
whitespace word holds another word that is not punctuation ("don't" is "do" and "n't", "15-year" is "15", "-" and
"year"): such a word cannot be told apart from its neighbour in the model's input.

Only the encoder's self-attention heads are read: the treebank is English, the source side.
"""

from __future__ import annotations

import io
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from transformer.analysis.alignment import word_rows
from transformer.decoding.result import model_device, padded
from transformer.model.encoder_decoder import Transformer
from transformer.model.masks import padding_mask
from transformer.text.files import read_lines
from transformer.text.tokenizer import TokenizerBase

RELATIONS = ("nsubj", "obj", "amod", "advmod")  # Voita et al.'s four (their dobj is UD v2's obj)
DIRECTIONS = ("to_head", "from_head")
READINGS = tuple(f"{relation}_{direction}" for relation in RELATIONS for direction in DIRECTIONS)
MARGIN = 0.10  # a syntactic head beats the positional baseline by this much, the paper's 10 points
BATCH = 32  # sentences a forward pass


@dataclass(frozen=True)
class ParsedSentence:
    """A treebank sentence as the model reads it, with its arcs between whitespace words."""

    text: str
    arcs: tuple[tuple[str, int, int], ...]  # (relation, dependent's word, head's word), 0-based whitespace words


class TreebankError(ValueError):
    """Lines that are not CoNLL-U."""


def relation_of(deprel: str) -> str:
    """The universal relation of a label: nsubj:pass and nsubj:outer are nsubj (subtypes are one relation)."""
    return deprel.split(":")[0]


def parsed_sentence(tokens: Sequence[dict]) -> ParsedSentence:
    """One CoNLL-U sentence (conllu's token dicts): its text and its arcs of RELATIONS (see the module's words)."""
    text, word_of, holders, spaced = "", {}, [], True
    covered: dict[int, int] = {}  # a multiword token's words -> its surface token's whitespace word
    for token in tokens:
        ident = token["id"]
        if isinstance(ident, tuple) and ident[1] == ".":
            continue  # an empty node: no surface form
        if isinstance(ident, int) and ident in covered:
            word_of[ident] = covered[ident]
        else:
            if spaced or not holders:
                holders.append([])
            text += (" " if spaced and text else "") + token["form"]
            spaced = (token.get("misc") or {}).get("SpaceAfter") != "No"
            if isinstance(ident, tuple):  # "don't" = "do" + "n't": one surface token for several words
                covered |= {word: len(holders) - 1 for word in range(ident[0], ident[2] + 1)}
                continue
            word_of[ident] = len(holders) - 1
        if token["upos"] != "PUNCT":
            holders[word_of[ident]].append(ident)
    arcs = []
    for token in tokens:
        ident, head = token["id"], token.get("head")
        if not isinstance(ident, int) or not head or relation_of(token["deprel"]) not in RELATIONS:
            continue
        if head not in word_of:
            raise TreebankError(f"word {ident}'s head {head} is not a word of its sentence")
        dependent, governor = word_of[ident], word_of[head]
        alone = all(holders[word] == [end] for word, end in ((dependent, ident), (governor, head)))
        if dependent != governor and alone:
            arcs.append((relation_of(token["deprel"]), dependent, governor))
    return ParsedSentence(text, tuple(arcs))


def read_treebank(path: str | Path, limit: int | None = None) -> list[ParsedSentence]:
    """The first `limit` sentences of a CoNLL-U file (plain or gzipped), each with its text and arcs."""
    return parse_treebank(read_lines(path), limit)


def parse_treebank(lines: Sequence[str], limit: int | None = None) -> list[ParsedSentence]:
    """The first `limit` sentences of CoNLL-U lines; TreebankError saying where for lines that are not CoNLL-U."""
    import conllu

    found = []
    try:
        for sentence in conllu.parse_incr(io.StringIO("\n".join(lines) + "\n")):
            if limit is not None and len(found) >= limit:
                break
            found.append(parsed_sentence(sentence))
    except TreebankError as error:
        raise TreebankError(f"sentence {len(found) + 1}: {error}") from None
    except (conllu.exceptions.ParseException, KeyError, TypeError, ValueError) as error:
        raise TreebankError(f"not CoNLL-U at sentence {len(found) + 1}: {str(error)[:200]}") from None
    return found


@dataclass
class SyntaxCounts:
    """Running sums over the arcs read: per reading, each head's hits (L, H), the arcs and their word offsets."""

    hits: dict[str, np.ndarray]
    offsets: dict[str, Counter]
    sentences: int = 0
    skipped: int = 0  # too long for the model

    @classmethod
    def empty(cls, layers: int, heads: int) -> SyntaxCounts:
        return cls({r: np.zeros((layers, heads)) for r in READINGS}, {r: Counter() for r in READINGS})


def add_sentence(counts: SyntaxCounts, word_maps: np.ndarray, arcs: Sequence[tuple[str, int, int]]) -> None:
    """One sentence's encoder maps over its words (L, H, W, W) and its arcs, added to the sums."""
    top = word_maps.argmax(axis=-1)  # (L, H, W): each word's most-weighed word, per head
    for relation, dependent, governor in arcs:
        for direction, (query, key) in zip(DIRECTIONS, ((dependent, governor), (governor, dependent))):
            reading = f"{relation}_{direction}"
            counts.hits[reading] += top[..., query] == key
            counts.offsets[reading][key - query] += 1
    counts.sentences += 1


@dataclass(frozen=True)
class SyntacticRoles:
    """Per reading (relation and direction): each encoder head's accuracy (L, H), the positional baseline and its
    offset, and the arcs counted."""

    accuracy: dict[str, np.ndarray]
    baseline: dict[str, float]
    baseline_offset: dict[str, int]
    arcs: dict[str, int]
    sentences: int
    skipped: int

    def syntactic(self) -> list[tuple[str, int, int, float, float]]:
        """(reading, layer, head, accuracy, baseline), 0-based, for every head that beats a baseline by MARGIN."""
        return [
            (reading, int(layer), int(head), float(self.accuracy[reading][layer, head]), self.baseline[reading])
            for reading in READINGS
            if self.arcs[reading]
            for layer, head in zip(*np.nonzero(self.accuracy[reading] >= self.baseline[reading] + MARGIN))
        ]


def roles_of(counts: SyntaxCounts) -> SyntacticRoles:
    accuracy, baseline, offset, arcs = {}, {}, {}, {}
    for reading in READINGS:
        total = sum(counts.offsets[reading].values())
        arcs[reading] = total
        accuracy[reading] = counts.hits[reading] / max(total, 1)
        commonest = counts.offsets[reading].most_common(1)
        offset[reading] = commonest[0][0] if commonest else 0
        baseline[reading] = commonest[0][1] / total if commonest else 0.0
    return SyntacticRoles(accuracy, baseline, offset, arcs, counts.sentences, counts.skipped)


@torch.inference_mode()
def syntactic_roles(
    model: Transformer,
    tokenizer: TokenizerBase,
    sentences: Sequence[ParsedSentence],
    progress: Callable[[int, int], None] | None = None,
) -> SyntacticRoles:
    """Every encoder head's accuracy on each reading over the sentences, BATCH at a time; a sentence longer than the
    model reads is skipped and counted."""
    config, device = model.config, model_device(model)
    counts = SyntaxCounts.empty(config.n_encoder_layers, config.n_heads)
    prefix = tokenizer.source_prefix_ids
    readable = []
    for sentence in sentences:
        ids, words = tokenizer.encode_words(sentence.text)
        if len(prefix) + len(ids) + 1 > config.max_len:
            counts.skipped += 1
            continue
        readable.append((sentence, [*prefix, *ids, config.eos_id], [range(0)] * len(prefix) + [*words, range(0)]))
    for start in range(0, len(readable), BATCH):
        batch = readable[start : start + BATCH]
        src = padded([ids for _, ids, _ in batch], config.pad_id, device)
        maps = torch.stack(model.encode(src, padding_mask(src, config.pad_id), need_weights=True).attentions, 1)
        for row, (sentence, ids, words) in enumerate(batch):  # maps: (B, L, H, S, S)
            pieces = maps[row, :, :, : len(ids), : len(ids)].float().cpu().numpy()
            add_sentence(counts, word_rows(pieces, words, words, "output"), sentence.arcs)
        if progress is not None:
            progress(min(start + BATCH, len(readable)), len(readable))
    return roles_of(counts)
