"""A tokenizer.json travels inside a checkpoint and runs on every sentence: only the pipeline steps and regexes of
the families read here are accepted, and the library's Rust panics become one-line refusals."""

from __future__ import annotations

import base64
import json

import pytest
from tokenizers import Tokenizer as Backend
from tokenizers.models import WordLevel

from transformer.text.json_tokenizer import JsonTokenizer
from transformer.text.tokenizer import TokenizerError

SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]


def tokenizer_json(**pipeline) -> str:
    """A word-level tokenizer.json with the special tokens every layout needs and the pipeline steps given."""
    backend = Backend(WordLevel({token: i for i, token in enumerate([*SPECIALS, "a", "b", "!"])}, unk_token="<unk>"))
    backend.add_special_tokens(SPECIALS)
    return json.dumps(json.loads(backend.to_str()) | pipeline)


def split_on(regex: str) -> dict:
    return {"type": "Split", "pattern": {"Regex": regex}, "behavior": "Isolated", "invert": False}


HOSTILE = {
    "backtracking split": {"pre_tokenizer": split_on("(?:a|a){1,22}!")},  # froze a server for 104 s on 2,000 "a"
    "past the retry limit": {"pre_tokenizer": split_on("(a*)*$")},  # a Rust panic, a BaseException
    "nested in a sequence": {"pre_tokenizer": {"type": "Sequence", "pretokenizers": [split_on("(a|aa)+$")]}},
    "regex in a normalizer": {"normalizer": {"type": "Replace", "pattern": {"Regex": "(x+x+)+y"}, "content": " "}},
    "regex in a decoder": {"decoder": {"type": "Replace", "pattern": {"Regex": "(x+x+)+y"}, "content": " "}},
    "a step no family uses": {"pre_tokenizer": {"type": "UnicodeScripts"}},
}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_pipeline_step_or_regex_no_family_uses_is_refused_before_it_runs(name):
    with pytest.raises(TokenizerError, match="not one of the families read here") as error:
        JsonTokenizer(tokenizer_json(**HOSTILE[name]))
    assert "\n" not in str(error.value)


def test_a_charsmap_the_library_cannot_parse_is_a_refusal_not_a_panic():
    """tokenizers panics (pyo3's PanicException, which `except Exception` misses) on a malformed charsmap."""
    charsmap = base64.b64encode(b"\xff" * 64).decode()
    with pytest.raises(TokenizerError, match="Cannot parse precompiled_charsmap") as error:
        JsonTokenizer(tokenizer_json(normalizer={"type": "Precompiled", "precompiled_charsmap": charsmap}))
    assert "\n" not in str(error.value)


def test_the_families_own_steps_and_regexes_still_load_and_fold_spaces():
    """What SentencePiece conversions write (mBART-50, NLLB-200, T5): a Replace of ' {2,}' and Metaspace."""
    text = tokenizer_json(
        normalizer={
            "type": "Sequence",
            "normalizers": [{"type": "Replace", "pattern": {"Regex": " {2,}"}, "content": " "}],
        },
        pre_tokenizer={"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}]},
        decoder={"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
    )
    tokenizer = JsonTokenizer(text)
    assert tokenizer.encode("a    b !") == [4, 5, 6]


def test_a_hostile_tokenizer_in_an_uploaded_checkpoint_is_refused_in_one_line(checkpoint_path):
    """The 12 KB upload that froze the whole server: refused when it is read, before any sentence is encoded."""
    from helpers import with_metadata

    from transformer.io.checkpoint import CheckpointError, load_checkpoint_bytes

    hostile = with_metadata(
        checkpoint_path.read_bytes(), tokenizer_json=tokenizer_json(**HOSTILE["backtracking split"])
    )
    with pytest.raises(CheckpointError, match=r"invalid tokenizer: .*regex '\(\?:a\|a\)\{1,22\}!'") as error:
        load_checkpoint_bytes(hostile)
    assert "\n" not in str(error.value)


def replace(pattern: str, content: str) -> dict:
    return {"type": "Replace", "pattern": {"String": pattern}, "content": content}


MULTIPLYING = {
    "a Replace of one letter by 100,000": {"normalizer": replace("a", "a" * 100_000)},  # aborted the process at 3.2 GB
    "a long Prepend": {"normalizer": {"type": "Prepend", "prepend": "b" * 5_000}},
    "steps that multiply together": {"normalizer": {"type": "Sequence", "normalizers": [replace("a", "aa" * 40)] * 2}},
    "a decoder that multiplies": {"decoder": replace("a", "a" * 5_000)},
}


@pytest.mark.parametrize("name", MULTIPLYING)
def test_a_pipeline_that_multiplies_the_text_is_refused_when_read(name):
    """Native code that runs out of memory aborts the process, so growth is bounded before the library runs."""
    with pytest.raises(TokenizerError, match="can make up to [0-9,]+ characters of one") as error:
        JsonTokenizer(tokenizer_json(**MULTIPLYING[name]))
    assert "\n" not in str(error.value)


def test_a_text_that_the_pipeline_could_grow_past_its_bound_is_refused_before_the_library_runs():
    tokenizer = JsonTokenizer(tokenizer_json(normalizer=replace("a", "a" * 1000)))
    assert tokenizer.encode("b") == [5]  # one word to the library, 1,000 "a" the unknown word
    assert tokenizer.encode("a" * 500) == [3]
    with pytest.raises(TokenizerError, match="could make up to 2,000,000 characters of a 2,000-character text"):
        tokenizer.encode("a" * 2000)
    with pytest.raises(TokenizerError, match="could make up to"):
        tokenizer.encode_many(["a"] * 3 + ["a" * 2000])


def test_the_app_is_told_why_a_sentence_is_refused_by_the_tokenizer():
    from transformer.decoding.result import DecodeInputError, source_ids

    tokenizer = JsonTokenizer(tokenizer_json(normalizer=replace("a", "a" * 1000)))
    with pytest.raises(DecodeInputError, match="a shorter text"):
        source_ids(tokenizer, "a" * 2000, max_len=64)


def test_many_texts_are_encoded_in_groups_within_the_bound_with_the_same_ids():
    tokenizer = JsonTokenizer(tokenizer_json(normalizer=replace("a", "a" * 1000)))
    texts = [("a b " * 99)[: 1 + i % 200] for i in range(400)]  # 400 texts: more than one group
    assert tokenizer.encode_many(texts) == [tokenizer.encode(text) for text in texts]


def test_an_empty_replace_pattern_is_refused():
    with pytest.raises(TokenizerError, match="empty or unreadable pattern"):
        JsonTokenizer(tokenizer_json(normalizer=replace("", "x")))


PANICKING_CHARSMAP = base64.b64encode(bytes.fromhex("080000004a58b791df6af1d8")).decode()  # loads, panics on any text


def test_a_charsmap_that_loads_but_panics_on_every_text_is_refused_when_read():
    with pytest.raises(TokenizerError, match="fails on ordinary text .*index out of bounds") as error:
        JsonTokenizer(tokenizer_json(normalizer={"type": "Precompiled", "precompiled_charsmap": PANICKING_CHARSMAP}))
    assert "\n" not in str(error.value)


def test_a_panic_in_any_later_call_of_the_library_is_a_tokenizer_error():
    """pyo3's PanicException is a BaseException: without the guard it escapes the page's `except Exception`."""
    hostile = Backend.from_str(
        tokenizer_json(normalizer={"type": "Precompiled", "precompiled_charsmap": PANICKING_CHARSMAP})
    )
    try:
        hostile.encode("a")
    except BaseException as error:
        panic = error
    tokenizer = JsonTokenizer(tokenizer_json())
    tokenizer.backend = hostile
    for call in (
        tokenizer.encode,
        tokenizer.encode_words,
        tokenizer.unknown_parts,
        lambda text: tokenizer.encode_many([text]),
    ):
        with pytest.raises(TokenizerError, match="the tokenizer failed: index out of bounds"):
            call("a b")
    assert not isinstance(panic, Exception)
