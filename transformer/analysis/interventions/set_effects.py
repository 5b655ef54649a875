"""Causal effects over a pair set: each pair's patching (`sites.Patching`, as `patch` computes it alone) read at the
sites every pair shares, then averaged with a bootstrap 95 % interval, with the count of pairs in which each site is
among that pair's five strongest (Vig et al. 2020 average such effects over templated pairs).

Sentences differ in length, so the encoder's positions are read by the word's role: the word that differs (where the
sources' ids differ), each role the set names (`Pair.roles`: the pronoun, the antecedent...), the words just before
and after the differing one, and the rest, each the mean over its columns. The encoder's heads are read at the
differing word and at their strongest position; the decoder's heads and stream at the step, as they are."""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from transformer.analysis.interventions.sites import Patching
from transformer.analysis.words import word_spans
from transformer.text.pieces import WORD_START

RESAMPLES = 2000
SEED = 0
TOP = 5
FAMILIES = ("encoder_stream", "encoder_heads_differing", "encoder_heads_strongest", "cross_heads", "self_heads")
FAMILIES += ("decoder_stream",)


@dataclass(frozen=True)
class PairSites:
    """One pair's shares at the sites every pair shares: the encoder's stream by role (L + 1, roles), its heads at
    the differing word and at their strongest position (L, H), the decoder's heads (L, H) and stream (L + 1,)."""

    encoder_stream: np.ndarray
    encoder_heads_differing: np.ndarray
    encoder_heads_strongest: np.ndarray
    cross_heads: np.ndarray
    self_heads: np.ndarray
    decoder_stream: np.ndarray


@dataclass(frozen=True)
class Effect:
    """One family's sites over a set: the mean share, its bootstrap interval, and how many pairs count each site
    among their five strongest (of every family's sites)."""

    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    top: np.ndarray


def columns_by_role(
    src_pieces: list[str], differing: list[int], named: dict[str, list[int]], words: bool
) -> dict[str, list[int]]:
    """Each role's source columns (pieces, or words where `words`): `differing` the columns where the sources' ids
    differ; each named role's words (0-based among the sentence's words, as `Pair.roles` names them); the columns
    just before and after the differing ones; and the rest (every column no other role holds, the end token too)."""
    spans = word_spans(src_pieces)
    starts = [start for start, end in spans if src_pieces[start].startswith(WORD_START)]  # the sentence's words
    column_of_piece = {piece: column for column, (start, end) in enumerate(spans) for piece in range(start, end)}

    def columns(word: int) -> list[int]:
        if word >= len(starts):
            return []
        span = next((s, e) for s, e in spans if s == starts[word])
        return [column_of_piece[span[0]]] if words else list(range(*span))

    differing = sorted({column_of_piece[p] for p in differing}) if words else sorted(differing)
    roles = {"differing": differing}
    roles |= {name: sorted({c for w in ws for c in columns(w)}) for name, ws in named.items() if name != "differing"}
    width = len(spans) if words else len(src_pieces)
    if differing:
        roles["before"] = [differing[0] - 1] if differing[0] > 0 else []
        roles["after"] = [differing[-1] + 1] if differing[-1] + 1 < width else []
    taken = {column for role in roles.values() for column in role}
    roles["rest"] = [column for column in range(width) if column not in taken]
    return roles


def pair_sites(found: Patching, roles: dict[str, list[int]], names: list[str]) -> PairSites:
    """A pair's patching at the shared sites: the stream's mean over each role's columns (NaN where the pair has
    none of a role), the heads at the differing columns and at their strongest column."""
    stream = np.stack(
        [
            found.encoder_residual[:, roles[n]].mean(axis=1)
            if roles.get(n)
            else np.full(len(found.encoder_residual), np.nan)
            for n in names
        ],
        axis=1,
    )
    heads = found.encoder_heads  # (L, H, columns)
    differing = (
        heads[:, :, roles["differing"]].mean(axis=2) if roles.get("differing") else np.full(heads.shape[:2], np.nan)
    )
    at = np.argmax(np.nan_to_num(np.abs(heads), nan=-1.0), axis=2)  # a head with no share (NaN) at any column: NaN
    strongest = np.take_along_axis(heads, at[:, :, None], axis=2)[:, :, 0]
    return PairSites(stream, differing, strongest, found.cross_heads, found.decoder_self_heads, found.decoder_residual)


def top_counts(pairs: list[PairSites]) -> dict[str, np.ndarray]:
    """For each family, how many pairs have each site among their TOP strongest (by |share|, over every family's
    sites but the heads' strongest positions, which repeat the heads)."""
    ranked = [f for f in FAMILIES if f != "encoder_heads_strongest"]
    counts = {family: np.zeros(getattr(pairs[0], family).shape, dtype=int) for family in FAMILIES}
    for pair in pairs:
        flat = np.concatenate([np.abs(getattr(pair, family)).ravel() for family in ranked])
        strongest = set(np.argsort(-np.nan_to_num(flat, nan=-1.0))[:TOP].tolist())
        offset = 0
        for family in ranked:
            size = getattr(pair, family).size
            hits = [index - offset for index in strongest if offset <= index < offset + size]
            counts[family].ravel()[hits] += 1
            offset += size
    return counts


def effects(pairs: list[PairSites], resamples: int = RESAMPLES, seed: int = SEED) -> dict[str, Effect]:
    """Each family's mean share over the pairs (a site a pair lacks, NaN, left out of its mean), the percentile
    bootstrap 95 % interval of that mean (the pairs resampled `resamples` times, a fixed seed) and the top counts."""
    draws = np.random.default_rng(seed).integers(0, len(pairs), (resamples, len(pairs)))
    counts = top_counts(pairs)
    found = {}
    for family in FAMILIES:
        values = np.stack([getattr(pair, family) for pair in pairs])  # (pairs, ...)
        with warnings.catch_warnings():  # a site no pair has (a role none names): its mean is NaN, said as such
            warnings.simplefilter("ignore", RuntimeWarning)
            means = np.nanmean(values[draws], axis=1)
            low, high = np.nanpercentile(means, [2.5, 97.5], axis=0)
            found[family] = Effect(np.nanmean(values, axis=0), low, high, counts[family])
    return found


def roles_of(
    src_pieces: list[str], src_ids: list[int], corrupt_ids: list[int], named: dict[str, list[int]], words: bool
) -> dict[str, list[int]]:
    """columns_by_role() of a pair read from its two sources: the differing columns are where their ids differ."""
    differing = [at for at, (clean, corrupt) in enumerate(zip(src_ids, corrupt_ids)) if clean != corrupt]
    return columns_by_role(list(src_pieces), differing, named, words)


def effects_by_role(found: list[Patching], roles: list[dict[str, list[int]]]) -> tuple[list[str], dict[str, Effect]]:
    """The roles the encoder's stream is read by (the set's own first, then before, after and rest) and each
    family's effect over the pairs: `found` each pair's patching, `roles` its columns by role (roles_of)."""
    names = list(dict.fromkeys(name for pair_roles in roles for name in pair_roles))
    names = [n for n in names if n not in ("before", "after", "rest")] + ["before", "after", "rest"]
    return names, effects([pair_sites(patching, role, names) for patching, role in zip(found, roles)])


ROLE_LABELS = {"differing": "the differing word", "before": "the word before", "after": "the word after"}
ROLE_LABELS |= {"rest": "the rest"}


def role_label(role: str) -> str:
    """A role as a reader reads it: "the differing word", "the pronoun", "the other noun"."""
    return ROLE_LABELS.get(role, "the " + role.replace("_", " "))
