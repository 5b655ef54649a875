"""The word each step's candidates would make: continued together from one cache, equal to decoding each alone."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from helpers import tiny_config

from transformer.decoding.beam import beam_search
from transformer.decoding.candidate_words import (
    CUT,
    MAX_CONTINUATION,
    candidate_words,
    carries_word,
    current_word,
    worked_out_at_open,
)
from transformer.decoding.greedy import decode_ids, decode_with_chooser
from transformer.decoding.result import DecodeResult
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint
from transformer.model.embeddings import PositionalEncoding
from transformer.model.encoder_decoder import Transformer
from transformer.text.pieces import WORD_START, readable


def word_alone(model, tokenizer, result: DecodeResult, step: int, token: int) -> str | None:
    """The word candidate `token` of `step` makes, by decoding greedily from it on its own (the plain path)."""
    piece = tokenizer.id_to_piece(token)
    if not (carries_word(piece) or piece.startswith(WORD_START)):
        return None
    prefix = [*result.tgt_ids[:step], token]
    limit = len(prefix) + MAX_CONTINUATION + 1
    alone = decode_ids(model, tokenizer, result.src_ids, prefix=prefix, max_new_tokens=limit)
    word = [*current_word(result.tgt_pieces[:step]), piece] if carries_word(piece) else [piece]
    for count, next_piece in enumerate(alone.tgt_pieces[len(prefix) :]):
        if not carries_word(next_piece):
            break
        if count == MAX_CONTINUATION:
            word.append(CUT)
            break
        word.append(next_piece)
    return None if len(word) == 1 else readable("".join(word))


def assert_words_alone(model, tokenizer, result: DecodeResult) -> int:
    """Every candidate's word equals its own decode; returns how many candidates make a longer word."""
    words = candidate_words(model, tokenizer, result)
    assert len(words) == result.steps
    longer = 0
    for step, ids in enumerate(result.topk_ids.tolist()):
        expected = [word_alone(model, tokenizer, result, step, token) for token in ids]
        assert words[step] == expected, f"step {step}"
        longer += sum(word is not None for word in expected)
    return longer


def test_the_shipped_models_candidates_make_the_words_decoding_each_alone_makes():
    shipped = load_checkpoint(DEFAULT_CHECKPOINT)
    result = decode_with_chooser(
        shipped.model, shipped.tokenizer, "Two young, White males are outside near many bushes."
    )
    assert assert_words_alone(shipped.model, shipped.tokenizer, result) > 0  # some pieces do grow into words


T5_LIKE = dict(
    norm_first=True,
    positional="relative",
    norm="rms",
    bias=False,
    attention_scale=False,
    feed_forward="gated",
    activation="gelu_tanh",
    scale_output=True,
    relative_buckets=8,
    relative_max_distance=20,
)


@pytest.mark.parametrize(
    "options",
    [{}, {"norm_first": True, "positional": "learned"}, T5_LIKE],
    ids=["post-norm", "learned", "relative"],  # relative: each row's keys at their own positions
)
def test_a_random_models_candidates_for_greedy_and_beam_results(tokenizer, options):
    torch.manual_seed(3)
    model = Transformer(tiny_config(tokenizer, **options)).eval()
    if options.get("positional") == "learned":
        torch.nn.init.normal_(model.tgt_position.table, std=0.5)  # learned positions that matter
    if options.get("positional") == "relative":
        torch.nn.init.normal_(model.tgt_position.relative_bias, std=2.0)
    text = "the cat sat on the mat"
    for result in (
        decode_with_chooser(model, tokenizer, text, max_new_tokens=12),
        beam_search(model, tokenizer, text, width=3, max_new_tokens=12),
    ):
        assert assert_words_alone(model, tokenizer, result) > 0


def test_an_output_as_long_as_the_model_allows_continues_no_candidate_past_it(tokenizer):
    torch.manual_seed(3)
    model = Transformer(tiny_config(tokenizer, max_len=9)).eval()
    result = decode_with_chooser(model, tokenizer, "the cat")
    assert result.steps == model.config.max_len  # ran to the end without </s>
    assert_words_alone(model, tokenizer, result)


def test_a_word_that_goes_on_is_cut_with_a_mark(tokenizer):
    torch.manual_seed(3)
    model = Transformer(tiny_config(tokenizer)).eval()
    result = decode_with_chooser(model, tokenizer, "the cat sat on the mat", max_new_tokens=12)
    words = [word for row in candidate_words(model, tokenizer, result) for word in row if word]
    assert any(word.endswith(CUT) for word in words)  # an untrained model rarely starts a new word


def test_the_current_word_is_the_outputs_last_word_and_punctuation_ends_one():
    assert current_word(["▁le", "▁ch", "at", "e"]) == ["▁ch", "at", "e"]
    assert current_word(["▁le", "▁"]) == ["▁"]
    assert current_word(["at"]) == ["at"]
    assert current_word(["</s>", "at"]) == ["at"]  # a special token is no part of a word
    assert current_word(["▁l", "'", "eau"]) == ["▁l", "'", "eau"]  # joined by an apostrophe
    assert current_word(["▁parc", "."]) == []  # SentencePiece glues the full stop on; it is no letter of the word
    assert current_word([]) == []
    assert [carries_word(piece) for piece in ("at", "▁at", "'", "-", ".", "</s>", "2")] == [
        True,
        False,
        True,
        True,
        False,
        False,
        True,
    ]


def test_rows_at_their_own_positions_equal_each_row_at_an_offset(config):
    encoding = PositionalEncoding(config).eval()
    x = torch.randn(3, 4, config.d_model)
    offsets = torch.tensor([0, 5, 2])
    together = encoding(x, offsets)
    for row, offset in enumerate(offsets.tolist()):
        assert torch.equal(together[row], encoding(x[row : row + 1], offset)[0])


@pytest.mark.parametrize(
    ("d_model", "vocabulary", "at_open"),
    [(256, 8000, True), (512, 59_514, True), (1024, 128_112, False), (1024, 256_206, False)],
    ids=["default", "opus-mt", "M2M100-418M", "NLLB-600M"],
)
def test_a_large_vocabularys_candidate_words_wait_to_be_asked(tokenizer, d_model, vocabulary, at_open):
    """At NLLB-600M's size the candidates' words took 13.2 s on 2 cores against the decode's 4.6."""
    config = dataclasses.replace(
        tiny_config(tokenizer), d_model=d_model, src_vocab_size=vocabulary, tgt_vocab_size=vocabulary
    )
    assert worked_out_at_open(config) is at_open
