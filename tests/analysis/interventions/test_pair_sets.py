"""Pair sets (issue 82, first step): the format read line by line, the built-in sets, contrastive accuracy with its
interval, and `patch-set`, whose every pair equals `patch` run on that pair alone."""

from __future__ import annotations

import csv
import json
import runpy
import sys
from pathlib import Path

import numpy as np
import pytest
from fixtures.patching_pair import CLEAN, CORRUPT
from helpers import REPO, run_cli

from transformer.analysis.interventions import contrastive, sites
from transformer.analysis.interventions.contrastive import NOT_WRITTEN, READ, Outcome, accuracy, outcome_of
from transformer.analysis.interventions.pair_sets import Pair, PairSetError, pair_line, read_pair_set
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint

SETS = REPO / "transformer" / "analysis" / "interventions" / "sets"
IT_PAIR = {"id": "it", "clean": CLEAN, "corrupt": CORRUPT, "target": "il", "foil": "elle", "phenomenon": "antecedent"}


def test_each_bad_line_is_refused_naming_its_number_and_why_and_the_others_are_kept(tmp_path):
    lines = [
        json.dumps(IT_PAIR),
        "{not json",
        json.dumps(IT_PAIR | {"id": "../../etc"}),
        json.dumps(IT_PAIR | {"id": "b", "clean": ""}),
        json.dumps(IT_PAIR),  # the first line's id again
        json.dumps(IT_PAIR | {"id": "c", "colour": "red"}),
        json.dumps(IT_PAIR | {"id": "d", "roles": {"differing": [40]}}),
        json.dumps(IT_PAIR | {"id": "e", "step": 0}),
        "",
        json.dumps(["a list"]),
        json.dumps(IT_PAIR | {"id": "f", "step": 14, "roles": {"differing": [10]}}),
    ]
    (tmp_path / "set.jsonl").write_text("\n".join(lines) + "\n")
    read = read_pair_set(tmp_path / "set.jsonl")
    assert [pair.id for pair in read.pairs] == ["it", "f"] and read.pairs[1].step == 14
    assert read.pairs[1].roles == {"differing": [10]} and read.pairs[0].foil == "elle"
    refused = dict(read.refused)
    assert sorted(refused) == [2, 3, 4, 5, 6, 7, 8, 10]
    assert refused[2].startswith("not JSON") and "letters, digits" in refused[3] and refused[4] == "clean is not a text"
    assert "earlier line's" in refused[5] and "unknown field 'colour'" in refused[6]
    assert "past the clean sentence's 11" in refused[7] and "not an output step" in refused[8]
    assert refused[10] == "not a JSON object"


def test_a_file_that_is_not_text_or_not_a_file_is_refused_whole(tmp_path):
    (tmp_path / "set.jsonl").write_bytes(json.dumps(IT_PAIR).encode() + b"\n\xff\xfe\n")
    with pytest.raises(PairSetError, match="line 2"):
        read_pair_set(tmp_path / "set.jsonl")
    with pytest.raises(PairSetError):
        read_pair_set(tmp_path)


def test_a_pair_is_written_as_the_line_it_is_read_from(tmp_path):
    pair = Pair("x.1", "A b.", "C b.", "il", None, "p", 2, {"differing": [0]})
    (tmp_path / "one.jsonl").write_text(pair_line(pair) + "\n")
    assert read_pair_set(tmp_path / "one.jsonl").pairs == [pair]


def test_the_built_in_sets_hold_three_phenomena_of_at_least_100_pairs_of_the_same_piece_count():
    tokenizer = load_checkpoint(DEFAULT_CHECKPOINT).tokenizer
    for name in ("antecedent", "noun-gender", "pronoun-gender"):
        read = read_pair_set(SETS / f"{name}.jsonl")
        assert not read.refused and len(read.pairs) >= 100, name
        assert {pair.phenomenon for pair in read.pairs} == {name}
        for pair in read.pairs:
            assert len(tokenizer.encode(pair.clean)) == len(tokenizer.encode(pair.corrupt)), pair
            differing = pair.roles["differing"][0]
            assert pair.clean.split()[differing] != pair.corrupt.split()[differing], pair


def test_the_generator_makes_the_shipped_sets_again(tmp_path, monkeypatch):
    monkeypatch.setattr(sys, "argv", ["make_pair_sets.py", "--out", str(tmp_path)])
    runpy.run_path(str(REPO / "scripts" / "make_pair_sets.py"), run_name="__main__")
    for name in ("antecedent", "noun-gender", "pronoun-gender"):
        assert (tmp_path / f"{name}.jsonl").read_bytes() == (SETS / f"{name}.jsonl").read_bytes(), name


def outcomes(correct: int, wrong: int, not_written: int = 0) -> list[Outcome]:
    return (
        [Outcome(f"c{i}", "p", READ, 0, 1.0, -1.0) for i in range(correct)]
        + [Outcome(f"w{i}", "p", READ, 0, 1.0, 0.5) for i in range(wrong)]
        + [Outcome(f"n{i}", "p", NOT_WRITTEN) for i in range(not_written)]
    )


def test_accuracy_counts_written_pairs_alone_with_a_bootstrap_interval_around_the_share():
    found = accuracy(outcomes(30, 10, not_written=7))
    assert (found.pairs, found.written, found.correct, found.share) == (47, 40, 30, 0.75)
    assert found.low < 0.75 < found.high and 0.55 < found.low and found.high < 0.9  # about ± 0.13 for 40 pairs
    assert accuracy(outcomes(30, 10)) == accuracy(outcomes(30, 10))  # the seed: the same interval every time
    assert accuracy(outcomes(40, 0)).low == 1.0 and np.isnan(accuracy(outcomes(0, 0, 3)).share)


def test_a_pairs_outcome_is_the_metrics_patching_reads_and_one_never_written_is_said_so():
    checkpoint = load_checkpoint(DEFAULT_CHECKPOINT)
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    pair = Pair(**IT_PAIR)
    found = outcome_of(model, tokenizer, pair)
    patched = sites.patch_every_site(model, sites_contrast(model, tokenizer))
    assert found.correct and found.metric_clean == pytest.approx(patched.metric_clean, abs=1e-5)
    assert found.metric_corrupt == pytest.approx(patched.metric_corrupt, abs=1e-5)
    never = outcome_of(model, tokenizer, Pair("n", CLEAN, CORRUPT, "chien", "elle"))
    assert never.status == NOT_WRITTEN and "no output token is 'chien'" in never.why and not never.correct


def sites_contrast(model, tokenizer):
    from transformer.analysis.interventions.patching import contrast_of_texts

    return contrast_of_texts(model, tokenizer, CLEAN, CORRUPT, "il", "elle")[0]


def test_patch_set_writes_each_pair_as_patch_does_alone_and_resumes_skipping_pairs_done(tmp_path, monkeypatch):
    second = IT_PAIR | {"id": "tired-he", "clean": "He is tired.", "corrupt": "She is tired.", "target": "Il"}
    second |= {"foil": "Elle", "phenomenon": "pronoun-gender"}
    lines = [IT_PAIR, second, IT_PAIR | {"id": "never", "target": "chien"}]
    (tmp_path / "set.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines) + "{bad\n")
    out = tmp_path / "run"
    done = run_cli("patch-set", "--pairs", tmp_path / "set.jsonl", "--out", out, "--words")
    assert done.returncode == 0, done.stderr
    assert "set.jsonl, line 4: not JSON" in done.stderr and "3 pairs, 0 done before" in done.stderr
    alone = tmp_path / "alone.npz"
    assert (
        run_cli(
            "patch",
            "--clean",
            CLEAN,
            "--corrupt",
            CORRUPT,
            "--target",
            "il",
            "--foil",
            "elle",
            "--words",
            "--out",
            alone,
        ).returncode
        == 0
    )
    with np.load(out / "pairs" / "it.npz") as in_the_set, np.load(alone) as by_itself:
        assert sorted(in_the_set.files) == sorted(by_itself.files)
        for name in by_itself.files:
            numbers = by_itself[name].dtype.kind == "f"
            assert np.array_equal(in_the_set[name], by_itself[name], equal_nan=numbers), name
    rows = list(csv.DictReader((out / "pairs.csv").open()))
    assert [(row["id"], row["status"], row["correct"]) for row in rows] == [
        ("it", "read", "True"),
        ("tired-he", "read", "True"),
        ("never", "not written", "False"),
    ]
    assert rows[0]["step"] == "17" and not (out / "pairs" / "never.npz").exists()
    summary = json.loads((out / "summary.json").read_text())
    assert (summary["pairs"], summary["written"], summary["correct"], summary["not_written"]) == (3, 2, 2, 1)
    assert summary["lines_refused"] == 1 and summary["by_phenomenon"]["pronoun-gender"]["correct"] == 1
    monkeypatch.setattr(contrastive, "patch_every_site", lambda *a, **k: pytest.fail("a pair done was patched again"))
    again = run_cli("patch-set", "--pairs", tmp_path / "set.jsonl", "--out", out, "--words")
    assert again.returncode == 0 and "3 pairs, 2 done before" in again.stderr, again.stderr
    assert json.loads((out / "summary.json").read_text()) == summary
    other = run_cli("patch-set", "--pairs", tmp_path / "set.jsonl", "--out", out)  # not --words: another run
    assert other.returncode == 2 and "holds a run of other settings" in other.stderr


def test_patch_set_refuses_a_set_it_cannot_read_in_one_line(tmp_path):
    done = run_cli("patch-set", "--pairs", tmp_path, "--out", tmp_path / "run")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and Path(tmp_path).name in done.stderr


def test_patch_set_split_over_two_processes_by_torchrun_writes_what_one_process_writes(tmp_path):
    """Each rank patches its share of the pairs, rank 0 writes what they make together (gloo, on this machine)."""
    import os
    import socket
    import subprocess

    pairs = [IT_PAIR, IT_PAIR | {"id": "never", "target": "chien"}]
    pairs += [
        {
            "id": f"g{i}",
            "clean": f"{a} is {w}.",
            "corrupt": f"{b} is {w}.",
            "target": t,
            "foil": f,
            "phenomenon": "pronoun-gender",
        }
        for i, (a, b, t, f, w) in enumerate(
            [("She", "He", "Elle", "Il", "tired"), ("He", "She", "Il", "Elle", "happy")]
        )
    ]
    (tmp_path / "set.jsonl").write_text("".join(json.dumps(pair) + "\n" for pair in pairs))
    with socket.socket() as free:
        free.bind(("127.0.0.1", 0))
        port = free.getsockname()[1]
    environment = os.environ | {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}  # both runs: one thread each
    command = ["-m", "transformer", "patch-set", "--pairs", str(tmp_path / "set.jsonl"), "--out"]
    alone = subprocess.run([sys.executable, *command, str(tmp_path / "one")], env=environment, capture_output=True)
    assert alone.returncode == 0, alone.stderr[-2000:]
    torchrun = [str(Path(sys.executable).parent / "torchrun"), "--nproc_per_node", "2", "--master_port", str(port)]
    done = subprocess.run(
        [*torchrun, *command, str(tmp_path / "two")], cwd=tmp_path, env=environment, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr[-2000:]
    assert "rank 0: " in done.stderr and "rank 1: " in done.stderr
    for name in ("summary.json", "pairs.csv", "run.json"):  # one thread each: the same sums, the same numbers
        assert (tmp_path / "two" / name).read_text() == (tmp_path / "one" / name).read_text(), name
    assert sorted(p.name for p in (tmp_path / "two" / "pairs").iterdir()) == ["g0.npz", "g1.npz", "it.npz"]
    for name in ["effects.npz", *(f"pairs/{p}" for p in ("g0.npz", "g1.npz", "it.npz"))]:
        with np.load(tmp_path / "one" / name) as one, np.load(tmp_path / "two" / name) as two:
            for array in one.files:
                if one[array].dtype.kind == "f":
                    assert np.allclose(one[array], two[array], atol=1e-6, equal_nan=True), (name, array)
                else:
                    assert np.array_equal(one[array], two[array]), (name, array)


def test_patch_set_runs_on_a_tiny_hugging_face_directory_as_patch_does(tmp_path):
    """End to end on another family: a Marian directory read by the Hugging Face importer, its pair's target and foil
    the tiny model's own first output token and its runner-up."""
    from fixtures.hf_models import save_marian
    from helpers import make_sentences

    from transformer.decoding.strategies import decode_text
    from transformer.toolkits.opening import load_any_checkpoint

    sentences = [" ".join(s.split()) for s in make_sentences(300, seed=1)]
    (tmp_path / "marian").mkdir()
    directory = save_marian(tmp_path / "marian", sentences, sentences)
    checkpoint = load_any_checkpoint(directory)
    output = decode_text(checkpoint.model, checkpoint.tokenizer, "the red dog runs")
    target, foil = output.tgt_pieces[0], checkpoint.tokenizer.id_to_piece(int(output.topk_ids[0][1]))
    pair = {"id": "dog", "clean": "the red dog runs", "corrupt": "the blue dog runs", "target": target, "foil": foil}
    (tmp_path / "set.jsonl").write_text(json.dumps(pair) + "\n")
    done = run_cli(
        "patch-set",
        "--checkpoint",
        directory,
        "--pairs",
        tmp_path / "set.jsonl",
        "--out",
        tmp_path / "run",
        "--method",
        "both",
    )
    assert done.returncode == 0 and json.loads((tmp_path / "run" / "summary.json").read_text())["written"] == 1
    alone = run_cli(
        "patch",
        "--checkpoint",
        directory,
        "--clean",
        pair["clean"],
        "--corrupt",
        pair["corrupt"],
        "--target",
        target,
        "--foil",
        foil,
        "--out",
        tmp_path / "alone.npz",
    )
    assert alone.returncode == 0, alone.stderr
    with np.load(tmp_path / "run" / "pairs" / "dog.npz") as in_the_set, np.load(tmp_path / "alone.npz") as by_itself:
        for name in by_itself.files:
            numbers = by_itself[name].dtype.kind == "f"
            assert np.array_equal(in_the_set[name], by_itself[name], equal_nan=numbers), name


def test_the_results_tables_neutralise_what_a_spreadsheet_would_run(tmp_path):
    """A set's free text (a phenomenon, the pieces a refusal quotes) reaches pairs.csv through csv_text."""
    line = IT_PAIR | {"id": "x", "target": "chien", "phenomenon": "=HYPERLINK(1)"}
    (tmp_path / "set.jsonl").write_text(json.dumps(line) + "\n")
    assert run_cli("patch-set", "--pairs", tmp_path / "set.jsonl", "--out", tmp_path / "run").returncode == 0
    table = (tmp_path / "run" / "pairs.csv").read_text()
    assert ",=HYPERLINK" not in table and "HYPERLINK" in table and "not written" in table
