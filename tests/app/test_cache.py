"""The shared result cache: bounded by the bytes its results hold and by their age, shared across threads."""

from __future__ import annotations

import contextlib
import threading
import time

from helpers import REPO, make_sentences, start, translate

from transformer.decoding.strategies import DecodeSettings, decode_text
from transformer.io.checkpoint import Checkpoint, load_checkpoint
from ui.services.cache import RESULTS, ResultCache, nbytes
from ui.state.identity import ResultIdentity


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _decoder(cache: ResultCache):
    @cache
    def decode_cached(_checkpoint: Checkpoint, key: str, text: str, settings: DecodeSettings):
        return decode_text(_checkpoint.model, _checkpoint.tokenizer, text, settings)

    return decode_cached


def test_long_sentences_are_held_within_the_byte_budget_and_expire():
    checkpoint = load_checkpoint(REPO / "checkpoints" / "en-fr-captions.safetensors")
    words = " ".join(make_sentences(8)).split()
    sentences = [" ".join(words[i:] + words[:i]) for i in range(10)]  # the same 40-odd words, rotated
    one = nbytes(decode_text(checkpoint.model, checkpoint.tokenizer, sentences[0], DecodeSettings()))
    assert one > 500_000  # a long sentence's maps are large: what made entry counts a poor bound
    clock = Clock()
    cache = ResultCache(max_bytes=3 * one, seconds=600, timer=clock)
    decode_cached = _decoder(cache)
    results = [decode_cached(checkpoint, "en-fr-captions", sentence, DecodeSettings()) for sentence in sentences]
    assert 0 < cache.held_bytes <= 3 * one and len(cache.entries) < len(sentences)
    assert decode_cached(checkpoint, "en-fr-captions", sentences[-1], DecodeSettings()) is results[-1]  # still shared
    clock.now = 601
    assert cache.held_bytes == 0 and len(cache.entries) == 0  # nothing outlives its time


def test_one_result_is_computed_once_however_many_ask_at_once():
    calls = []
    cache = ResultCache(max_bytes=2**30, seconds=600)

    @cache
    def slow(_checkpoint, key: str, text: str) -> str:
        calls.append(text)
        time.sleep(0.2)
        return text.upper()

    answers = []
    threads = [threading.Thread(target=lambda: answers.append(slow(None, "k", "same"))) for _ in range(6)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert answers == ["SAME"] * 6 and calls == ["same"]


def test_the_apps_model_calls_go_through_the_bounded_cache():
    before = RESULTS.held_bytes
    at = translate(start(), "A brand new sentence about seven purple elephants.")
    assert not at.exception
    assert RESULTS.held_bytes > before and RESULTS.entries.maxsize == 512 * 2**20 and RESULTS.entries.ttl == 3600


def test_a_result_has_one_identity_for_every_cache_and_player_and_it_names_its_checkpoint():
    checkpoint = load_checkpoint(REPO / "checkpoints" / "en-fr-captions.safetensors")
    decoded = decode_text(checkpoint.model, checkpoint.tokenizer, "A dog runs.", DecodeSettings())
    again = decode_text(checkpoint.model, checkpoint.tokenizer, "A dog runs.", DecodeSettings())
    beam = decode_text(
        checkpoint.model, checkpoint.tokenizer, "A dog runs.", DecodeSettings(strategy="beam", beam_width=3)
    )
    same, twin = ResultIdentity.of("upload:x", decoded), ResultIdentity.of("upload:x", again)
    assert same == twin and hash(same) == hash(twin) and same.token == twin.token and len(same.token) == 16
    assert ResultIdentity.of("en-fr-captions", decoded).token != same.token  # another checkpoint, another result
    assert ResultIdentity.of("upload:x", beam).token != same.token  # decoded another way
    guarded = []
    cache = ResultCache(max_bytes=2**30, seconds=600)
    cache.guard = lambda key: guarded.append(key) or contextlib.nullcontext()

    @cache
    def steps(_checkpoint, identity: ResultIdentity, *, _result) -> int:
        return _result.steps

    assert steps(checkpoint, same, _result=decoded) == steps(checkpoint, twin, _result=again) == decoded.steps
    assert guarded == ["upload:x"]  # computed once, in the uploaded checkpoint's guard
