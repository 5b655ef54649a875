"""Parallel text as training batches: id pairs, length-bucketed batches by token count, padding."""

from __future__ import annotations

from collections.abc import Iterator

import torch

from transformer.text.tokenizer import Tokenizer


def encode_pairs(
    tokenizer: Tokenizer, src: list[str], tgt: list[str], max_len: int
) -> list[tuple[list[int], list[int]]]:
    """Id pairs with eos appended; pairs longer than max_len or with an empty side are dropped."""
    eos = tokenizer.eos_id
    pairs = []
    for source, target in zip(src, tgt):
        src_ids, tgt_ids = tokenizer.encode(source) + [eos], tokenizer.encode(target) + [eos]
        if 1 < len(src_ids) <= max_len and 1 < len(tgt_ids) <= max_len:
            pairs.append((src_ids, tgt_ids))
    return pairs


def token_batches(pairs: list[tuple[list[int], list[int]]], max_tokens: int, seed: int, epoch: int) -> list[list[int]]:
    """Indices of pairs grouped so that each batch pads to at most max_tokens per side.

    Sorting by length keeps padding low; a per-epoch seeded shuffle (of pairs of equal
    length and of the batch order) makes the order reproducible, so a resumed run sees
    exactly the batches an uninterrupted one would.
    """
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch)
    noise = torch.rand(len(pairs), generator=generator).tolist()
    order = sorted(range(len(pairs)), key=lambda i: (len(pairs[i][1]), len(pairs[i][0]), noise[i]))
    batches, current, longest = [], [], 0
    for i in order:
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
    """src (B, S), decoder input (the start token + target without its last token) and gold output, padded."""
    batch = [pairs[i] for i in indices]
    src_len = max(len(s) for s, _ in batch)
    tgt_len = max(len(t) for _, t in batch)
    src = torch.full((len(batch), src_len), pad_id, dtype=torch.long)
    tgt_in = torch.full((len(batch), tgt_len), pad_id, dtype=torch.long)
    tgt_out = torch.full((len(batch), tgt_len), pad_id, dtype=torch.long)
    for row, (source, target) in enumerate(batch):
        src[row, : len(source)] = torch.tensor(source)
        tgt_in[row, : len(target)] = torch.tensor([start_id, *target[:-1]])
        tgt_out[row, : len(target)] = torch.tensor(target)
    return src, tgt_in, tgt_out


def iterate_batches(
    pairs: list[tuple[list[int], list[int]]], batches: list[list[int]], pad_id: int, start_id: int, start: int = 0
) -> Iterator[tuple[int, tuple[torch.Tensor, torch.Tensor, torch.Tensor]]]:
    for index in range(start, len(batches)):
        yield index, collate(pairs, batches[index], pad_id, start_id)
