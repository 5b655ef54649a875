"""Toolkits' files made to hang, exhaust or mislead a reader (issue 81's sixth red team): each refused in one line,
quickly and holding little, by the listing, the readers and the command line alike."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from fixtures.hostile_toolkits import (
    MADE,
    before_torch_1_6,
    copied,
    deep_option,
    eole_vocabulary,
    expanded_weights,
    huge_width,
    laughing_listing,
    laughing_options,
    linked_out,
    marian_bomb,
    naming_posix_system,
    rewritten_pt,
    set_option,
    shared_leaves,
    shared_option,
    vocabulary_pipe,
)
from fixtures.toolkit_outputs import FIXTURES
from helpers import measured, run_cli

from transformer.hugging_face import files
from transformer.io.checkpoint import APP_ROOM_BYTES, CheckpointError, CheckpointTooLarge
from transformer.toolkits import pickled
from transformer.toolkits.opening import describe_directory, load_any_checkpoint

REPOSITORY = Path(__file__).resolve().parents[2]


def listed_in_a_process(directory: Path) -> str:
    """The checkpoint list's label for `directory`, computed in a process of its own that is stopped after 60 s (an
    exponential label would hang this one)."""
    code = f"from pathlib import Path; from transformer.toolkits.opening import describe_directory as d; print(d(Path({str(directory)!r})))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60, cwd=REPOSITORY)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_listing_a_marian_folder_whose_decoder_yaml_holds_a_billion_laughs_says_so_at_once(tmp_path):
    """Listing the checkpoints labels each Marian folder from its decoder YAML: 484 bytes of nested aliases made its
    vocabulary names a string of 9^9 names, and every page of every visitor waited on it."""
    directory = laughing_listing(tmp_path)
    assert (directory / "model.npz.decoder.yml").stat().st_size < 600
    label = listed_in_a_process(directory)
    assert label.startswith("laughs.en-fr · Marian · not readable: model.npz.decoder.yml holds YAML"), label
    with measured() as cost, pytest.raises(CheckpointError, match=r"holds YAML aliases \(& or \*\)"):
        load_any_checkpoint(directory)
    assert cost.peak_growth_mb < 50, cost


@pytest.mark.parametrize("field", ["type", "transformer-heads"])
def test_aliases_in_a_marian_models_own_options_are_refused_unread(tmp_path, field):
    directory = laughing_options(tmp_path, field)
    with measured() as cost, pytest.raises(CheckpointError, match=r"special:model\.yml holds YAML aliases"):
        load_any_checkpoint(directory)
    assert cost.peak_growth_mb < 50, cost


@pytest.mark.parametrize(
    ("name", "pt", "option"),
    [
        ("fairseq-joined", "checkpoint_best.pt", "cfg.model.arch"),
        ("fairseq-joined", "checkpoint_best.pt", "cfg.task.source_lang"),
        ("opennmt.en-fr", "model.pt", "opt.encoder_type"),
    ],
)
def test_an_option_of_shared_references_expanding_past_billions_is_refused_in_one_line(tmp_path, name, pt, option):
    """A 290 KB file held a list of 4^16 leaves as one option: printing it in the refusal took minutes and 8 GB."""
    directory = shared_option(tmp_path, "fairseq" if name.startswith("fairseq") else "opennmt", option)
    assert (directory / pt).stat().st_size < 2 * (FIXTURES / name / pt).stat().st_size
    with measured() as cost, pytest.raises(CheckpointError, match="expand to over 16,777,216 items and characters"):
        load_any_checkpoint(directory)
    assert cost.peak_growth_mb < 100, cost
    shallow = copied(tmp_path, name, "shallow.en-fr")  # the same option of 16 leaves: read as any other value
    rewritten_pt(shallow / pt, lambda saved: set_option(saved, option, shared_leaves(2)))
    try:
        load_any_checkpoint(shallow)
    except CheckpointError as refused:
        assert "expand" not in str(refused) and len(str(refused)) < 400


def test_a_100000_deep_option_and_a_list_inside_itself_are_refused_in_one_line_not_a_traceback(tmp_path):
    """A 100,000-deep list as fairseq's arch ended in a RecursionError's traceback."""
    directory = deep_option(tmp_path)
    translated = run_cli("translate", "--checkpoint", str(directory), stdin="A dog.\n")
    assert translated.returncode == 2 and "nested over 100 deep" in translated.stderr
    assert len(translated.stderr.strip().splitlines()) == 1, translated.stderr
    itself: list = ["transformer"]
    itself.append(itself)
    rewritten_pt(directory / "checkpoint_best.pt", lambda saved: set_option(saved, "cfg.model.arch", itself))
    with pytest.raises(CheckpointError, match="a container inside itself"):
        load_any_checkpoint(directory)


def test_a_tensor_whose_strides_repeat_what_is_stored_is_refused_before_anything_is_built(tmp_path):
    """A 60 KB file of expanded tensors described a model of 0.47 billion parameters and was built (2.65 GB)."""
    directory = expanded_weights(tmp_path)
    with measured() as cost, pytest.raises(CheckpointError, match="480,000,000 elements on 4 stored bytes"):
        load_any_checkpoint(directory)
    assert cost.peak_growth_mb < 100, cost


@pytest.mark.parametrize(("name", "pt"), [("fairseq-joined", "checkpoint_best.pt"), ("opennmt.en-fr", "model.pt")])
def test_pickled_weights_are_held_to_the_memory_free_by_what_they_will_occupy_not_by_the_files_size(
    tmp_path, monkeypatch, name, pt
):
    """The file's size passed (twice it fits), the weights laid out from it did not: they are counted first."""
    size = (FIXTURES / name / pt).stat().st_size
    monkeypatch.setattr(pickled, "memory_available", lambda: APP_ROOM_BYTES + 3 * size)
    monkeypatch.setattr(files, "memory_available", lambda: APP_ROOM_BYTES + size // 4)
    with pytest.raises(CheckpointTooLarge, match=rf"^{pt}: its weights need 0\.\d+ GB of memory once laid out"):
        load_any_checkpoint(FIXTURES / name)


def test_a_posix_system_global_is_named_in_the_refusal(tmp_path):
    """A pickle naming posix.system was refused as "refused unread: " with nothing after it."""
    directory = naming_posix_system(tmp_path)
    with pytest.raises(CheckpointError, match=r"refused unread: Unsupported global: GLOBAL posix\.system$"):
        load_any_checkpoint(directory)


def test_a_file_of_torchs_format_before_1_6_is_refused_before_torch_reads_it(tmp_path, monkeypatch):
    """A 413-byte pickle declaring a 10 GB storage made torch reserve 10 GB before it refused it."""
    directory = before_torch_1_6(tmp_path)
    monkeypatch.setattr(pickled.torch, "load", lambda *a, **k: pytest.fail("torch read the file"))
    with pytest.raises(CheckpointError, match="format before torch 1.6 .* save it again"):
        load_any_checkpoint(directory)


@pytest.mark.parametrize(
    ("name", "pattern"),
    [("fairseq-joined", "checkpoint_best.pt"), ("marian-untied", "model.npz"), ("opennmt.en-fr", "model.pt")],
)
def test_a_file_found_by_its_kind_through_a_link_out_of_the_folder_is_refused_unread(tmp_path, name, pattern):
    """A reader's fixed names were confined to the folder, the files it found by kind (any .pt, any .npz) were not:
    a model placed elsewhere translated."""
    directory = linked_out(tmp_path, name, pattern)
    with pytest.raises(CheckpointError, match="a link that leads out of the directory"):
        load_any_checkpoint(directory)
    assert "not readable" in describe_directory(directory) or "no checkpoint" in describe_directory(directory)


def test_a_marian_archive_of_an_array_no_model_has_is_refused_before_any_array_is_read(tmp_path):
    """9 MB unpacking to 2 GB of zeros was read whole before "unexpected array 'zzz_bomb'"."""
    directory = marian_bomb(tmp_path)
    assert (directory / "model.npz").stat().st_size < 2e6
    with measured() as cost, pytest.raises(CheckpointError, match="unexpected array 'zzz_bomb'"):
        load_any_checkpoint(directory)
    assert cost.peak_growth_mb < 100, cost


def test_a_marian_archive_larger_than_the_model_its_options_describe_is_refused_unread(tmp_path):
    directory = copied(tmp_path, "marian-tied")
    arrays = dict(np.load(directory / "model.npz"))
    arrays["encoder_l1_ffn_W1"] = np.zeros((32, 200_000), np.float32)  # a known name, of a model 3,000 times wider
    np.savez_compressed(directory / "model.npz", **arrays)
    with measured() as cost, pytest.raises(CheckpointError, match="declares [0-9,]+ numbers, more than the"):
        load_any_checkpoint(directory)
    assert cost.peak_growth_mb < 20, cost


def test_an_eole_vocabulary_larger_than_its_config_declares_is_refused_unread(tmp_path, monkeypatch):
    """3.6 million pieces (60 MB) were parsed in full before they were refused: 17 s and 1 GB."""
    directory = eole_vocabulary(tmp_path)
    parse = json.loads
    monkeypatch.setattr(json, "loads", lambda text, **k: parse(text) if len(text) < 1e6 else pytest.fail("parsed"))
    with pytest.raises(CheckpointError, match="more than the 2,000 pieces config.json declares"):
        load_any_checkpoint(directory)


def test_an_eole_folder_whose_vocabulary_is_a_pipe_is_refused_as_an_eole_folder(tmp_path):
    """It was called "not a Hugging Face model directory"."""
    directory = vocabulary_pipe(tmp_path)
    with pytest.raises(CheckpointError, match="vocab.json in pipe.en-fr is not a regular file: refused"):
        load_any_checkpoint(directory)


def test_an_eole_width_of_4299_digits_is_refused_as_not_an_integer_of_a_size_read(tmp_path):
    """It was refused for "embeddings of another width than the layers'"."""
    directory = huge_width(tmp_path)
    with pytest.raises(
        CheckpointError,
        match="config.json's encoder hidden_size is an integer of about 4,299 digits, not an integer from 1",
    ):
        load_any_checkpoint(directory)


@pytest.mark.parametrize("made", [m for m in MADE if m.make.__name__.startswith("ct2_")], ids=lambda m: m.make.__name__)
def test_a_hostile_ctranslate2_model_bin_is_refused_in_one_line_quickly_holding_little(tmp_path, made):
    directory = made.make(tmp_path)
    started = time.perf_counter()
    with measured() as cost, pytest.raises(CheckpointError, match=re.escape(made.refusal)) as refused:
        load_any_checkpoint(directory)
    assert time.perf_counter() - started < 5 and cost.peak_growth_mb < 100 and "\n" not in str(refused.value)
    assert "· CTranslate2 · not readable: " in describe_directory(directory)


@pytest.mark.parametrize("made", MADE, ids=lambda made: made.make.__name__)
def test_each_hostile_folder_is_refused_in_one_line_by_the_command_line_saying_what_the_benchmark_expects(
    tmp_path, made
):
    done = run_cli("translate", "--checkpoint", made.make(tmp_path), stdin="A dog.\n")
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and made.refusal in done.stderr, done.stderr


def test_the_shipped_fixtures_still_open_after_every_check():
    for name in ("fairseq-joined", "opennmt.en-fr", "marian-prenorm", "eole-separate.en-fr"):
        assert load_any_checkpoint(FIXTURES / name).config.d_model > 0
