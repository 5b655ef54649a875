"""SentencePiece tokenization whose model travels inside the checkpoint as bytes."""

from __future__ import annotations

import bisect
import copy
import io
import os
import re
from collections.abc import Iterable, Sequence
from typing import Self

import sentencepiece as spm

# The special pieces and their ids, fixed so that every checkpoint agrees with the config.
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # not characters: SentencePiece cannot take them
LANGUAGE_CODE = re.compile(r"__[a-z]{2,3}(_[A-Z][a-z]{3})?__")  # M2M100's __fr__, NLLB's __fra_Latn__


class TokenizerError(ValueError):
    """A tokenizer model that cannot be loaded or does not fit its checkpoint."""


class TokenizerBase:
    """What every tokenizer layout shares: the piece of each id, the special ids, a language pair's codes."""

    pieces: list[str]
    piece_ids: dict[str, int]
    pad_id: int
    unk_id: int
    bos_id: int
    eos_id: int
    source_eos = True  # whether a source ends with eos_id (every model's but eole's)

    def _special_ids_from_pieces(self) -> None:
        """pad, unk and eos are the ids of <pad>, <unk> and </s>; bos that of <s>, or pad's where there is none
        (Marian's and T5's decoders start from pad)."""
        self.piece_ids = {piece: i for i, piece in enumerate(self.pieces)}
        if len(self.piece_ids) != len(self.pieces):
            raise TokenizerError("the vocabulary repeats a piece")
        missing = [piece for piece in ("<pad>", "<unk>", "</s>") if piece not in self.piece_ids]
        if missing:
            raise TokenizerError(f"the vocabulary lacks {', '.join(missing)}")
        self.pad_id, self.unk_id, self.eos_id = (self.piece_ids[p] for p in ("<pad>", "<unk>", "</s>"))
        self.bos_id = self.piece_ids.get("<s>", self.pad_id)

    def _set_prefixes(self, source_prefix: str | None, target_prefix: str | None) -> None:
        """A language-pair model's codes (M2M100's, mBART-50's): the source's starts every source, the target's
        every output."""
        self.source_prefix, self.target_prefix = source_prefix, target_prefix
        unknown = [p for p in (source_prefix, target_prefix) if p is not None and p not in self.piece_ids]
        if unknown:
            raise TokenizerError(f"the language code {unknown[0][:40]!r} is not a piece of the vocabulary")
        self.source_prefix_ids = [] if source_prefix is None else [self.piece_ids[source_prefix]]
        self.target_prefix_ids = [] if target_prefix is None else [self.piece_ids[target_prefix]]

    def with_prefixes(self, source_prefix: str | None, target_prefix: str | None) -> Self:
        """This tokenizer for another language pair (the same pieces and model, other codes)."""
        other = copy.copy(self)
        other._set_prefixes(source_prefix, target_prefix)
        return other

    def without_source_eos(self) -> Self:
        """This tokenizer for a model trained on sources without the end token (eole's)."""
        other = copy.copy(self)
        other.source_eos = False
        return other

    @property
    def source_end_ids(self) -> list[int]:
        """What follows a source's pieces: the end token, where the model was trained with it."""
        return [self.eos_id] if self.source_eos else []

    def source_ids_of(self, piece_ids: Sequence[int]) -> list[int]:
        """A source's ids as the model reads them (FORMAT.md section 3): its language code, its pieces, its end."""
        return [*self.source_prefix_ids, *piece_ids, *self.source_end_ids]

    def source_word_ranges(self, words: Sequence[range]) -> list[range]:
        """The words of each id of source_ids_of (encode_words' ranges): none for the language code and the end."""
        return [*(range(0) for _ in self.source_prefix_ids), *words, *(range(0) for _ in self.source_end_ids)]

    @property
    def vocab_size(self) -> int:
        return len(self.pieces)

    def id_to_piece(self, token_id: int) -> str:
        return self.pieces[token_id]

    def encode(self, text: str) -> list[int]:
        """The ids of the pieces of any str (a source's end and a language pair's codes are added by source_ids_of)."""
        raise NotImplementedError

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        raise NotImplementedError

    def encode_words(self, text: str) -> tuple[list[int], list[range]]:
        """encode(text), and for each piece the whitespace-separated words of text it belongs to (word_ranges)."""
        raise NotImplementedError

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ids, with special ids (padding, bos, eos, language codes) left out."""
        raise NotImplementedError

    def unknown_parts(self, text: str) -> list[str]:
        """The distinct parts of text read as the unknown token."""
        raise NotImplementedError

    def identity(self) -> tuple:
        """Everything that decides the ids of a text."""
        raise NotImplementedError

    def same_as(self, other: TokenizerBase) -> bool:
        """Whether two tokenizers give the same ids for every text (so their models' outputs compare)."""
        return type(self) is type(other) and (self.identity(), self.source_eos) == (other.identity(), other.source_eos)


def word_ranges(text: str, spans: Iterable[tuple[int, int]]) -> list[range]:
    """For each piece's character span of text, the whitespace-separated words of text it belongs to.

    A piece belongs to the words its non-space characters lie in, a piece that is only spaces (a word-start mark)
    to the word after it.
    """
    starts = [m.start() for m in re.finditer(r"\S+", text)]
    words = []
    for begin, end in spans:
        seen = text[begin:end]
        core = seen.strip()
        first = begin + seen.index(core) if core else end
        last = first + len(core) - 1 if core else end
        words.append(range(max(0, bisect.bisect_right(starts, first) - 1), bisect.bisect_right(starts, last)))
    return words


class Tokenizer(TokenizerBase):
    """Text <-> ids and pieces with SentencePiece, in one of two layouts.

    Joint (this project's): one SentencePiece model, a piece's id its index in the model. With a
    vocabulary (Marian's): a source model splits the input and a target model joins the output, and
    ids index one shared list of pieces (a piece missing from it is the unknown token).
    """

    def __init__(
        self,
        model_proto: bytes,
        target_proto: bytes | None = None,
        vocabulary: list[str] | None = None,
        source_prefix: str | None = None,
        target_prefix: str | None = None,
    ):
        self.processor = _processor(model_proto)
        self.target_processor = self.processor if target_proto is None else _processor(target_proto)
        self.model_proto, self.target_proto = bytes(model_proto), None if target_proto is None else bytes(target_proto)
        self.vocabulary = vocabulary
        if vocabulary is None:
            try:
                self.pieces = [self.processor.IdToPiece(i) for i in range(self.processor.GetPieceSize())]
            except UnicodeDecodeError as error:  # a piece may hold bad bytes
                raise TokenizerError(f"not a SentencePiece model: {str(error)[:200]}") from None
            self.pad_id, self.unk_id = self.processor.pad_id(), self.processor.unk_id()
            self.bos_id, self.eos_id = self.processor.bos_id(), self.processor.eos_id()
            self.piece_ids = {}
        else:
            self.pieces = list(vocabulary)
            self._special_ids_from_pieces()
        self._set_prefixes(source_prefix, target_prefix)
        # Language codes are tokens, not text: decode() leaves them out (a code of M2M100's is __fr__).
        self.code_ids = frozenset(i for i, piece in enumerate(self.pieces) if LANGUAGE_CODE.fullmatch(piece))

    def encode(self, text: str) -> list[int]:
        """Ids of any str: a lone surrogate (an undecodable byte under surrogateescape) becomes U+FFFD first."""
        code, text = self._split_code(text)
        if self.vocabulary is None:
            return self.processor.EncodeAsIds(text)
        prefix = [] if code is None else [self.piece_ids.get(code, self.unk_id)]
        return prefix + [self.piece_ids.get(p, self.unk_id) for p in self.processor.EncodeAsPieces(text)]

    def encode_words(self, text: str) -> tuple[list[int], list[range]]:
        """encode(text), and for each piece the whitespace-separated words of text it belongs to (an empty range for a
        language code): how the pieces of a sentence meet words that someone else tokenized, e.g. gold alignments.

        SentencePiece gives each piece the byte span of the text it came from, read here as a span of characters
        (word_ranges says how a span meets words). A piece is one word or part of one, except the unknown piece that stands for several unknown words in a row ("<unk>" for
        "ten ten" in a vocabulary of digits' names); every word has at least one piece.
        """
        code, rest = self._split_code(text)
        data = rest.encode()
        char_at = [i for i, character in enumerate(rest) for _ in character.encode()] + [len(rest)]  # byte -> char
        proto = self.processor.EncodeAsProto(rest).pieces
        ids = [] if code is None else [self.piece_ids.get(code, self.unk_id)]
        ids += [
            piece.id if self.vocabulary is None else self.piece_ids.get(piece.piece, self.unk_id) for piece in proto
        ]
        words = word_ranges(rest, [(char_at[min(p.begin, len(data))], char_at[min(p.end, len(data))]) for p in proto])
        return ids, ([] if code is None else [range(0)]) + words

    def encode_many(self, texts: list[str]) -> list[list[int]]:
        """encode() of each text; a joint model encodes them on every core at once (a million lines in seconds)."""
        if self.vocabulary is not None or any(LONE_SURROGATE.search(text) for text in texts):
            return [self.encode(text) for text in texts]
        return self.processor.Encode(texts, out_type=int, num_threads=os.cpu_count() or 1)

    def _split_code(self, text: str) -> tuple[str | None, str]:
        """The text as SentencePiece reads it: surrogates replaced, and in the vocabulary layout a leading
        target-language code (a multilingual Marian model's ">>fra<<") split off as a piece of its own."""
        text = LONE_SURROGATE.sub("\ufffd", text)
        if self.vocabulary is None or not (text.startswith(">>") and "<<" in text):
            return None, text
        end = text.index("<<") + 2
        return text[:end], text[end:]

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ids, with special ids (padding, bos, eos) left out."""
        kept = [i for i in ids if i not in (self.pad_id, self.bos_id, self.eos_id) and i not in self.code_ids]
        if self.vocabulary is None:
            return self.processor.DecodeIds(kept)
        # A piece the target model lacks (one only the source model splits into) comes back from DecodePieces as it
        # is, word-start mark included: MarianTokenizer.decode turns every mark left into a space, and so do we.
        return self.target_processor.DecodePieces([self.pieces[i] for i in kept]).replace("\u2581", " ").strip()

    def unknown_parts(self, text: str) -> list[str]:
        """The distinct parts of text read as the unknown token, as the whole text is split.

        Letters alone may be unknown to a vocabulary of words that knows every word they spell: only
        what the text's own pieces miss is reported (a character, or a whole word in a word vocabulary).
        """
        _, text = self._split_code(text)
        parts = [
            piece.surface.strip()
            for piece in self.processor.EncodeAsProto(text).pieces
            if (piece.id == self.processor.unk_id() if self.vocabulary is None else piece.piece not in self.piece_ids)
        ]
        return [part for part in dict.fromkeys(parts) if part]

    def identity(self) -> tuple:
        return self.model_proto, self.target_proto, self.vocabulary, self.source_prefix, self.target_prefix


def _processor(model_proto: bytes) -> spm.SentencePieceProcessor:
    processor = spm.SentencePieceProcessor()
    try:
        processor.LoadFromSerializedProto(model_proto)
    except (RuntimeError, OSError, TypeError) as error:
        raise TokenizerError(f"not a SentencePiece model: {str(error)[:200]}") from None
    return processor


def train_tokenizer(
    sentences: Iterable[str],
    vocab_size: int,
    model_type: str = "unigram",
    user_defined_symbols: list[str] | None = None,
) -> Tokenizer:
    """Trains a joint vocabulary on the given sentences, in memory."""
    buffer = io.BytesIO()
    spm.SentencePieceTrainer.Train(
        sentence_iterator=iter(sentences),
        model_writer=buffer,
        vocab_size=vocab_size,
        model_type=model_type,
        character_coverage=1.0,
        pad_id=PAD_ID,
        unk_id=UNK_ID,
        bos_id=BOS_ID,
        eos_id=EOS_ID,
        pad_piece="<pad>",
        unk_piece="<unk>",
        bos_piece="<s>",
        eos_piece="</s>",
        user_defined_symbols=user_defined_symbols or [],
        hard_vocab_limit=False,
        num_threads=os.cpu_count() or 1,
        minloglevel=2,
    )
    return Tokenizer(buffer.getvalue())
