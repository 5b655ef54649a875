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

import itertools
from collections import Counter
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from transformer.analysis.alignment import word_rows
from transformer.analysis.heads.importance import ImportanceStopped
from transformer.decoding.result import model_device, padded
from transformer.model.config import shown
from transformer.model.encoder_decoder import Transformer
from transformer.model.masks import padding_mask
from transformer.text.files import MAX_LINE_BYTES, iter_text_lines, open_regular
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
    """One CoNLL-U sentence (conllu's token dicts): its text and its arcs of RELATIONS (see the module's words).
    TreebankError for a multiword token spanning more words than the sentence has, or a text over
    MAX_SENTENCE_CHARS: each is checked before what it sizes is built (a 61-byte "1-100000000" built a dict of 10^8
    words)."""
    words = sum(isinstance(token["id"], int) for token in tokens)
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
            if len(text) > MAX_SENTENCE_CHARS:
                raise TreebankError(f"its text is over {MAX_SENTENCE_CHARS:,} characters: not one sentence")
            spaced = (token.get("misc") or {}).get("SpaceAfter") != "No"
            if isinstance(ident, tuple):  # "don't" = "do" + "n't": one surface token for several words
                first, last = ident[0], ident[2]
                if not 0 < first <= last or last - first >= words:
                    raise TreebankError(f"the multiword token {first}-{last} spans more than its {words} words")
                covered |= {word: len(holders) - 1 for word in range(first, last + 1)}
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
            raise TreebankError(f"word {ident}'s head {shown(head)} is not a word of its sentence")
        dependent, governor = word_of[ident], word_of[head]
        alone = all(holders[word] == [end] for word, end in ((dependent, ident), (governor, head)))
        if dependent != governor and alone:
            arcs.append((relation_of(token["deprel"]), dependent, governor))
    return ParsedSentence(text, tuple(arcs))


def read_treebank(path: str | Path, limit: int | None = None) -> list[ParsedSentence]:
    """The first `limit` sentences of a CoNLL-U file (plain or gzipped), each with its text and arcs: read as a
    stream, so the rest of the file is never decompressed."""
    with open_regular(path, "CoNLL-U file") as handle:
        try:
            return parse_treebank(iter_text_lines(handle, MAX_TREEBANK_BYTES, MAX_LINE_BYTES), limit)
        except ValueError as error:
            raise TreebankError(f"{path}: {error}") from None


def parse_treebank(lines: Iterable[str], limit: int | None = None) -> list[ParsedSentence]:
    """The first `limit` sentences of CoNLL-U lines, taken one sentence at a time; TreebankError saying where for
    lines that are not CoNLL-U or a sentence past the bounds above. Each sentence's lines are bounded before
    conllu parses them: its words (a long FEATS or MISC a word held gigabytes; measured: docs/performance.md)
    and its size."""
    import conllu

    found: list[ParsedSentence] = []
    if limit is not None and limit <= 0:
        return found
    for block in _sentence_blocks(lines):
        try:
            found += [parsed_sentence(sentence) for sentence in conllu.parse(block)]
        except TreebankError as error:
            raise TreebankError(f"sentence {len(found) + 1}: {error}") from None
        except (conllu.exceptions.ParseException, KeyError, TypeError, ValueError) as error:
            raise TreebankError(f"not CoNLL-U at sentence {len(found) + 1}: {shown(str(error))}") from None
        if limit is not None and len(found) >= limit:
            break
    return found


# The bounds on one sentence of a treebank, each well above UD English's (EWT: 84 words, a word's line of 977
# characters, a URL written as its form and lemma).
MAX_SENTENCE_WORDS = 512
MAX_WORD_LINE_CHARS = 4_000
MAX_SENTENCE_CHARS = MAX_LINE_BYTES  # the text the model reads: a sentence, as a line of any text file
MAX_BLOCK_CHARS = 1 << 20  # a sentence's lines, its comments included
MAX_TREEBANK_BYTES = 256 << 20  # decompressed, read only as far as the sentences asked for


def _sentence_blocks(lines: Iterable[str]) -> Iterator[str]:
    """Each sentence's lines (those between blank lines) as one text, refused (TreebankError naming the sentence)
    once it is past a bound, before the rest of it is held. conllu reads a block as one sentence, comments alone
    too: the blocks count the sentences."""
    block: list[str] = []
    words = chars = 0
    number = 1
    for line in itertools.chain(lines, [""]):
        if line.strip():
            block.append(line)
            chars += len(line) + 1
            if not line.startswith("#"):
                words += 1
                if len(line) > MAX_WORD_LINE_CHARS:
                    raise TreebankError(f"sentence {number}: a word's line is over {MAX_WORD_LINE_CHARS:,} characters")
            if words > MAX_SENTENCE_WORDS or chars > MAX_BLOCK_CHARS:
                raise TreebankError(
                    f"sentence {number}: over {MAX_SENTENCE_WORDS:,} words or {MAX_BLOCK_CHARS:,} characters"
                )
        elif block:
            yield "\n".join(block) + "\n\n"
            block, words, chars, number = [], 0, 0, number + 1


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


def add_parsed_sentence(counts: SyntaxCounts, word_maps: np.ndarray, arcs: Sequence[tuple[str, int, int]]) -> None:
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
    should_stop: Callable[[], bool] = lambda: False,
) -> SyntacticRoles:
    """Every encoder head's accuracy on each reading over the sentences, BATCH at a time; a sentence longer than the
    model reads is skipped and counted. `should_stop`, asked between batches, ends the work with ImportanceStopped."""
    config, device = model.config, model_device(model)
    counts = SyntaxCounts.empty(config.n_encoder_layers, config.n_heads)
    readable = []
    for sentence in sentences:
        ids, words = tokenizer.encode_words(sentence.text)
        source = tokenizer.source_ids_of(ids)
        if len(source) > config.max_len:
            counts.skipped += 1
            continue
        readable.append((sentence, source, tokenizer.source_word_ranges(words)))
    for start in range(0, len(readable), BATCH):
        if should_stop():
            raise ImportanceStopped
        batch = readable[start : start + BATCH]
        src = padded([ids for _, ids, _ in batch], config.pad_id, device)
        maps = torch.stack(model.encode(src, padding_mask(src, config.pad_id), need_weights=True).attentions, 1)
        for row, (sentence, ids, words) in enumerate(batch):  # maps: (B, L, H, S, S)
            pieces = maps[row, :, :, : len(ids), : len(ids)].float().cpu().numpy()
            add_parsed_sentence(counts, word_rows(pieces, words, words, "output"), sentence.arcs)
        if progress is not None:
            progress(min(start + BATCH, len(readable)), len(readable))
    return roles_of(counts)
