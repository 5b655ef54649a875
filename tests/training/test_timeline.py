"""How a run learned: the timeline of its epoch checkpoints, its file, its measures and the command that writes it."""

from __future__ import annotations

import csv
import json
import pickle
from dataclasses import replace

import numpy as np
import pytest
import torch
from helpers import reversal_settings, tiny_trained_config, with_metadata

from transformer.analysis.timeline import KINDS, SETTLED_BELOW, Timeline
from transformer.cli import main
from transformer.decoding.forcing import teacher_force
from transformer.io.average import average_checkpoints
from transformer.io.checkpoint import load_checkpoint, save_checkpoint
from transformer.io.header import read_header
from transformer.io.timeline_file import TimelineError, load_timeline, load_timeline_bytes, timeline_bytes
from transformer.model.encoder_decoder import Transformer
from transformer.model.kinds import AttentionKind
from transformer.training.snapshots import timeline_of_run, untrained_like
from transformer.training.train import epoch_path, train

PROBES = [("a b c d", "d c b a"), ("red blue green", "green blue red")]


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A three-epoch run of the reversal task keeping every epoch's checkpoint; its probes and hand alignments."""
    directory = tmp_path_factory.mktemp("run")
    settings = reversal_settings(directory, model=tiny_trained_config(n_decoder_layers=2), epochs=3, keep_last=3)
    train(settings, quiet=True)
    (directory / "probes.src").write_text("".join(f"{source}\n" for source, _ in PROBES))
    (directory / "probes.ref").write_text("".join(f"{reference}\n" for _, reference in PROBES))
    sources = (directory / "s.txt").read_text().splitlines()[:12]
    targets = [" ".join(reversed(line.split())) for line in sources]  # word i of n is target word n - 1 - i
    (directory / "a.src").write_text("\n".join(sources) + "\n")
    (directory / "a.tgt").write_text("\n".join(targets) + "\n")
    (directory / "a.gold").write_text(
        "".join(
            " ".join(f"{i}-{len(line.split()) - 1 - i}" for i in range(len(line.split()))) + "\n" for line in sources
        )
    )
    return directory, [epoch_path(settings.out, epoch) for epoch in (1, 2, 3)], settings


@pytest.fixture(scope="module")
def written(run):
    """The timeline the command line writes for the run (with its untrained start), and its CSV table."""
    directory, files, _ = run
    out, table = directory / "timeline.safetensors", directory / "timeline.csv"
    code = main(
        [
            "timeline",
            *map(str, files),
            "--src",
            str(directory / "probes.src"),
            "--ref",
            str(directory / "probes.ref"),
            "--align",
            *(str(directory / f"a.{n}") for n in ("src", "tgt", "gold")),
            "--untrained-seed",
            "1",
            "--out",
            str(out),
            "--table",
            str(table),
        ]
    )
    assert code == 0
    return load_timeline(out), list(csv.DictReader(table.open(encoding="utf-8")))


def test_the_last_snapshot_holds_the_checkpoints_own_maps(run, written):
    timeline, _ = written
    last = load_checkpoint(run[1][-1])
    assert [s.label for s in timeline.snapshots] == ["before training", "epoch 1", "epoch 2", "epoch 3"]
    assert [s.file for s in timeline.snapshots] == ["", *(path.name for path in run[1])]
    for probe, (source, reference) in zip(timeline.probes, PROBES):
        forced = teacher_force(last.model, last.tokenizer, source, reference)
        assert probe.tgt_pieces == forced.tgt_pieces and probe.src_pieces == forced.src_pieces
        for kind in KINDS:
            np.testing.assert_allclose(probe.maps[kind][-1], forced.maps(kind).numpy(), atol=1e-3, rtol=1e-3)
        np.testing.assert_allclose(probe.token_probs[-1], forced.token_probs.numpy(), rtol=1e-6)
        np.testing.assert_array_equal(probe.lens_rank[-1], forced.lens.chosen_rank.numpy())
    assert all(s.val_bleu is not None for s in timeline.snapshots[1:]) and timeline.snapshots[0].val_bleu is None
    assert [s.epoch for s in timeline.snapshots] == [0, 1, 2, 3]
    assert timeline.loss_curve.size > 0


def test_every_snapshot_after_the_first_learned_something(written):
    """The untrained start spreads its attention and gives the references next to nothing; training changes both."""
    timeline, _ = written
    probability = np.array([[p.token_probs[e].mean() for p in timeline.probes] for e in range(4)]).mean(1)
    assert probability[-1] > 2 * probability[0]
    distance = timeline.distance[AttentionKind.CROSS]
    assert (distance[-1] == 0).all() and distance[0].mean() > distance[-2].mean()


def test_the_aer_of_every_snapshot_equals_aligns_on_its_checkpoint(run, written, tmp_path):
    """Each epoch's AER per head is what `align` reports for that epoch's checkpoint, read the same way."""
    directory, files, _ = run
    timeline, _ = written
    measure, convention, extraction = timeline.aer_method.split(" over ")[0].split(" · ")
    for e, path in enumerate(files, 1):
        table = tmp_path / f"align{e}.csv"
        assert (
            main(
                [
                    "align",
                    "--checkpoint",
                    str(path),
                    *("--src", str(directory / "a.src")),
                    *("--tgt", str(directory / "a.tgt"), "--gold", str(directory / "a.gold")),
                    "--table",
                    str(table),
                ]
            )
            == 0
        )
        rows = [
            r
            for r in csv.DictReader(table.open())
            if (r["method"], r["convention"], r["extraction"]) == (measure, convention, extraction) and r["layer"]
        ]
        assert len(rows) == timeline.aer.shape[1] * timeline.aer.shape[2]
        for row in rows:
            head = timeline.aer.shape[2] - 1 if row["head"] == "mean" else int(row["head"]) - 1
            assert timeline.aer[e, int(row["layer"]) - 1, head] == pytest.approx(float(row["aer"]), abs=1e-6)


def test_the_csv_has_a_row_per_snapshot_kind_layer_and_head(written):
    timeline, rows = written
    heads = timeline.entropy[AttentionKind.CROSS].shape[2]
    assert len(rows) == 4 * heads * (1 + 2 + 2)  # 1 encoder layer, 2 decoder layers, 2 of them cross
    cross = [r for r in rows if r["kind"] == "cross"]
    assert all(r["aer"] != "" for r in cross) and all(r["aer"] == "" for r in rows if r["kind"] != "cross")
    assert {r["settled_at"] for r in rows} <= {s.label for s in timeline.snapshots}


def test_a_head_settles_where_its_distance_stays_under_the_threshold(written):
    timeline, _ = written
    low, high = SETTLED_BELOW / 2, SETTLED_BELOW * 4
    distance = np.array([high, low, high, 0.0])[:, None, None] * np.ones((1, 1, 2))  # close at 1, not after it
    distance[:, 0, 1] = [high, low, low, 0.0]
    changed = Timeline(
        timeline.model, timeline.snapshots, timeline.probes, timeline.entropy, {kind: distance for kind in KINDS}
    )
    assert changed.settled_at(AttentionKind.CROSS).tolist() == [[3, 1]]


def test_a_timeline_reads_back_as_it_was_written(written):
    timeline, _ = written
    again = load_timeline_bytes(timeline_bytes(timeline))
    assert again.snapshots == timeline.snapshots and again.aer_method == timeline.aer_method
    for kind in KINDS:
        np.testing.assert_array_equal(again.distance[kind], timeline.distance[kind])
        np.testing.assert_array_equal(again.probes[1].maps[kind], timeline.probes[1].maps[kind])
    assert again.probes[0].outputs == timeline.probes[0].outputs


def test_a_new_timeline_reads_the_probes_of_the_one_it_replaces(run, written, tmp_path, capsys):
    """A new default's timeline is read on the probes of the shipped one (`--probes-from`), without their files."""
    directory, files, _ = run
    out = tmp_path / "again.safetensors"
    assert (
        main(["timeline", str(files[-1]), "--probes-from", str(directory / "timeline.safetensors"), "--out", str(out)])
        == 0
    )
    again = load_timeline(out)
    assert [(p.source, p.reference) for p in again.probes] == [(p.source, p.reference) for p in written[0].probes]
    assert main(["timeline", str(files[-1]), "--src", str(directory / "probes.src")]) == 2
    assert "--src needs --ref" in capsys.readouterr().err


def test_checkpoints_of_different_runs_are_refused_in_one_line(run, checkpoint_path):
    with pytest.raises(ValueError, match="not of the same run") as refused:
        timeline_of_run([run[1][0], checkpoint_path], PROBES[:1])
    assert "\n" not in str(refused.value)


def test_an_epoch_trained_with_another_dropout_is_of_the_same_run(run, tmp_path):
    """A run continued on a GPU with dropout 0.1 after CPU epochs without is one model: its timeline and its mean
    are made (they were refused as of another run)."""
    last = load_checkpoint(run[1][-1])
    other = tmp_path / "m-epoch4.safetensors"
    config = replace(last.config, dropout=0.3 if last.config.dropout != 0.3 else 0.0)
    model = Transformer(config)
    model.load_state_dict(last.model.state_dict())
    save_checkpoint(other, model, last.tokenizer, last.metadata)
    assert load_checkpoint(other).config.dropout == config.dropout
    assert len(timeline_of_run([run[1][0], other], PROBES[:1]).snapshots) == 2
    assert average_checkpoints([run[1][0], other]).config.same_model(config)
    assert not config.same_model(replace(config, d_ff=64))


def _with_description(data: bytes, change) -> bytes:
    """The file with its description changed by `change` (the tensors left as they are)."""
    description = json.loads(read_header(data)["__metadata__"]["timeline"])
    change(description)
    return with_metadata(data, timeline=json.dumps(description))


def _with_nan_weights(data: bytes) -> bytes:
    length = int.from_bytes(data[:8], "little")
    start = read_header(data)["probe.0.cross"]["data_offsets"][0] + 8 + length
    return data[:start] + b"\x00\x7e" + data[start + 2 :]  # float16 NaN


HOSTILE = {
    "a pickle": lambda data: pickle.dumps({"timeline": data}),
    "truncated": lambda data: data[: len(data) // 2],
    "a probe claiming 1,000 pieces": lambda data: _with_description(
        data, lambda d: d["probes"][0].update(src_pieces=["x"] * 1000)
    ),
    "pieces that are not texts": lambda data: _with_description(
        data, lambda d: d["probes"][0].update(tgt_pieces=[{"a": 1}])
    ),
    "a million heads": lambda data: _with_description(data, lambda d: d.update(heads=10**6)),
    "another format": lambda data: data.replace(b"transformer-explorer-timeline", b"transformer-explorer-timeliNe"),
    "nested description": lambda data: _with_description(data, lambda d: d.update(model=[[[[]]]])),
    "NaN weights": _with_nan_weights,
    "a step of 10^30": lambda data: _with_description(data, lambda d: d["snapshots"][0].update(step=10**30)),
    "a 5 MB description": lambda data: _with_description(data, lambda d: d.update(padding="x" * 5_000_000)),
}


@pytest.mark.parametrize("name", HOSTILE)
def test_a_hostile_timeline_is_refused_in_one_line(written, name):
    with pytest.raises(TimelineError) as refused:
        load_timeline_bytes(HOSTILE[name](timeline_bytes(written[0])))
    assert "\n" not in str(refused.value) and len(str(refused.value)) < 300


def test_a_checkpoint_is_no_timeline(checkpoint_path):
    with pytest.raises(TimelineError, match="not a timeline"):
        load_timeline(checkpoint_path)


def test_the_run_keeps_its_start_and_the_untrained_seed_rebuilds_it(run):
    """`train --keep-last` keeps the untrained model (epoch 0): a timeline's first point is the run's own start, and
    `--untrained-seed` with the run's seed rebuilds those very weights for a run that did not keep them."""
    directory, files, settings = run
    start = epoch_path(settings.out, 0)
    timeline = timeline_of_run([start, files[-1]], PROBES[:1])
    assert [s.label for s in timeline.snapshots] == ["before training", "epoch 3"]
    saved = load_checkpoint(start).model.state_dict()
    rebuilt = untrained_like(load_checkpoint(files[-1]), settings.seed).state_dict()
    assert saved.keys() == rebuilt.keys() and all(torch.equal(saved[name], rebuilt[name]) for name in saved)


def test_a_probe_longer_than_the_model_reads_is_named_shortened(run):
    """A 100 KB probe was repeated back in full."""
    with pytest.raises(ValueError, match="longer than the model reads") as refused:
        timeline_of_run([run[1][0]], [("the dog runs " * 3000, "le chien")])
    assert len(str(refused.value)) < 200
