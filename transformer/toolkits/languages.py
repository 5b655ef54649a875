"""The language pair of a toolkit's model where a name says it (Marian, eole and OpenNMT-py record none in their files),
and the checkpoint list's label that shows it."""

from __future__ import annotations

import re

PAIR_AT_END = re.compile(r"(?<![a-z])([a-z]{2,3})-([a-z]{2,3})$")  # NAME.en-fr, opus-mt-en-fr
LANGUAGE_SUFFIX = re.compile(r".*?\.([a-z]{2,3})(?:\.spm)?")  # vocab.en.spm, vocab.en


def pair_named(directory: str, source_file: str, target_file: str) -> dict[str, str]:
    """{"src", "tgt"} as the directory's name ends (`NAME.en-fr`), else as the source's and the target's files'
    names end (`vocab.en.spm` and `vocab.fr.spm`); {} where no name says it."""
    pair = PAIR_AT_END.search(directory)
    if pair:
        return {"src": pair.group(1), "tgt": pair.group(2)}
    named = [LANGUAGE_SUFFIX.fullmatch(name) for name in (source_file, target_file)]
    if named[0] and named[1] and named[0].group(1) != named[1].group(1):
        return {"src": named[0].group(1), "tgt": named[1].group(1)}
    return {}


def listing(name: str, pair: dict[str, str], toolkit: str, size: str) -> str:
    """The checkpoint list's label of a toolkit's model: "NAME · en/fr · TOOLKIT · 0.3 MB" (no pair where none is
    said)."""
    return " · ".join((name, *([f"{pair['src']}/{pair['tgt']}"] if pair else []), toolkit, size))
