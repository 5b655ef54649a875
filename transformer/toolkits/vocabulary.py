"""One vocabulary for a toolkit's two (a source's and a target's), as this project's model holds it: the target's
pieces at their own ids (so output ids are the toolkit's), then those only the source has, then any the reader adds
(Marian's zero start row); each embedding laid out over it."""

from __future__ import annotations

import torch

# A piece the decoder must never write (one only the source knows, a row the reader added), in the output layer of a
# joint vocabulary: a score no softmax gives weight to (exp(-10^4) is 0 in float32), finite so that entropies and sums
# stay numbers.
NEVER_WRITTEN = -1e4
PAD = "<pad>"


def zero_start_piece(pieces: list[str]) -> str:
    """The name of the row of zeros a decoder starts from (Marian's), added to a vocabulary: `<pad>`, which pads
    too, where no piece has that name (a vocabulary trained with its own `<pad>` keeps it), else `<start>` or the
    first of `<<start>>`, ... that no piece has."""
    if PAD not in pieces:
        return PAD
    name = "<start>"
    while name in pieces:
        name = f"<{name}>"
    return name


def joint_vocabulary(source: list[str], target: list[str], unk_id: int) -> tuple[list[str], list[int]]:
    """The pieces of one vocabulary for two: the target's at their own ids, then those only the source has; and for
    each of its ids the source vocabulary's id, `unk_id` where the source lacks the piece (what the toolkit's source
    side reads it as)."""
    known = set(target)
    pieces = target + [piece for piece in source if piece not in known]
    source_ids = {piece: i for i, piece in enumerate(source)}
    return pieces, [source_ids.get(piece, unk_id) for piece in pieces]


def joint_embeddings(
    source_embedding: torch.Tensor,
    target_embedding: torch.Tensor,
    output: torch.Tensor,
    output_bias: torch.Tensor | None,
    source_rows: list[int],
) -> dict[str, torch.Tensor]:
    """The source and target embeddings and the output layer over a joint vocabulary of len(source_rows) pieces: the
    source's rows picked by `source_rows`; past the target's own rows, zero embeddings (the decoder's start where a
    toolkit starts from a zero vector) and outputs never written."""
    target_size = len(target_embedding)
    beyond = len(source_rows) - target_size
    bias = torch.zeros(target_size) if output_bias is None else output_bias.reshape(-1).float()
    same_rows = source_rows == list(range(len(source_embedding)))  # one vocabulary: the matrix itself, not a copy
    return {
        "src_embed.lookup.weight": source_embedding if same_rows else source_embedding[source_rows],
        "tgt_embed.lookup.weight": _extended(target_embedding, beyond, 0.0),
        "generator.weight": _extended(output, beyond, 0.0),
        "generator.bias": _extended(bias, beyond, NEVER_WRITTEN),
    }


def _extended(rows: torch.Tensor, count: int, value: float) -> torch.Tensor:
    """`rows` with `count` rows of `value` after them; the tensor itself where none are added (an embedding of 256k
    rows is a gigabyte: copied for nothing, it was one more at the peak)."""
    if not count:
        return rows
    return torch.cat([rows, torch.full((count, *rows.shape[1:]), value, dtype=rows.dtype)])
