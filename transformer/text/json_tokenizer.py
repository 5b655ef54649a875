"""Tokenization by a Hugging Face `tokenizer.json` (the `tokenizers` library), whose text travels in the checkpoint.

mBART-50's SentencePiece-derived unigram model with fairseq's ids, NLLB-200's BPE, BART's byte-level BPE and T5's
unigram model are all saved this way: one reader serves them, and `tokenizers` (the kept implementation of those pipelines, in
Rust; loading it runs no code from the file) does the splitting and joining.
"""

from __future__ import annotations

import base64
import binascii
import json
import math
import re
import struct
from collections.abc import Callable, Iterable

from tokenizers import AddedToken
from tokenizers import Tokenizer as Backend

from transformer.text.tokenizer import LONE_SURROGATE, TokenizerBase, TokenizerError, word_ranges

# A language code among the special tokens: mBART-50's fr_XX, NLLB-200's fra_Latn.
SPECIAL_LANGUAGE_CODE = re.compile(r"[a-z]{2,3}_[A-Z][A-Za-z]{1,3}")
# A tokenizer.json is a program: its normalizer, pre-tokenizer, post-processor and decoder run on every text, and
# `tokenizers` runs them holding the GIL. A backtracking regex there froze a whole server for minutes on one
# sentence, so only the steps of the families read here are accepted, and of regexes only theirs (SentencePiece
# conversions fold runs of spaces); literal String patterns and ByteLevel's built-in split run in linear time.
PIPELINE_PARTS = ("normalizer", "pre_tokenizer", "post_processor", "decoder")
KNOWN_STEPS = frozenset({
    "Sequence", "Precompiled", "Replace", "NFC", "NFD", "NFKC", "NFKD", "Lowercase", "Strip", "StripAccents", "Prepend",
    "Metaspace", "ByteLevel", "Whitespace", "WhitespaceSplit", "Punctuation", "Digits", "Split", "ByteFallback", "Fuse",
    "BPEDecoder", "WordPiece", "TemplateProcessing", "RobertaProcessing", "BertProcessing",
})  # fmt: skip
KNOWN_REGEXES = {" {2,}": 2}  # each known regex and its shortest match
# A step may multiply the text, and a step past memory aborts the process, which no `except` catches (measured:
# docs/performance.md), so how much each step can make of one character is bounded before the
# library runs. The families' own pipelines stay under 100 (an NFKC charsmap's longest replacement is 33 bytes,
# Metaspace at most doubles); a pipeline that can make more of one character than MAX_GROWTH is refused at load.
MAX_GROWTH = 1024
# What one encode or decode may make of its text inside the library, in characters (each one carries up to 4
# bytes and their alignments there): a few tens of MB at most.
MAX_PIPELINE_CHARACTERS = 1_000_000
# Unicode's stated bound on what one character becomes under each normalization form (UAX #15), and the other
# steps that can lengthen a text: Lowercase (a character to at most 3), ByteLevel (a byte to a character),
# Metaspace (a space to a mark, and one mark before each word), BPEDecoder (its suffix to a space).
CHARACTER_GROWTH = {
    "NFC": 3,
    "NFD": 4,
    "NFKC": 18,
    "NFKD": 18,
    "Lowercase": 3,
    "ByteLevel": 4,
    "Metaspace": 2,
    "BPEDecoder": 2,
}
# Ordinary text of many scripts, encoded once when a tokenizer is read: a pipeline that fails on it (a charsmap
# that loads but panics on every text) is refused then, not on a visitor's sentence.
PROBE_TEXT = "Hello, world! Ça va ? 1,234.5 ½ Ｆｕｌｌ ﬁ Straße 日本語 Привет مرحبا e\u0301 🙂"


class JsonTokenizer(TokenizerBase):
    """Text <-> ids and pieces with a `tokenizer.json`: its pieces and special tokens, none of its templates (the
    source's `</s>` and a language pair's codes are added as FORMAT.md says, like every layout's)."""

    def __init__(self, json_text: str, source_prefix: str | None = None, target_prefix: str | None = None):
        self.encode_growth, self.decode_growth = check_pipeline(json_text)
        try:
            self.backend = Backend.from_str(json_text)
        except Exception as error:
            raise TokenizerError(f"not a tokenizer.json: {_first_line(error)}") from None
        except BaseException as error:  # a Rust panic (a bad charsmap) is no Exception
            _raise_if_panic(error, "not a tokenizer.json")
            raise
        self.json_text = json_text
        index = self.backend.get_vocab(with_added_tokens=True)
        if sorted(index.values()) != list(range(len(index))):
            raise TokenizerError("the tokenizer's ids are not 0 to n-1, each once")
        self.pieces = sorted(index, key=index.__getitem__)
        self._special_ids_from_pieces()
        self._set_prefixes(source_prefix, target_prefix)
        added = self.backend.get_added_tokens_decoder()
        self.code_ids = frozenset(
            i for i, token in added.items() if token.special and SPECIAL_LANGUAGE_CODE.fullmatch(token.content)
        )
        try:
            self.decode(self.encode(PROBE_TEXT))
        except TokenizerError as error:
            raise TokenizerError(f"the tokenizer fails on ordinary text ({error})") from None

    def padded_to(self, size: int) -> JsonTokenizer:
        """This tokenizer with special tokens <unused0>, <unused1> ... up to `size` ids: a model whose embedding has
        rows no token uses (NLLB-200's 256,206 rows for 256,204 tokens) keeps one vocabulary size throughout."""
        backend = Backend.from_str(self.json_text)
        backend.add_special_tokens([AddedToken(f"<unused{i}>", special=True) for i in range(size - self.vocab_size)])
        return JsonTokenizer(backend.to_str(), self.source_prefix, self.target_prefix)

    def encode(self, text: str) -> list[int]:
        return self._encoding(_readable(text)).ids

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        """encode() of each text, on every core at once, in groups that each stay within the pipeline's bound."""
        ids: list[list[int]] = []
        group: list[str] = []
        group_bound = 0.0
        for text in map(_readable, texts):
            bound = self._encoded_bound(text)
            if group_bound + bound > MAX_PIPELINE_CHARACTERS:
                ids += self._encode_batch(group)
                group, group_bound = [], 0.0
            group.append(text)
            group_bound += bound
        return ids + self._encode_batch(group)

    def encode_words(self, text: str) -> tuple[list[int], list[range]]:
        """encode(text), and for each piece the whitespace-separated words of text it belongs to (word_ranges)."""
        text = _readable(text)
        encoding = self._encoding(text)
        return encoding.ids, word_ranges(text, encoding.offsets)

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ids, with special ids (padding, bos, eos, language codes) left out."""
        kept = [i for i in ids if i not in (self.pad_id, self.bos_id, self.eos_id) and i not in self.code_ids]
        bound = sum(len(self.pieces[i]) for i in kept if 0 <= i < len(self.pieces)) * self.decode_growth
        if bound > MAX_PIPELINE_CHARACTERS:
            raise TokenizerError(
                f"this tokenizer could make up to {bound:,.0f} characters of these {len(kept):,} tokens, over its "
                f"limit of {MAX_PIPELINE_CHARACTERS:,}"
            )
        return _library(self.backend.decode, kept, skip_special_tokens=True)

    def unknown_parts(self, text: str) -> list[str]:
        """The distinct parts of text read as the unknown token (a byte-level BPE has none)."""
        text = _readable(text)
        encoding = self._encoding(text)
        parts = [text[begin:end].strip() for i, (begin, end) in zip(encoding.ids, encoding.offsets) if i == self.unk_id]
        return [part for part in dict.fromkeys(parts) if part]

    def identity(self) -> tuple:
        return self.json_text, self.source_prefix, self.target_prefix

    def _encoded_bound(self, text: str) -> float:
        """The most characters the pipeline can make of text; TokenizerError past MAX_PIPELINE_CHARACTERS."""
        bound = len(text) * self.encode_growth
        if bound > MAX_PIPELINE_CHARACTERS:
            raise TokenizerError(
                f"this tokenizer could make up to {bound:,.0f} characters of a {len(text):,}-character text, over "
                f"its limit of {MAX_PIPELINE_CHARACTERS:,}: a shorter text"
            )
        return bound

    def _encoding(self, text: str):
        """The library's encoding of a text already made readable (_readable), once its bound is checked."""
        self._encoded_bound(text)
        return _library(self.backend.encode, text, add_special_tokens=False)

    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        if not texts:
            return []
        return [encoding.ids for encoding in _library(self.backend.encode_batch, texts, add_special_tokens=False)]


def check_pipeline(json_text: str) -> tuple[float, float]:
    """How many characters the pipeline can make of one character when encoding and when decoding; TokenizerError
    unless every step is one the families read here use (KNOWN_STEPS), every regex one of theirs, and neither
    growth past MAX_GROWTH."""
    try:
        document = json.loads(json_text)
    except (ValueError, RecursionError):
        raise TokenizerError("not a tokenizer.json: not JSON") from None
    if not isinstance(document, dict):
        raise TokenizerError("not a tokenizer.json: not a JSON object")
    pending = [document.get(part) for part in PIPELINE_PARTS]
    while pending:
        item = pending.pop()
        if isinstance(item, list):
            pending.extend(item)
        elif isinstance(item, dict):
            step = item.get("type")
            if step is not None and step not in KNOWN_STEPS:
                raise TokenizerError(f"the tokenizer's step {str(step)[:40]!r} is not one of the families read here")
            regex = item.get("Regex")
            if regex is not None and regex not in KNOWN_REGEXES:
                raise TokenizerError(
                    f"the tokenizer's regex {str(regex)[:40]!r} is not one of the families read here "
                    "(a pattern can take minutes on one sentence)"
                )
            pending.extend(item.values())
    encode_growth = growth(document.get("normalizer")) * growth(document.get("pre_tokenizer"))
    decode_growth = growth(document.get("decoder"))
    if max(encode_growth, decode_growth) > MAX_GROWTH:
        raise TokenizerError(
            f"the tokenizer's pipeline can make up to {max(encode_growth, decode_growth):,.0f} characters of one "
            f"(the families read here: under 100; the limit {MAX_GROWTH:,})"
        )
    return encode_growth, decode_growth


def growth(step: object) -> float:
    """The most characters a pipeline step (a Sequence: its steps one after the other) can make of one character."""
    if isinstance(step, list):
        return math.prod(map(growth, step))
    if not isinstance(step, dict):
        return 1.0
    kind = step.get("type")
    if kind == "Sequence":
        return math.prod(growth(value) for value in step.values() if isinstance(value, list))
    if kind == "Replace":
        return max(1.0, _length(step.get("content")) / _shortest_match(step.get("pattern")))
    if kind == "Prepend":  # once before every stretch of text, and a stretch (between special tokens) can be 1 long
        return 1.0 + _length(step.get("prepend"))
    if kind == "Precompiled":
        return float(max(1, _longest_replacement(step.get("precompiled_charsmap"))))
    return float(CHARACTER_GROWTH.get(kind, 1))


def _shortest_match(pattern: object) -> int:
    """The fewest characters a Replace's pattern matches (a literal's length, or a known regex's shortest match)."""
    if isinstance(pattern, dict) and isinstance(pattern.get("String"), str) and pattern["String"]:
        return len(pattern["String"])
    if isinstance(pattern, dict) and pattern.get("Regex") in KNOWN_REGEXES:
        return KNOWN_REGEXES[pattern["Regex"]]
    raise TokenizerError("the tokenizer replaces an empty or unreadable pattern (it would insert text everywhere)")


def _longest_replacement(charsmap: object) -> int:
    """The longest text (in bytes, so at least its characters) a SentencePiece charsmap puts for a character: the
    map is a 4-byte trie size, the trie, then its replacements, each ending in a NUL."""
    try:
        blob = base64.b64decode(str(charsmap), validate=True)
    except (binascii.Error, ValueError):
        raise TokenizerError("the tokenizer's charsmap is not base64") from None
    if len(blob) < 4 or struct.unpack("<I", blob[:4])[0] > len(blob) - 4:
        return len(blob)
    replacements = blob[4 + struct.unpack("<I", blob[:4])[0] :]
    return max(map(len, replacements.split(b"\0")))


def _length(text: object) -> int:
    return len(text) if isinstance(text, str) else 0


def _library(call: Callable, *args, **kwargs):
    """The library's call; a Rust panic there (a BaseException, which `except Exception` misses) as TokenizerError."""
    try:
        return call(*args, **kwargs)
    except BaseException as error:
        _raise_if_panic(error, "the tokenizer failed")
        raise


def _raise_if_panic(error: BaseException, what: str) -> None:
    if type(error).__name__ == "PanicException":
        raise TokenizerError(f"{what}: {_first_line(error)}") from None


def _first_line(error: BaseException) -> str:
    return (str(error).splitlines() or [""])[0][:200]


def _readable(text: str) -> str:
    """A lone surrogate (an undecodable byte under surrogateescape) is no character: U+FFFD instead."""
    return LONE_SURROGATE.sub("\ufffd", text)
