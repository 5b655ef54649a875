"""Several parallel corpora as one training set: weights, a vocabulary sample, and ids prepared once.

A corpus's weight is how many times an epoch reads it (fairseq's and Marian's "upsampling"): 4 reads
every pair four times, 0.5 a seeded half of the pairs, drawn anew each epoch. Small in-domain sets
(everyday sentences, captions) would otherwise vanish beside a large one. The ids of every corpus
are cached beside the output, keyed by the tokenizer and the files, so a start or a resume does not
tokenize a million lines again.
"""

from __future__ import annotations

import hashlib
import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from transformer.text.files import read_parallel
from transformer.text.tokenizer import Tokenizer

Pair = tuple[list[int], list[int]]
CACHE_VERSION = b"corpora-cache-1"


@dataclass(frozen=True)
class Corpus:
    """One pair of parallel files and how many times an epoch reads them."""

    src: str
    tgt: str
    weight: float = 1.0

    @property
    def name(self) -> str:
        """The files' shared stem: `hansard.train` for `hansard.train.en.gz`."""
        return corpus_name(self.src)


def corpus_name(path: str) -> str:
    return re.sub(r"(\.[A-Za-z_-]{2,5})?(\.(gz|xz|txt))?$", "", Path(path).name) or Path(path).name


def epoch_indices(sizes: Sequence[int], weights: Sequence[float], seed: int, epoch: int) -> list[int]:
    """Indices into the corpora's pairs laid end to end: each corpus int(weight) times whole, plus a seeded
    random fraction (weight's fractional part) of its pairs, drawn anew for each epoch."""
    generator = torch.Generator().manual_seed(seed * 1_000_003 + epoch + 17)
    indices: list[int] = []
    start = 0
    for size, weight in zip(sizes, weights):
        whole, fraction = int(weight), weight - int(weight)
        for _ in range(whole):
            indices.extend(range(start, start + size))
        drawn = round(fraction * size)
        if drawn:
            indices.extend((torch.randperm(size, generator=generator)[:drawn] + start).tolist())
        start += size
    return indices


def vocabulary_sample(
    texts: Sequence[tuple[list[str], list[str]]], weights: Sequence[float], size: int, seed: int
) -> list[str]:
    """About `size` sentences, both sides, drawn from the corpora in the proportions an epoch reads them, so
    that the vocabulary fits the mix the model learns from (and training it takes seconds, not an hour)."""
    generator = torch.Generator().manual_seed(seed)
    read = [weight * len(src) for (src, _), weight in zip(texts, weights)]
    total = sum(read) or 1.0
    sample: list[str] = []
    for (src, tgt), share in zip(texts, read):
        pairs = min(len(src), max(1, round(size / 2 * share / total)))
        for i in torch.randperm(len(src), generator=generator)[:pairs].tolist():
            sample += [src[i], tgt[i]]
    return sample


def encode_pairs(tokenizer: Tokenizer, src: list[str], tgt: list[str], max_len: int) -> list[Pair]:
    """Id pairs with eos appended; pairs longer than max_len or with an empty side are dropped."""
    eos = tokenizer.eos_id
    pairs = []
    for src_ids, tgt_ids in zip(tokenizer.encode_many(src), tokenizer.encode_many(tgt)):
        src_ids, tgt_ids = src_ids + [eos], tgt_ids + [eos]
        if 1 < len(src_ids) <= max_len and 1 < len(tgt_ids) <= max_len:
            pairs.append((src_ids, tgt_ids))
    return pairs


def _cache_key(tokenizer: Tokenizer, corpora: Sequence[Corpus], max_len: int) -> str:
    digest = hashlib.sha256(CACHE_VERSION + tokenizer.model_proto + str(max_len).encode())
    for corpus in corpora:
        for path in (corpus.src, corpus.tgt):
            stat = os.stat(path)
            digest.update(f"{Path(path).resolve()}|{stat.st_size}|{stat.st_mtime_ns}".encode())
    return digest.hexdigest()


def prepared_pairs(
    tokenizer: Tokenizer,
    corpora: Sequence[Corpus],
    max_len: int,
    cache: Path,
    texts: Sequence[tuple[list[str], list[str]]] | None = None,
    write: bool = True,
) -> list[list[Pair]]:
    """Each corpus's id pairs, read from `cache` when it was made for these files and this tokenizer, else
    encoded (from `texts` if given, else read from the files) and cached (if `write`: one process of several)."""
    key = _cache_key(tokenizer, corpora, max_len)
    cached = _read_cache(cache, key, len(corpora))
    if cached is not None:
        return cached
    texts = texts or [read_parallel(corpus.src, corpus.tgt) for corpus in corpora]
    encoded = [encode_pairs(tokenizer, src, tgt, max_len) for src, tgt in texts]
    if write:
        _write_cache(cache, key, encoded)
    return encoded


def _write_cache(path: Path, key: str, corpora: list[list[Pair]]) -> None:
    arrays: dict[str, np.ndarray] = {"key": np.frombuffer(key.encode(), dtype=np.uint8)}
    for index, pairs in enumerate(corpora):
        for side in (0, 1):
            sequences = [pair[side] for pair in pairs]
            arrays[f"{index}.{side}.lengths"] = np.array([len(s) for s in sequences], dtype=np.int32)
            arrays[f"{index}.{side}.ids"] = np.fromiter((i for s in sequences for i in s), dtype=np.int32)
    temporary = path.with_name(f".{path.name}.partial")
    with open(temporary, "wb") as handle:
        np.savez(handle, **arrays)
    os.replace(temporary, path)


def _read_cache(path: Path, key: str, count: int) -> list[list[Pair]] | None:
    """The cached pairs, or None when there is no cache, it is for other files or it cannot be read."""
    try:
        with np.load(path, allow_pickle=False) as arrays:
            if bytes(arrays["key"]).decode() != key:
                return None
            corpora = []
            for index in range(count):
                sides = []
                for side in (0, 1):
                    ends = np.cumsum(arrays[f"{index}.{side}.lengths"])
                    parts = np.split(arrays[f"{index}.{side}.ids"], ends[:-1]) if len(ends) else []
                    sides.append([part.tolist() for part in parts])
                corpora.append(list(zip(*sides)))
            return corpora
    except (OSError, KeyError, ValueError, UnicodeDecodeError):
        return None
