"""A decode is budgeted by what it will hold, asked before it runs (issue 81, item 3): an upload of 60 encoder layers
of 16 heads, width 16, within every parameter budget, held 3.8 GB of encoder maps for a sentence of 1,000 words."""

from __future__ import annotations

import pytest
from fixtures.crafted import deep_upload
from helpers import start, translate

from transformer.decoding import greedy
from transformer.decoding.forcing import teacher_force
from transformer.decoding.strategies import DecodeSettings, DecodeTooLarge, check_decode, decode_numbers, decode_text


def test_what_a_decode_holds_is_its_maps_states_and_lens_counted_from_the_config():
    model, _ = deep_upload()
    config = model.config
    held = decode_numbers(config, 1000, 2010)
    assert held >= 60 * 16 * 1000**2 + 16 * (2010**2 + 2010 * 1000)  # the encoder's maps, the decoder's and cross
    assert decode_numbers(config, 1000, 2010, beams=4) > held  # each hypothesis' decoder maps


def test_a_decode_past_the_limit_is_refused_before_it_runs_saying_how_long_a_sentence_fits(monkeypatch):
    model, tokenizer = deep_upload()
    sentence = " ".join(["w1"] * 999)  # 1,000 pieces with its end
    monkeypatch.setattr(greedy, "generate", lambda *a, **k: pytest.fail("the decode ran"))
    with pytest.raises(DecodeTooLarge, match=r"would hold \d+\.\d GB .* shorten the sentence to at most (\d+) pieces"):
        decode_text(model, tokenizer, sentence, DecodeSettings(), limit_bytes=1 << 30)
    with pytest.raises(DecodeTooLarge) as refused:
        teacher_force(model, tokenizer, sentence, "w2 w3", limit_bytes=1 << 30)
    fits = int(str(refused.value).split("at most ")[1].split(" ")[0].replace(",", ""))
    check_decode(model, fits, 2, 1 << 30)  # that many fit, one more does not
    with pytest.raises(DecodeTooLarge):
        check_decode(model, fits + 1, 2, 1 << 30)


def test_a_decode_within_the_limit_runs_as_without_one():
    model, tokenizer = deep_upload()
    settings = DecodeSettings(max_new_tokens=3)
    limited = decode_text(model, tokenizer, "w1 w2 w3", settings, limit_bytes=1 << 30)
    assert limited.tgt_ids == decode_text(model, tokenizer, "w1 w2 w3", settings).tgt_ids


def test_the_sidebar_says_what_to_shorten_in_one_line(monkeypatch):
    import ui.services.models as models

    monkeypatch.setattr(models, "DECODE_LIMIT_BYTES", 2 << 20)  # 2 MB: the default model on a long sentence
    at = translate(start(), "A dog runs in the park with a red ball and a small black cat. " * 6)
    said = " ".join(w.value for w in at.warning)
    assert not at.exception and "Nothing to show: decoding this would hold" in said and "shorten the sentence" in said
