"""The word each step's candidates would make: a candidate that is a piece of a word, continued greedily.

The step view lists each step's most probable next tokens, and many are pieces ("▁ch", "at"); which word the
model would have written had it taken one is the question a reader asks next. Each candidate is fed after the
output so far and the model continues greedily, one piece at a time, until it starts another word or ends. The
output so far is run once (teacher forced, one pass that fills a key/value cache); then the candidates of every
step continue together from copies of that cache, each row at its own position and with the keys after its step
masked, so the work is a few batched decoder steps (one per piece added), not one decode per candidate.
Each continued piece is read over the whole vocabulary, so at a large one that reading outweighs the decode, and
the app works the words out when a visitor asks (worked_out_at_open).
"""

from __future__ import annotations

import torch

from transformer.decoding.greedy import KeysSoFar, encode_source
from transformer.decoding.result import DecodeResult, model_device
from transformer.model.config import TransformerConfig
from transformer.model.encoder_decoder import Transformer
from transformer.model.layers import LayerCache
from transformer.model.masks import target_mask
from transformer.model.probes import Probe
from transformer.text.pieces import WORD_START, is_special, readable
from transformer.text.tokenizer import TokenizerBase

MAX_CONTINUATION = 6  # pieces a candidate's word is continued by at most; a longer word ends in "…"
CACHE_BUDGET = 1 << 23  # floats of key/value cache continued together (32 MB), bounding the transient memory
CUT = "…"
JOINERS = "'’-"  # pieces inside a word that are not letters: "l" "'" "eau" is one word, "parc" "." is not
# The multiply-adds of reading one continued piece over the vocabulary (d_model x vocabulary) above which the words
# are worked out when asked: past it they cost more than the decode itself (measured: docs/performance.md). opus-mt's
# 512 x 59,514 and the default's 256 x 8,000 are worked out with the decode.
EAGER_WORD_PRODUCTS = 2**26


def worked_out_at_open(config: TransformerConfig) -> bool:
    """Whether the candidates' words come with a decode in the app, or wait for the visitor to ask."""
    return config.d_model * config.tgt_vocab_size <= EAGER_WORD_PRODUCTS


def starts_word(piece: str) -> bool:
    """Whether a piece begins a word of its own, or is a special token."""
    return piece.startswith(WORD_START) or is_special(piece)


def carries_word(piece: str) -> bool:
    """Whether a piece carries on the word before it: letters or digits, or a joiner, without a word-start mark
    (punctuation after a word ends it, though SentencePiece glues it on)."""
    return not starts_word(piece) and (piece[:1].isalnum() or piece[:1] in JOINERS)


def current_word(pieces: list[str]) -> list[str]:
    """The pieces of the output's last word, which a candidate that carries a word on is added to."""
    start = len(pieces)
    while start > 0 and carries_word(pieces[start - 1]):
        start -= 1
    if start > 0 and pieces[start - 1].startswith(WORD_START):
        start -= 1
    return pieces[start:]


def _word_of(piece: str, before: list[str]) -> list[str] | None:
    """The pieces of the word a candidate begins or carries on; None for punctuation and special tokens."""
    if carries_word(piece):
        return [*before, piece]
    return [piece] if piece.startswith(WORD_START) else None


def _rows_of(cache: list[LayerCache], rows: int) -> list[LayerCache]:
    """The decode's cache repeated for `rows` continuations (each hides, by its mask, what it may not see)."""
    index = torch.zeros(rows, dtype=torch.long, device=cache[0].cross_key.device)
    return [layer.select(index) for layer in cache]


@torch.inference_mode()
def candidate_words(
    model: Transformer, tokenizer: TokenizerBase, result: DecodeResult, probe: Probe | None = None
) -> list[list[str | None]]:
    """For each step and each of its top-k candidates, the word taking it would make, as a reader reads it
    ("chat" for "▁ch"); None where that is the candidate itself, punctuation or a special token."""
    config, device = model.config, model_device(model)
    src = torch.tensor([result.src_ids], device=device)
    encoded, src_mask = encode_source(model, src, False, probe)
    decoder_input = torch.tensor([[config.start_id, *result.tgt_ids[:-1]]], device=device)
    steps, width = result.topk_ids.shape
    cache = model.start_cache(encoded.memory, capacity=steps + MAX_CONTINUATION + 1)
    cache = model.decode(
        decoder_input, encoded.memory, src_mask, target_mask(decoder_input, config.pad_id), cache=cache, probe=probe
    ).cache
    real = decoder_input != config.pad_id
    real[:, 0] = True
    pieces = [[tokenizer.id_to_piece(i) for i in ids] for ids in result.topk_ids.tolist()]
    words = [
        [_word_of(piece, current_word(result.tgt_pieces[:step])) for piece in row] for step, row in enumerate(pieces)
    ]
    per_row = width * (steps + MAX_CONTINUATION + 1) * config.d_model * len(cache) * 2
    chunk = max(1, CACHE_BUDGET // per_row)  # steps continued together
    for first in range(0, steps, chunk):
        chosen = range(first, min(first + chunk, steps))
        # a candidate of the last step the model's max_len allows has no room to be taken, nor continued
        cells = [
            (step, rank)
            for step in chosen
            for rank in range(width)
            if words[step][rank] is not None and step + 1 < config.max_len
        ]
        _continue(model, tokenizer, encoded.memory, src_mask, cache, real, cells, result.topk_ids, words, probe)
    return [[None if word is None or len(word) == 1 else readable("".join(word)) for word in row] for row in words]


def _continue(
    model: Transformer,
    tokenizer: TokenizerBase,
    memory: torch.Tensor,
    src_mask: torch.Tensor,
    cache: list[LayerCache],
    real: torch.Tensor,
    cells: list[tuple[int, int]],
    topk_ids: torch.Tensor,
    words: list[list[list[str]]],
    probe: Probe | None,
) -> None:
    """Continues the candidates `cells` ((step, rank) each) greedily, together, appending to their `words` each
    piece that carries the word on; the candidate of step t sits at position t + 1 and sees keys 0..t only."""
    if not cells:
        return
    device, pad_id = memory.device, model.config.pad_id
    at = torch.tensor([step for step, _ in cells], device=device)
    keys = KeysSoFar(real.expand(len(cells), -1) & (torch.arange(real.size(1), device=device) <= at[:, None]))
    last = topk_ids.to(device)[at, torch.tensor([rank for _, rank in cells], device=device)]
    cache, positions = _rows_of(cache, len(cells)), at + 1
    # each key slot's position in its row (relative positions need them): the shared prefix's slots, then the row's own
    key_positions = torch.arange(cache[0].length, device=device).expand(len(cells), -1)
    for continued in range(MAX_CONTINUATION + 1):
        keys = keys.extended(last, pad_id)
        key_positions = torch.cat([key_positions, positions[:, None]], dim=1)
        decoded = model.decode(
            last[:, None],
            memory.expand(len(cells), -1, -1),
            src_mask,
            keys.mask(),
            cache=cache,
            probe=probe,
            positions=positions,
            key_positions=key_positions,
        )
        last = model.output_logits(decoded.hidden[:, -1]).argmax(dim=-1)  # the log-softmax keeps the order
        kept = []
        for place, ((step, rank), token, position) in enumerate(zip(cells, last.tolist(), positions.tolist())):
            piece = tokenizer.id_to_piece(token)
            if carries_word(piece):
                words[step][rank].append(CUT if continued == MAX_CONTINUATION else piece)
                if position + 1 < model.config.max_len:  # the model writes no further than its max_len
                    kept.append(place)
        if not kept or continued == MAX_CONTINUATION:
            return
        index = torch.tensor(kept, device=device)
        cells = [cells[place] for place in kept]
        cache = [layer.select(index) for layer in decoded.cache]
        keys, last, positions = keys.selected(index), last.index_select(0, index), positions.index_select(0, index) + 1
        key_positions = key_positions.index_select(0, index)
