"""A head's ablation against a pair set's accuracy (issue 82): each head switched off alone in a gated batch gives
what the model's own forward pass gives with that head off (`--heads-off`), and the set's accuracy with it off
counts the pairs it makes wrong and right."""

from __future__ import annotations

import csv
import json

import numpy as np
import pytest
import torch
from fixtures.patching_pair import CLEAN, CORRUPT
from helpers import run_cli

from transformer.analysis.interventions.contrastive import NOT_WRITTEN, READ, Outcome
from transformer.analysis.interventions.patching import contrast_of_texts, decoder_input_of
from transformer.analysis.interventions.set_ablation import HeadAblation, ablation_over_set, metrics_with_each_head_off
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint
from transformer.model.heads import Head, every_head
from transformer.model.probes import Probe


def forward_metric(model, source: list[int], contrast, heads_off: list[Head]) -> float:
    """The logit difference at the step from the model's whole teacher-forced pass with `heads_off` switched off:
    log-probabilities differ as the logits do."""
    decoder_input = decoder_input_of(model, contrast)
    with torch.no_grad():
        out = model(torch.tensor([source]), decoder_input, probe=Probe.ablating(heads_off)).log_probs[0, -1]
    return float(out[contrast.target] - out[contrast.foil])


def test_each_head_off_in_the_gated_batch_is_the_models_own_pass_with_that_head_off():
    checkpoint = load_checkpoint(DEFAULT_CHECKPOINT)
    model = checkpoint.model
    contrast = contrast_of_texts(model, checkpoint.tokenizer, CLEAN, CORRUPT, "il", "elle")[0]
    heads = every_head(model.config)
    clean, corrupt = metrics_with_each_head_off(model, contrast)
    assert clean.shape == corrupt.shape == (len(heads),)
    for index in range(0, len(heads), 7):  # every kind, several layers
        head = heads[index]
        assert clean[index] == pytest.approx(forward_metric(model, contrast.clean_src, contrast, [head]), abs=1e-4)
        assert corrupt[index] == pytest.approx(forward_metric(model, contrast.corrupt_src, contrast, [head]), abs=1e-4)
    intact = forward_metric(model, contrast.clean_src, contrast, [])
    assert np.abs(clean - intact).max() > 0.1  # some head matters: the test would see a gate that zeroes nothing
    assert metrics_with_each_head_off(model, contrast, [heads[3]])[0][0] == pytest.approx(clean[3], abs=1e-5)


def test_the_sets_accuracy_with_a_head_off_counts_the_pairs_it_breaks_and_mends():
    heads = [Head.parse("cross.1.1"), Head.parse("cross.1.2")]
    outcomes = [
        Outcome("a", "", READ, 0, 1.0, -1.0),  # correct
        Outcome("b", "", READ, 0, 1.0, -1.0),  # correct
        Outcome("c", "", READ, 0, -1.0, -1.0),  # wrong
        Outcome("d", "", NOT_WRITTEN),
    ]
    off = {
        "a": (np.array([-0.5, 2.0]), np.array([-1.0, -1.0])),  # the first head breaks a
        "b": (np.array([1.0, 1.0]), np.array([-1.0, -1.0])),
        "c": (np.array([-1.0, 0.5]), np.array([-1.0, -1.0])),  # the second mends c
    }
    first, second = ablation_over_set(outcomes, off, heads)
    assert (first.broken, first.mended, first.accuracy.correct, first.accuracy.written) == (1, 0, 1, 3)
    assert first.change == pytest.approx(1 / 3 - 2 / 3) and first.gap_change == pytest.approx(-1.5 / 3)
    assert (second.broken, second.mended, second.change) == (0, 1, pytest.approx(1 / 3))
    assert second.accuracy.pairs == 4  # the pair never written counted, and left out of the share


def test_patch_set_with_ablation_writes_each_heads_accuracy_as_the_model_gives_it_with_that_head_off(tmp_path):
    pairs = [
        {"id": "it", "clean": CLEAN, "corrupt": CORRUPT, "target": "il", "foil": "elle"},
        {"id": "he", "clean": "He is tired.", "corrupt": "She is tired.", "target": "Il", "foil": "Elle"},
    ]
    (tmp_path / "set.jsonl").write_text("".join(json.dumps(pair) + "\n" for pair in pairs))
    out = tmp_path / "run"
    done = run_cli("patch-set", "--pairs", tmp_path / "set.jsonl", "--out", out, "--ablation")
    assert done.returncode == 0 and "changes the accuracy most" in done.stderr, done.stderr
    rows = {row["head"]: row for row in csv.DictReader((out / "ablation.csv").open())}
    checkpoint = load_checkpoint(DEFAULT_CHECKPOINT)
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    assert len(rows) == len(every_head(model.config))
    contrasts = [
        contrast_of_texts(model, tokenizer, p["clean"], p["corrupt"], p["target"], p["foil"])[0] for p in pairs
    ]
    for name in ("cross.3.5", "encoder.1.1", "decoder.2.3"):
        head = Head.parse(name)
        correct = [
            forward_metric(model, c.clean_src, c, [head]) > 0 > forward_metric(model, c.corrupt_src, c, [head])
            for c in contrasts
        ]
        assert float(rows[name]["accuracy"]) == pytest.approx(sum(correct) / 2), name
        assert int(rows[name]["broken"]) == 2 - sum(correct), name  # both pairs are correct with every head on
    changes = [float(row["change"]) for row in rows.values()]
    assert changes == sorted(changes)  # the heads that lower the accuracy most first


def test_a_pair_past_the_patching_budget_is_refused_alone_and_the_set_runs_on(tmp_path, monkeypatch):
    from transformer.analysis.interventions import budget

    long = "The old dog that lived by the river didn't cross the wide street because it was far too tired."
    pairs = [
        {"id": "long", "clean": long, "corrupt": long.replace("tired", "wide."[:-1]), "target": "il", "foil": "elle"},
        {"id": "he", "clean": "He is tired.", "corrupt": "She is tired.", "target": "Il", "foil": "Elle"},
    ]
    (tmp_path / "set.jsonl").write_text("".join(json.dumps(pair) + "\n" for pair in pairs))
    passes_of_the_short_pair = 15  # "He is tired." makes 12 passes on the default, the long pair 21
    real = budget.check_patching
    monkeypatch.setattr(
        "transformer.analysis.interventions.budget.check_patching",
        lambda *args, **kwargs: real(*args[:6], max_passes=passes_of_the_short_pair),
    )
    done = run_cli("patch-set", "--pairs", tmp_path / "set.jsonl", "--out", tmp_path / "run")
    assert done.returncode == 0, done.stderr
    rows = {row["id"]: row for row in csv.DictReader((tmp_path / "run" / "pairs.csv").open())}
    assert rows["long"]["status"] == "refused" and "shorten the sentences" in rows["long"]["why"]
    assert rows["he"]["status"] == "read" and rows["he"]["correct"] == "True"


def test_what_a_set_shows_is_said_from_its_numbers_where_none_is_right_and_no_head_matters():
    from transformer.analysis.interventions.contrastive import Accuracy
    from transformer.analysis.interventions.summary import set_in_words

    none_right = Accuracy(5, 4, 0, 0.0, 0.0, 0.0)
    no_head = [HeadAblation(Head.parse("cross.1.1"), none_right, 0.0, 0, 0, -0.5)]
    said = set_in_words(none_right, 1, None, [], no_head)
    assert said.startswith("0 of 4 pairs are correct: 0% (95 % interval 0% to 0%); 1 more were left out")
    assert "resolves none as the set asks" in said and "No head switched off alone changes the accuracy" in said
    nothing = Accuracy(3, 0, 0, float("nan"), float("nan"), float("nan"))
    assert set_in_words(nothing, 3, None, []).startswith("No pair was read (3 not written or refused)")
