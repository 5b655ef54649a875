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
        normalizer={"type": "Sequence", "normalizers": [{"type": "Replace", "pattern": {"Regex": " {2,}"},
                                                         "content": " "}]},
        pre_tokenizer={"type": "Sequence", "pretokenizers": [{"type": "WhitespaceSplit"}]},
        decoder={"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
    )  # fmt: skip
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
