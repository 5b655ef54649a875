"""What each head does, over a corpus sample: the roles of Voita, Talbot, Moiseev, Sennrich and Titov (2019),
"Analyzing Multi-Head Self-Attention: Specialized Heads Do the Heavy Lifting, the Rest Can Be Pruned".

- confidence: the mean over query tokens of the head's largest weight;
- positional: the share of query tokens whose largest weight is at offset -1, 0 or +1 from themselves (the most
  frequent of the three is the head's offset); positional when the share is 90 % or more, the paper's threshold;
- rare-word (encoder heads): the share of sentences in which the head's weight, averaged over queries, is largest
  on the sentence's rarest source piece, rarity read from the tokenizer's piece scores (a unigram model's log
  probabilities: the lowest is the rarest), since the checkpoints do not record the training data's counts;
- sink: the mean share of each query's weight on `</s>`, `<s>` and punctuation (`views.is_sink`).

Self-attention heads of both sides are read over the source and over the reference (teacher forced); the
cross-attention heads get confidence and sink (their alignment is Alignment's AER).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from transformer.analysis.heads.importance import ImportanceStopped, TokenizedPairs
from transformer.analysis.views import is_sink
from transformer.decoding.forcing import teacher_force_ids
from transformer.model.encoder_decoder import Transformer
from transformer.model.kinds import AttentionKind
from transformer.text.tokenizer import TokenizerBase

POSITIONAL_SHARE = 0.9  # Voita et al.'s threshold
OFFSETS = (-1, 0, 1)


@dataclass
class RoleCounts:
    """Running sums for one attention kind: (L, H) each."""

    confidence: np.ndarray
    offsets: np.ndarray  # (L, H, 3) tokens whose largest weight is at offset -1, 0, +1
    sink: np.ndarray
    rare: np.ndarray  # sentences whose mean weight peaks on the rarest piece
    tokens: int = 0
    sentences: int = 0


@dataclass(frozen=True)
class HeadRoles:
    """Per kind, (layers, heads) arrays; None where a role is not read (positional for cross-attention, rare-word
    but for the encoder, or for a tokenizer without piece scores)."""

    confidence: dict[AttentionKind, np.ndarray] = field(default_factory=dict)
    positional_offset: dict[AttentionKind, np.ndarray | None] = field(default_factory=dict)
    positional_share: dict[AttentionKind, np.ndarray | None] = field(default_factory=dict)
    sink_share: dict[AttentionKind, np.ndarray] = field(default_factory=dict)
    rare_share: dict[AttentionKind, np.ndarray | None] = field(default_factory=dict)


def empty_counts(layers: int, heads: int) -> RoleCounts:
    zeros = np.zeros((layers, heads))
    return RoleCounts(zeros.copy(), np.zeros((layers, heads, len(OFFSETS))), zeros.copy(), zeros.copy())


def add_sentence(counts: RoleCounts, maps: np.ndarray, key_pieces: Sequence[str], rarest: int | None) -> None:
    """One sentence's maps of one kind (L, H, Q, K) added to the sums; `rarest`, the key index of its rarest piece
    (None: rarity not read). Query q sits at key position q (self-attention)."""
    queries = maps.shape[2]
    top = maps.argmax(axis=-1)  # (L, H, Q)
    counts.confidence += maps.max(axis=-1).sum(axis=-1)
    offsets = top - np.arange(queries)
    for column, offset in enumerate(OFFSETS):
        counts.offsets[..., column] += (offsets == offset).sum(axis=-1)
    sinks = np.array([is_sink(piece) for piece in key_pieces])
    counts.sink += maps[..., sinks].sum(axis=-1).sum(axis=-1)
    if rarest is not None:
        counts.rare += maps.mean(axis=2).argmax(axis=-1) == rarest
    counts.tokens += queries
    counts.sentences += 1


def rarest_piece(tokenizer: TokenizerBase, ids: Sequence[int]) -> int | None:
    """The position of the sentence's rarest piece by the tokenizer's piece score (None without scores)."""
    score = getattr(getattr(tokenizer, "processor", None), "GetScore", None)
    if score is None or getattr(tokenizer, "vocabulary", None) is not None:
        return None
    specials = {tokenizer.eos_id, tokenizer.bos_id, tokenizer.pad_id, tokenizer.unk_id}
    scored = [(score(i), position) for position, i in enumerate(ids) if i not in specials]
    return min(scored)[1] if scored else None


def head_roles(
    model: Transformer,
    tokenizer: TokenizerBase,
    corpus: TokenizedPairs,
    should_stop: Callable[[], bool] = lambda: False,
) -> HeadRoles:
    """Each head's roles over the sample: one teacher-forced pass per sentence pair, every map recorded.
    `should_stop`, asked between sentences, ends the work with ImportanceStopped."""
    config = model.config
    counts = {kind: empty_counts(kind.layers(config), config.n_heads) for kind in AttentionKind}
    read_rarity = rarest_piece(tokenizer, corpus.sources[0]) is not None if corpus.sources else False
    for src_ids, tgt_ids in zip(corpus.sources, corpus.references, strict=True):
        if should_stop():
            raise ImportanceStopped
        result = teacher_force_ids(model, tokenizer, src_ids, tgt_ids)
        rarest = rarest_piece(tokenizer, src_ids) if read_rarity else None
        add_sentence(counts[AttentionKind.ENCODER], result.encoder_self.numpy(), result.src_pieces, rarest)
        add_sentence(counts[AttentionKind.DECODER], result.decoder_self.numpy(), result.decoder_input_pieces, None)
        add_sentence(counts[AttentionKind.CROSS], result.cross.numpy(), result.src_pieces, None)
    found = HeadRoles()
    for kind, sums in counts.items():
        tokens = max(sums.tokens, 1)
        shares = sums.offsets / tokens
        found.confidence[kind] = sums.confidence / tokens
        found.sink_share[kind] = sums.sink / tokens
        positional = kind is not AttentionKind.CROSS
        found.positional_offset[kind] = np.array(OFFSETS)[shares.argmax(axis=-1)] if positional else None
        found.positional_share[kind] = shares.max(axis=-1) if positional else None
        reads_rare = kind is AttentionKind.ENCODER and read_rarity
        found.rare_share[kind] = sums.rare / max(sums.sentences, 1) if reads_rare else None
    return found
