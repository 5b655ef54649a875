"""Training at scale: weighted corpora, several validation sets, a vocabulary sample, ids prepared once,
progress with an estimate, kept epochs and checkpoint averaging, a dev set held out by source sentence."""

import gzip
import lzma
from collections import Counter

import pytest
import torch
from helpers import reversal_corpus, reversal_settings, run_cli, tiny_training_options

from transformer.io.checkpoint import CheckpointError, load_checkpoint
from transformer.io.metadata import read_metadata
from transformer.text.files import read_lines
from transformer.text.holdout import hold_out
from transformer.text.tokenizer import Tokenizer, train_tokenizer
from transformer.training.corpora import Corpus, epoch_indices, prepared_pairs, vocabulary_sample
from transformer.training.settings import TrainSettings
from transformer.training.train import train


def _corpora(tmp_path, *sizes):
    paths = []
    for index, size in enumerate(sizes):
        directory = tmp_path / f"corpus{index}"
        directory.mkdir()
        paths.append(reversal_corpus(directory, size, seed=index + 3))
    return paths


def _settings(tmp_path, corpora, weights=(), **overrides):
    """The reversal settings over these corpora, weighted, each a validation set too."""
    sources, targets = tuple(s for s, _ in corpora), tuple(t for _, t in corpora)
    paths = dict(train_src=sources, train_tgt=targets, val_src=sources, val_tgt=targets, train_weights=weights)
    return reversal_settings(tmp_path, **(paths | {"val_limit": 10} | overrides))


def test_an_epoch_reads_each_corpus_as_often_as_its_weight_says():
    drawn = epoch_indices([10, 20, 4], [2, 0.5, 1], seed=1, epoch=0)
    counts = Counter(drawn)
    assert all(counts[i] == 2 for i in range(10))
    assert sum(1 for i in range(10, 30) if counts[i]) == 10 and all(counts[i] <= 1 for i in range(10, 30))
    assert all(counts[i] == 1 for i in range(30, 34)) and len(drawn) == 20 + 10 + 4
    other_epoch = epoch_indices([10, 20, 4], [2, 0.5, 1], seed=1, epoch=1)
    assert set(drawn[20:30]) != set(other_epoch[20:30])  # a new half each epoch
    assert drawn == epoch_indices([10, 20, 4], [2, 0.5, 1], seed=1, epoch=0)  # and the same one on a resume
    assert epoch_indices([5], [1.0], seed=3, epoch=2) == list(range(5))  # one corpus of weight 1: the old order


def test_the_vocabulary_sample_follows_the_weights():
    big = ([f"big {i}" for i in range(1000)], [f"grand {i}" for i in range(1000)])
    small = ([f"small {i}" for i in range(100)], [f"petit {i}" for i in range(100)])
    sample = vocabulary_sample([big, small], [1, 10], size=400, seed=1)
    assert len(sample) == 400  # 200 pairs, both sides
    smalls = sum(text.startswith("small") for text in sample)
    assert smalls == 100  # the small corpus is read 10 times: half the mix, capped at its 100 pairs
    assert sum(text.startswith("big") for text in sample) == 100


def test_ids_are_prepared_once_and_again_when_a_file_changes(tmp_path, monkeypatch):
    (s1, t1), (s2, t2) = _corpora(tmp_path, 30, 20)
    tokenizer = train_tokenizer(read_lines(s1) + read_lines(t1), 40, "word")
    corpora = [Corpus(s1, t1), Corpus(s2, t2, 3.0)]
    cache = tmp_path / "ids.npz"
    first = prepared_pairs(tokenizer, corpora, 32, cache)
    assert [len(c) for c in first] == [30, 20] and cache.exists()
    monkeypatch.setattr(Tokenizer, "encode_many", lambda *_: pytest.fail("encoded again despite the cache"))
    assert prepared_pairs(tokenizer, corpora, 32, cache) == first
    monkeypatch.undo()
    with open(s2, "a") as handle:
        handle.write("\none two")  # a changed file is encoded anew, not read stale from the cache
    with open(t2, "a") as handle:
        handle.write("\ntwo one")
    assert [len(c) for c in prepared_pairs(tokenizer, corpora, 32, cache)] == [30, 21]
    cache.write_bytes(b"not a cache")  # a damaged cache is made again
    assert [len(c) for c in prepared_pairs(tokenizer, corpora, 32, cache)] == [30, 21]


def test_training_on_weighted_corpora_chooses_the_best_on_the_mean_of_its_validation_sets(tmp_path):
    corpora = _corpora(tmp_path, 60, 40)
    progress = train(_settings(tmp_path, corpora, weights=(1, 2.5), keep_last=1, epochs=3), quiet=True)
    record = progress.epochs[-1]  # both sets' files are named s.txt: told apart by their place
    assert record["val_bleu"] == pytest.approx((record["val_bleu 1:s"] + record["val_bleu 2:s"]) / 2)
    checkpoint = load_checkpoint(tmp_path / "m.safetensors")
    data = checkpoint.metadata["data"]
    assert data["train 1"]["lines"] == 60 and data["train 2"]["lines"] == 40 and data["train 2"]["weight"] == 2.5
    assert {"val 1", "val 2"} <= set(data)
    assert "100 sentence pairs" in read_metadata(checkpoint.metadata).trained_on
    kept = sorted(path.name for path in tmp_path.glob("m-epoch*.safetensors"))
    assert kept == ["m-epoch0.safetensors", "m-epoch3.safetensors"]  # --keep-last 1: the older epochs' models
    # removed, the untrained start kept (a timeline's first point)
    assert (tmp_path / "m.data.npz").exists()


def test_validation_sets_are_scored_each_and_averaged(tmp_path):
    (s1, t1), (s2, t2) = _corpora(tmp_path, 60, 40)
    settings = _settings(tmp_path, [(s1, t1)], val_src=(s1, t1), val_tgt=(t1, t1), epochs=1)
    record = train(settings, quiet=True).epochs[0]
    target_as_reference = record["val_bleu t"]  # a source's words reversed are far from the source itself
    assert record["val_bleu"] == pytest.approx((record["val_bleu s"] + target_as_reference) / 2)


def test_mismatched_corpus_lists_are_one_clear_error(tmp_path):
    with pytest.raises(ValueError, match="2 source files, 1 target files and 2 weights"):
        TrainSettings(train_src=("a", "b"), train_tgt=("c",), val_src="x", val_tgt="y", out="o", train_weights=(1, 2))
    with pytest.raises(ValueError, match="at least one validation set"):
        TrainSettings(train_src="a", train_tgt="b", val_src=(), val_tgt=(), out="o")
    with pytest.raises(ValueError, match="above 0"):
        TrainSettings(train_src="a", train_tgt="b", val_src="x", val_tgt="y", out="o", train_weights=(0,))


def test_the_command_line_trains_on_several_corpora_shows_time_left_and_averages(tmp_path):
    (s1, t1), (s2, t2) = _corpora(tmp_path, 60, 40)
    out = tmp_path / "m.safetensors"
    done = run_cli(
        "train",
        "--train-src",
        s1,
        s2,
        "--train-tgt",
        t1,
        t2,
        "--train-weights",
        "1",
        "2",
        "--val-src",
        s1,
        "--val-tgt",
        t1,
        "--out",
        str(out),
        *tiny_training_options(epochs=3, val_limit=10, keep_last=2, save_dtype="float32"),
    )
    assert done.returncode == 0, done.stderr
    assert "left=" in done.stderr and "tok_s=" in done.stderr
    epochs = [tmp_path / "m-epoch2.safetensors", tmp_path / "m-epoch3.safetensors"]
    averaged = tmp_path / "avg.safetensors"
    done = run_cli("average", *map(str, epochs), "--out", str(averaged), "--dtype", "float32")
    assert done.returncode == 0, done.stderr
    a, b = (load_checkpoint(path).model.state_dict() for path in epochs)
    mean = load_checkpoint(averaged)
    assert all(torch.allclose(mean.model.state_dict()[k], (a[k] + b[k]) / 2) for k in a)
    assert mean.metadata["averaged"] == ["m-epoch2.safetensors", "m-epoch3.safetensors"]
    other = tmp_path / "other.safetensors"
    done = run_cli(
        "train",
        "--train-src",
        s1,
        "--train-tgt",
        t1,
        "--val-src",
        s1,
        "--val-tgt",
        t1,
        "--out",
        str(other),
        *tiny_training_options(d_model=8, d_ff=16, epochs=1),
    )
    assert done.returncode == 0, done.stderr
    done = run_cli("average", str(epochs[0]), str(other), "--out", str(tmp_path / "x.safetensors"))
    assert done.returncode == 2 and "not the same model" in done.stderr and "Traceback" not in done.stderr


def test_averaging_needs_two_checkpoints(checkpoint_path):
    from transformer.io.average import average_checkpoints

    with pytest.raises(CheckpointError, match="at least two"):
        average_checkpoints([checkpoint_path])


def test_a_dev_set_is_held_out_by_source_sentence(tmp_path):
    src = ["I run.", "I run.", "Hello.", "Go.", "Go.", "Go.", "Stop.", "Wait."]
    tgt = ["Je cours.", "Je cours !", "Bonjour.", "Va.", "Allez.", "Pars.", "Arrête.", "Attends."]
    train_lines, dev_lines = hold_out(src, tgt, 2, seed=1)
    held = {src[i] for i in dev_lines}
    assert len(dev_lines) == 2 == len(held)
    assert not held & {src[i] for i in train_lines}  # no translation of a dev sentence is trained on
    assert len(train_lines) + sum(src.count(text) for text in held) == len(src)
    assert (train_lines, dev_lines) == hold_out(src, tgt, 2, seed=1)
    (tmp_path / "t.en.gz").write_bytes(gzip.compress("\n".join(src).encode()))
    (tmp_path / "t.fr.gz").write_bytes(gzip.compress("\n".join(tgt).encode()))
    done = run_cli(
        "holdout",
        "--src",
        str(tmp_path / "t.en.gz"),
        "--tgt",
        str(tmp_path / "t.fr.gz"),
        "--size",
        "2",
        "--out-dir",
        str(tmp_path / "split"),
    )
    assert done.returncode == 0, done.stderr
    assert len(read_lines(tmp_path / "split" / "t-dev.en.gz")) == 2
    assert read_lines(tmp_path / "split" / "t-train.fr.gz") == [tgt[i] for i in train_lines]


def test_xz_text_is_read_like_gzip(tmp_path):
    (tmp_path / "a.xz").write_bytes(lzma.compress(b"un\ndeux\n"))
    assert read_lines(tmp_path / "a.xz") == ["un", "deux"]
    (tmp_path / "b.xz").write_bytes(lzma.compress(b"x" * 100)[:20])
    with pytest.raises(ValueError, match="corrupt xz"):
        read_lines(tmp_path / "b.xz")
