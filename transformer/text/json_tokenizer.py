"""Tokenization by a Hugging Face `tokenizer.json` (the `tokenizers` library), whose text travels in the checkpoint.

mBART-50's SentencePiece-derived unigram model with fairseq's ids, NLLB-200's BPE, BART's byte-level BPE and T5's
unigram model are all saved this way: one reader serves them, and `tokenizers` (the kept implementation of those pipelines, in
Rust; loading it runs no code from the file) does the splitting and joining.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable

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
KNOWN_REGEXES = frozenset({" {2,}"})


class JsonTokenizer(TokenizerBase):
    """Text <-> ids and pieces with a `tokenizer.json`: its pieces and special tokens, none of its templates (the
    source's `</s>` and a language pair's codes are added as FORMAT.md says, like every layout's)."""

    def __init__(self, json_text: str, source_prefix: str | None = None, target_prefix: str | None = None):
        check_pipeline(json_text)
        try:
            self.backend = Backend.from_str(json_text)
        except BaseException as error:  # plain Exception for a malformed file, a Rust panic for a bad charsmap
            if not isinstance(error, Exception) and type(error).__name__ != "PanicException":
                raise
            raise TokenizerError(f"not a tokenizer.json: {str(error).splitlines()[0][:200]}") from None
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

    def padded_to(self, size: int) -> JsonTokenizer:
        """This tokenizer with special tokens <unused0>, <unused1> ... up to `size` ids: a model whose embedding has
        rows no token uses (NLLB-200's 256,206 rows for 256,204 tokens) keeps one vocabulary size throughout."""
        backend = Backend.from_str(self.json_text)
        backend.add_special_tokens([AddedToken(f"<unused{i}>", special=True) for i in range(size - self.vocab_size)])
        return JsonTokenizer(backend.to_str(), self.source_prefix, self.target_prefix)

    def encode(self, text: str) -> list[int]:
        return self.backend.encode(_readable(text), add_special_tokens=False).ids

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        """encode() of each text, on every core at once."""
        encodings = self.backend.encode_batch([_readable(text) for text in texts], add_special_tokens=False)
        return [encoding.ids for encoding in encodings]

    def encode_words(self, text: str) -> tuple[list[int], list[range]]:
        """encode(text), and for each piece the whitespace-separated words of text it belongs to (word_ranges)."""
        text = _readable(text)
        encoding = self.backend.encode(text, add_special_tokens=False)
        return encoding.ids, word_ranges(text, encoding.offsets)

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ids, with special ids (padding, bos, eos, language codes) left out."""
        kept = [i for i in ids if i not in (self.pad_id, self.bos_id, self.eos_id) and i not in self.code_ids]
        return self.backend.decode(kept, skip_special_tokens=True)

    def unknown_parts(self, text: str) -> list[str]:
        """The distinct parts of text read as the unknown token (a byte-level BPE has none)."""
        text = _readable(text)
        encoding = self.backend.encode(text, add_special_tokens=False)
        parts = [text[begin:end].strip() for i, (begin, end) in zip(encoding.ids, encoding.offsets) if i == self.unk_id]
        return [part for part in dict.fromkeys(parts) if part]

    def identity(self) -> tuple:
        return self.json_text, self.source_prefix, self.target_prefix


def check_pipeline(json_text: str) -> None:
    """TokenizerError unless every step of the tokenizer's pipeline is one the families read here use, and every
    regex in it one of theirs (see KNOWN_STEPS)."""
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
                raise TokenizerError(f"the tokenizer's regex {str(regex)[:40]!r} is not one of the families read "
                                     "here (a pattern can take minutes on one sentence)")  # fmt: skip
            pending.extend(item.values())


def _readable(text: str) -> str:
    """A lone surrogate (an undecodable byte under surrogateescape) is no character: U+FFFD instead."""
    return LONE_SURROGATE.sub("\ufffd", text)
