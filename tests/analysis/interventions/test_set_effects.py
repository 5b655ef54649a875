"""Effects over a pair set (issue 82, item 3): each pair's shares read at the sites every pair shares (the encoder's
stream by the word's role), averaged with a bootstrap interval, and counted where they are a pair's five strongest."""

from __future__ import annotations

import json

import numpy as np
from fixtures.patching_pair import CLEAN, CORRUPT
from helpers import run_cli

from transformer.analysis.interventions.set_effects import columns_by_role, effects, pair_sites
from transformer.analysis.interventions.sites import Patching
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint

IT_ROLES = {"differing": [10], "pronoun": [7], "antecedent": [1], "other_noun": [5]}


def test_roles_name_the_columns_of_the_words_the_set_names_by_piece_and_by_word():
    tokenizer = load_checkpoint(DEFAULT_CHECKPOINT).tokenizer
    clean, corrupt = (tokenizer.source_ids_of(tokenizer.encode(text)) for text in (CLEAN, CORRUPT))
    pieces = [tokenizer.id_to_piece(i) for i in clean]
    differing = [i for i, (a, b) in enumerate(zip(clean, corrupt)) if a != b]
    roles = columns_by_role(pieces, differing, IT_ROLES, words=False)
    assert [pieces[c] for c in roles["pronoun"]] == ["▁it"] and [pieces[c] for c in roles["antecedent"]] == ["▁animal"]
    assert "".join(pieces[c] for c in roles["differing"]) == "▁tired"  # the piece that differs; its "." is after
    assert roles["before"] == [roles["differing"][0] - 1] and roles["after"] == [roles["differing"][-1] + 1]
    every = sorted(c for role in roles.values() for c in role)
    assert every == list(range(len(pieces)))  # each column in exactly one role
    by_word = columns_by_role(pieces, differing, IT_ROLES, words=True)
    assert by_word["pronoun"] == [7] and by_word["antecedent"] == [1] and by_word["differing"] == [10]


def patching(stream: np.ndarray, heads: np.ndarray) -> Patching:
    return Patching(stream, heads, np.zeros((2, 2)), np.zeros((2, 2)), np.zeros(3), 1.0, -1.0, False)


def test_effects_are_the_mean_over_pairs_with_an_interval_around_it_and_top_counts():
    rng = np.random.default_rng(1)
    found, roles = [], {"differing": [1], "before": [0], "after": [2], "rest": [3]}
    for _ in range(30):
        stream = rng.normal(0, 0.05, (3, 4))
        stream[2, 1] = 0.9 + rng.normal(0, 0.01)  # the differing word after layer 2: every pair's strongest site
        found.append(patching(stream, rng.normal(0, 0.01, (2, 2, 4))))
    names = ["differing", "before", "after", "rest"]
    sites = [pair_sites(f, roles, names) for f in found]
    by_family = effects(sites)
    stream = by_family["encoder_stream"]
    expected = np.mean([f.encoder_residual[:, [1, 0, 2, 3]] for f in found], axis=0)  # roles as columns, by hand
    assert np.allclose(stream.mean, expected)
    assert np.all(stream.low <= stream.mean + 1e-12) and np.all(stream.mean <= stream.high + 1e-12)
    assert stream.high[2, 0] - stream.low[2, 0] < 0.02 and stream.top[2, 0] == 30
    heads = by_family["encoder_heads_differing"]
    assert np.allclose(heads.mean, np.mean([f.encoder_heads[:, :, 1] for f in found], axis=0))
    assert sum(int(effect.top.sum()) for name, effect in by_family.items() if "strongest" not in name) == 5 * 30


def test_patch_set_writes_the_sets_effects_as_the_pairs_own_files_give_them(tmp_path):
    pairs = [
        {"id": "it", "clean": CLEAN, "corrupt": CORRUPT, "target": "il", "foil": "elle", "roles": IT_ROLES},
        {
            "id": "he",
            "clean": "He is tired.",
            "corrupt": "She is tired.",
            "target": "Il",
            "foil": "Elle",
            "roles": {"differing": [0]},
        },
    ]
    (tmp_path / "set.jsonl").write_text("".join(json.dumps(pair) + "\n" for pair in pairs))
    done = run_cli("patch-set", "--pairs", tmp_path / "set.jsonl", "--out", tmp_path / "run", "--words")
    assert done.returncode == 0, done.stderr
    found = np.load(tmp_path / "run" / "effects.npz")
    assert list(found["roles"]) == ["differing", "pronoun", "antecedent", "other_noun", "before", "after", "rest"]
    by_hand = []
    for name, column in (("it", 10), ("he", 0)):  # the differing word's column, by word
        with np.load(tmp_path / "run" / "pairs" / f"{name}.npz") as arrays:
            by_hand.append(arrays["encoder_residual"][:, column])
    assert np.allclose(found["encoder_stream_mean"][:, 0], np.mean(by_hand, axis=0))
    assert not np.isnan(found["encoder_stream_mean"][1, 1])  # the pronoun: the it pair's alone (the other has none)
    rows = (tmp_path / "run" / "effects.csv").read_text().splitlines()
    assert rows[0] == "family,layer,head,role,mean,low,high,top_five_in" and len(rows) > 50


def test_a_pair_whose_two_sentences_are_one_is_read_as_no_share_not_refused_with_an_exception(tmp_path):
    """A set with a pair patched against itself (every share NaN: no difference) stopped patch-set and the page at
    the heads' strongest positions ("All-NaN slice encountered")."""
    nothing = patching(np.full((3, 4), np.nan), np.full((2, 2, 4), np.nan))
    sites = pair_sites(nothing, {"differing": [], "rest": [0, 1, 2, 3]}, ["differing", "rest"])
    assert np.isnan(sites.encoder_heads_strongest).all() and np.isnan(sites.encoder_stream).all()
    pairs = [
        {"id": "it", "clean": CLEAN, "corrupt": CORRUPT, "target": "il", "foil": "elle"},
        {"id": "same", "clean": CLEAN, "corrupt": CLEAN, "target": "il", "foil": "elle"},
    ]
    (tmp_path / "set.jsonl").write_text("".join(json.dumps(pair) + "\n" for pair in pairs))
    done = run_cli("patch-set", "--pairs", tmp_path / "set.jsonl", "--out", tmp_path / "run")
    assert done.returncode == 0, done.stderr
    with np.load(tmp_path / "run" / "effects.npz") as arrays:
        assert np.isfinite(arrays["encoder_heads_strongest_mean"]).all()  # the pair with shares makes the mean
