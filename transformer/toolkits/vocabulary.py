"""One vocabulary for a toolkit's two (a source's and a target's), as this project's model holds it: the target's
pieces at their own ids (so output ids are the toolkit's), then those only the source has, then any the reader adds
(Marian's zero start row); each embedding laid out over it."""

from __future__ import annotations

import torch

# A piece the decoder must never write (one only the source knows, a row the reader added), in the output layer of a
# joint vocabulary: a score no softmax gives weight to (exp(-10^4) is 0 in float32), finite so that entropies and sums
# stay numbers.
NEVER_WRITTEN = -1e4


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
    target_size, width = target_embedding.shape
    beyond = len(source_rows) - target_size
    bias = torch.zeros(target_size) if output_bias is None else output_bias.reshape(-1).float()
    return {
        "src_embed.lookup.weight": source_embedding[source_rows],
        "tgt_embed.lookup.weight": torch.cat([target_embedding, target_embedding.new_zeros(beyond, width)]),
        "generator.weight": torch.cat([output, output.new_zeros(beyond, width)]),
        "generator.bias": torch.cat([bias, torch.full((beyond,), NEVER_WRITTEN)]),
    }
