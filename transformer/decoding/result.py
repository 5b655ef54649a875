"""The decode result: what every decoding strategy returns and every view reads; its source side."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from transformer.decoding.beam_tree import BeamTree
from transformer.decoding.lens import LogitLens
from transformer.model.encoder_decoder import Transformer
from transformer.model.kinds import AttentionKind
from transformer.text.tokenizer import TokenizerBase, TokenizerError

TOP_K = 10  # candidates kept per step for display


class DecodeInputError(ValueError):
    """A sentence the model cannot take (empty, nothing but whitespace)."""


@dataclass(frozen=True)
class DecodeResult:
    """Everything the app, the CLI and the statistics read about one decoded sentence.

    Row t of decoder_self and cross belongs to decoder input position t (bos, then the
    output so far), the query that produced output token t.
    """

    src_ids: list[int]
    src_pieces: list[str]
    tgt_ids: list[int]  # the output, ending in eos when the model produced it
    tgt_pieces: list[str]
    text: str
    topk_ids: torch.Tensor  # (T, k) the most probable next tokens at each step
    topk_probs: torch.Tensor  # (T, k)
    token_probs: torch.Tensor  # (T,) probability of the token taken at each step
    entropy_bits: torch.Tensor  # (T,) how spread each step's next-token distribution is
    lens: LogitLens  # what each decoder layer would have predicted at each step
    encoder_self: torch.Tensor  # (L_enc, H, S, S)
    decoder_self: torch.Tensor  # (L_dec, H, T, T), zero above the diagonal
    cross: torch.Tensor  # (L_dec, H, T, S)
    strategy: str
    start_piece: str  # the piece the decoder input starts with (bos, or the config's decoder_start_id)
    truncated: bool = False  # the source was cut to the model's max_len
    beam_tree: BeamTree | None = None  # beam search's whole search
    forced: int = 0  # the first tokens set, not chosen: a multilingual model's target language code

    @property
    def decoder_input_pieces(self) -> list[str]:
        return [self.start_piece, *self.tgt_pieces[:-1]]

    @property
    def steps(self) -> int:
        return len(self.tgt_ids)

    def maps(self, kind: AttentionKind | str) -> torch.Tensor:
        """The recorded maps of one kind, (L, H, queries, keys)."""
        kind = AttentionKind(kind)
        return {AttentionKind.ENCODER: self.encoder_self, AttentionKind.DECODER: self.decoder_self}.get(
            kind, self.cross
        )

    def query_pieces(self, kind: AttentionKind | str) -> list[str]:
        return self.src_pieces if AttentionKind(kind).queries_from_source else self.decoder_input_pieces

    def key_pieces(self, kind: AttentionKind | str) -> list[str]:
        return self.src_pieces if AttentionKind(kind).keys_from_source else self.decoder_input_pieces


def source_ids(tokenizer: TokenizerBase, text: str, max_len: int, side: str = "source") -> tuple[list[int], bool]:
    """Token ids of a sentence as the model reads it (the language code first and the end token last, for a model
    that has them: `source_ids_of`), cut to max_len with its end kept; and whether it was cut. side="target" for a
    translation the model is given, which always ends with eos."""
    if not text or not text.strip():
        raise DecodeInputError("the sentence is empty: type something to translate")
    try:
        pieces = tokenizer.encode(text)
    except TokenizerError as error:  # a text the tokenizer's pipeline would grow past its bound, or fails on
        raise DecodeInputError(str(error)) from None
    if side == "source":
        ids, end = tokenizer.source_ids_of(pieces), len(tokenizer.source_end_ids)
    else:
        ids, end = [*tokenizer.target_prefix_ids, *pieces, tokenizer.eos_id], 1
    if len(ids) > max_len:
        return ids[: max_len - end] + ids[len(ids) - end :], True
    return ids, False


def truncation_note(tokenizer: TokenizerBase, max_len: int) -> str:
    """What a reader is told when source_ids cut a sentence (the app and the command line say the same)."""
    ends = bool(tokenizer.source_end_ids)
    return (
        f"The sentence is longer than this model reads ({max_len} tokens{' with the end token' * ends}); "
        f"it was cut to its first {max_len - ends} tokens."
    )


def model_device(model: Transformer) -> torch.device:
    return next(model.parameters()).device


def padded(rows: Sequence[Sequence[int]], pad_id: int, device: torch.device | str = "cpu") -> torch.Tensor:
    """Token id rows of different lengths as one (B, longest) batch, padded at the end."""
    batch = torch.full((len(rows), max(map(len, rows))), pad_id, dtype=torch.long)
    for row, ids in enumerate(rows):
        batch[row, : len(ids)] = torch.tensor(ids, dtype=torch.long)
    return batch.to(device)


def pieces_of(tokenizer: TokenizerBase, ids: Sequence[int]) -> list[str]:
    return [tokenizer.id_to_piece(i) for i in ids]


def lower_triangle(rows: list[torch.Tensor]) -> torch.Tensor:
    """Per-step rows (L, H, t+1) -> (L, H, T, T), zero where the look-ahead mask hid a key."""
    steps = len(rows)
    full = rows[-1].new_zeros(*rows[-1].shape[:2], steps, steps)
    for t, row in enumerate(rows):
        full[:, :, t, : t + 1] = row
    return full


def assemble(
    tokenizer: TokenizerBase,
    start_id: int,  # the decoder's first input token (the config's start_id)
    src_ids: list[int],
    tgt_ids: list[int],
    step_log_probs: torch.Tensor,  # (T, V)
    lens: LogitLens,
    encoder_self: torch.Tensor,
    decoder_self: torch.Tensor,
    cross: torch.Tensor,
    strategy: str,
    truncated: bool,
    beam_tree: BeamTree | None = None,
) -> DecodeResult:
    probs = step_log_probs.float().exp().cpu()
    topk = probs.topk(min(TOP_K, probs.size(-1)), dim=-1)
    code = tokenizer.target_prefix_ids  # every output starts with it, whatever the model would give it
    chosen = torch.tensor(tgt_ids, dtype=torch.long)
    return DecodeResult(
        src_ids=list(src_ids),
        src_pieces=pieces_of(tokenizer, src_ids),
        tgt_ids=list(tgt_ids),
        tgt_pieces=pieces_of(tokenizer, tgt_ids),
        text=tokenizer.decode(tgt_ids),
        topk_ids=topk.indices,
        topk_probs=topk.values,
        token_probs=probs.gather(1, chosen[:, None]).squeeze(1),
        entropy_bits=torch.special.entr(probs).sum(dim=-1) / math.log(2),
        lens=lens,
        encoder_self=encoder_self.float().cpu(),
        decoder_self=decoder_self.float().cpu(),
        cross=cross.float().cpu(),
        strategy=strategy,
        truncated=truncated,
        start_piece=tokenizer.id_to_piece(start_id),
        beam_tree=beam_tree,
        forced=len(code) if code and list(tgt_ids[: len(code)]) == list(code) else 0,
    )
