"""A development set held out of a training corpus by source sentence.

Tatoeba gives one English sentence several French translations (tu/vous, gender): a split by
line would put one translation in the dev set and its twin in training, and the dev score would
measure recall. Held out by source sentence, every translation of a dev sentence leaves training.
"""

from __future__ import annotations

import gzip
import hashlib
from pathlib import Path

from transformer.text.files import read_parallel


def hold_out(src: list[str], tgt: list[str], size: int, seed: int = 1) -> tuple[list[int], list[int]]:
    """(training lines, dev lines): `size` distinct source sentences, chosen by a seeded hash (stable across
    runs and machines), each once in dev with its first translation, and none of their lines in training."""
    distinct = list(dict.fromkeys(src))
    if size >= len(distinct):
        raise ValueError(f"the corpus has {len(distinct)} distinct source sentences: hold out fewer than that")
    ranked = sorted(distinct, key=lambda text: hashlib.sha256(f"{seed}\n{text}".encode()).digest())
    chosen = set(ranked[:size])
    train, dev, seen = [], [], set()
    for line, text in enumerate(src):
        if text not in chosen:
            train.append(line)
        elif text not in seen:
            seen.add(text)
            dev.append(line)
    return train, dev


def write_holdout(src_path: str, tgt_path: str, size: int, out_dir: str | Path, seed: int = 1) -> dict[str, Path]:
    """Writes `NAME-train` and `NAME-dev` pairs (gzipped, the input files' names and language suffixes kept)."""
    src, tgt = read_parallel(src_path, tgt_path)
    train, dev = hold_out(src, tgt, size, seed)
    written = {}
    for part, lines in (("train", train), ("dev", dev)):
        for path, texts in ((src_path, src), (tgt_path, tgt)):
            name = Path(path).name.removesuffix(".gz")
            stem, _, language = name.rpartition(".")
            out = Path(out_dir) / f"{stem}-{part}.{language}.gz"
            out.parent.mkdir(parents=True, exist_ok=True)
            with gzip.open(out, "wt", encoding="utf-8") as handle:
                handle.writelines(texts[i] + "\n" for i in lines)
            written[f"{part} {language}"] = out
    return written
