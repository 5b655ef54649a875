"""SentencePiece tokenization whose model travels inside the checkpoint as bytes."""

from __future__ import annotations

import io
import re
from collections.abc import Iterable

import sentencepiece as spm

# The special pieces and their ids, fixed so that every checkpoint agrees with the config.
PAD_ID, UNK_ID, BOS_ID, EOS_ID = 0, 1, 2, 3


LONE_SURROGATE = re.compile("[\ud800-\udfff]")  # not characters: SentencePiece cannot take them


class TokenizerError(ValueError):
    """A tokenizer model that cannot be loaded or does not fit its checkpoint."""


class Tokenizer:
    """Text <-> ids and pieces with one SentencePiece model."""

    def __init__(self, model_proto: bytes) -> None:
        self.processor = spm.SentencePieceProcessor()
        try:
            self.processor.LoadFromSerializedProto(model_proto)
            self.pieces = [self.processor.IdToPiece(i) for i in range(self.processor.GetPieceSize())]
        except (RuntimeError, OSError, TypeError, UnicodeDecodeError) as error:  # a piece may hold bad bytes
            raise TokenizerError(f"not a SentencePiece model: {str(error)[:200]}") from None
        self.model_proto = bytes(model_proto)

    @property
    def vocab_size(self) -> int:
        return len(self.pieces)

    @property
    def bos_id(self) -> int:
        return self.processor.bos_id()

    @property
    def eos_id(self) -> int:
        return self.processor.eos_id()

    def encode(self, text: str) -> list[int]:
        """Ids of any str: a lone surrogate (an undecodable byte under surrogateescape) becomes U+FFFD first."""
        return self.processor.EncodeAsIds(LONE_SURROGATE.sub("\ufffd", text))

    def decode(self, ids: Iterable[int]) -> str:
        """Text of ids, with special ids (padding, bos, eos) left out."""
        specials = (self.processor.pad_id(), self.bos_id, self.eos_id)
        return self.processor.DecodeIds([i for i in ids if i not in specials])

    def id_to_piece(self, token_id: int) -> str:
        return self.pieces[token_id]

    def unknown_characters(self, text: str) -> list[str]:
        """The distinct characters of text that the vocabulary lacks (they become the unknown token)."""
        unk = self.processor.unk_id()
        return [c for c in dict.fromkeys(text) if not c.isspace() and unk in self.encode(c)]


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
        num_threads=2,
        minloglevel=2,
    )
    return Tokenizer(buffer.getvalue())
