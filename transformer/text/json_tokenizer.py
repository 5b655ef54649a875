"""Tokenization by a Hugging Face `tokenizer.json` (the `tokenizers` library), whose text travels in the checkpoint.

mBART-50's SentencePiece-derived unigram model with fairseq's ids, BART's byte-level BPE and T5's unigram model are
all saved this way: one reader serves them, and `tokenizers` (the kept implementation of those pipelines, in
Rust; loading it runs no code from the file) does the splitting and joining.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer as Backend

from transformer.text.tokenizer import LONE_SURROGATE, TokenizerBase, TokenizerError, word_ranges

SPECIAL_PIECES = frozenset({"<s>", "<pad>", "</s>", "<unk>", "<mask>"})


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
        # Special tokens other than the five (mBART-50's en_XX, NLLB's fra_Latn) are language codes, not text.
        added = self.backend.get_added_tokens_decoder()
        self.code_ids = frozenset(
            i for i, token in added.items() if token.special and token.content not in SPECIAL_PIECES
        )

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
