"""Id pairs as training batches: length-bucketed batches by token count, padding."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np
import torch


def token_batches(
    pairs: list[tuple[list[int], list[int]]], max_tokens: int, seed: int, epoch: int, indices: list[int] | None = None
) -> list[list[int]]:
    """Indices of pairs (all, or the given ones: an epoch's weighted draw) grouped so that each batch pads to at
    most max_tokens per side.

    Sorting by length keeps padding low; a per-epoch seeded shuffle (of pairs of equal
    length and of the batch order) makes the order reproducible, so a resumed run sees
    exactly the batches an uninterrupted one would.
    """
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    indices = list(range(len(pairs))) if indices is None else indices
    noise = torch.rand(len(indices), generator=generator).tolist()
    order = sorted(range(len(indices)), key=lambda n: (len(pairs[indices[n]][1]), len(pairs[indices[n]][0]), noise[n]))
    batches, current, longest = [], [], 0
    for i in (indices[n] for n in order):
        length = max(len(pairs[i][0]), len(pairs[i][1]) + 1)
        if current and max(longest, length) * (len(current) + 1) > max_tokens:
            batches.append(current)
            current, longest = [], 0
        current.append(i)
        longest = max(longest, length)
    if current:
        batches.append(current)
    permutation = torch.randperm(len(batches), generator=generator).tolist()
    return [batches[i] for i in permutation]


def rank_batches(batches: list[list[int]], rank: int, world: int) -> list[list[int]]:
    """One rank's share of an epoch's batches: every rank as many, the tail that does not divide dropped.

    Ranks that took different numbers of steps would leave one waiting in a collective the others never join.
    """
    usable = len(batches) - len(batches) % world
    return batches[rank:usable:world]


def collate(
    pairs: list[tuple[list[int], list[int]]], indices: list[int], pad_id: int, start_id: int
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """src (B, S), decoder input (the start token + target without its last token) and gold output, padded.

    Filled through a mask in one go rather than row by row: a batch of short sentences has a thousand rows,
    and a loop over them took longer than a GPU's training step.
    """
    sources = [pairs[i][0] for i in indices]
    targets = [pairs[i][1] for i in indices]
    src = _padded(sources, pad_id)
    tgt_out = _padded(targets, pad_id)
    tgt_in = _padded([[start_id, *target[:-1]] for target in targets], pad_id)
    return src, tgt_in, tgt_out


def _padded(rows: list[list[int]], pad_id: int) -> torch.Tensor:
    lengths = np.fromiter(map(len, rows), dtype=np.int64, count=len(rows))
    padded = np.full((len(rows), int(lengths.max())), pad_id, dtype=np.int64)
    padded[np.arange(padded.shape[1]) < lengths[:, None]] = np.fromiter(
        itertools.chain.from_iterable(rows), dtype=np.int64, count=int(lengths.sum())
    )
    return torch.from_numpy(padded)


def iterate_batches(
    pairs: list[tuple[list[int], list[int]]], batches: list[list[int]], pad_id: int, start_id: int, start: int = 0
) -> Iterator[tuple[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]]:
    for index in range(start, len(batches)):
        yield index, collate(pairs, batches[index], pad_id, start_id)
