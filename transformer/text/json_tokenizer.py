"""Tokenization by a Hugging Face `tokenizer.json` (the `tokenizers` library), whose text travels in the checkpoint.

mBART-50's SentencePiece-derived unigram model with fairseq's ids, NLLB-200's BPE, BART's byte-level BPE and T5's
unigram model are all saved this way: one reader serves them, and `tokenizers` (the kept implementation of those pipelines, in
Rust; loading it runs no code from the file) does the splitting and joining.
"""

from __future__ import annotations

import re
from collections.abc import Iterable

from tokenizers import AddedToken
from tokenizers import Tokenizer as Backend

from transformer.text.tokenizer import LONE_SURROGATE, TokenizerBase, TokenizerError, word_ranges

# A language code among the special tokens: mBART-50's fr_XX, NLLB-200's fra_Latn.
SPECIAL_LANGUAGE_CODE = re.compile(r"[a-z]{2,3}_[A-Z][A-Za-z]{1,3}")


class JsonTokenizer(TokenizerBase):
    """Text <-> ids and pieces with a `tokenizer.json`: its pieces and special tokens, none of its templates (the
    source's `</s>` and a language pair's codes are added as FORMAT.md says, like every layout's)."""

    def __init__(self, json_text: str, source_prefix: str | None = None, target_prefix: str | None = None):
        try:
            self.backend = Backend.from_str(json_text)
        except Exception as error:  # tokenizers raises plain Exception for any malformed file
            raise TokenizerError(f"not a tokenizer.json: {str(error)[:200]}") from None
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


def _readable(text: str) -> str:
    """A lone surrogate (an undecodable byte under surrogateescape) is no character: U+FFFD instead."""
    return LONE_SURROGATE.sub("\ufffd", text)
