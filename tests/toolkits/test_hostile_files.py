"""Toolkits' files made to hang, exhaust or mislead a reader (issue 81's sixth red team): each refused in one line,
quickly and holding little, by the listing, the readers and the command line alike."""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from fixtures.toolkit_outputs import FIXTURES
from helpers import measured, run_cli

from transformer.hugging_face import files
from transformer.io.checkpoint import APP_ROOM_BYTES, CheckpointError, CheckpointTooLarge
from transformer.toolkits import pickled
from transformer.toolkits.opening import describe_directory, load_any_checkpoint

REPOSITORY = Path(__file__).resolve().parents[2]


def copied(tmp_path: Path, name: str, to: str | None = None) -> Path:
    return Path(shutil.copytree(FIXTURES / name, tmp_path / (to or name)))


def billion_laughs(levels: int = 9, width: int = 9) -> list[str]:
    """YAML lines of `levels` anchors, each a list of `width` aliases of the one before: 9^9 leaves in 0.5 KB."""
    lines = ['l0: &l0 "vocab.spm"']
    lines += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * width)}]" for i in range(1, levels + 1)]
    return lines


def shared_leaves(levels: int, leaf: object = "en", width: int = 4) -> list:
    """A list of width^levels leaves, each level one list referenced `width` times: a pickle keeps the sharing."""
    value = leaf
    for _ in range(levels):
        value = [value] * width
    return value  # type: ignore[return-value]


def rewritten_pt(path: Path, change) -> None:
    """The toolkit's checkpoint saved again after `change(saved)` (torch.save keeps shared references)."""
    saved = torch.load(path, map_location="cpu", weights_only=False)
    change(saved)
    torch.save(saved, path)


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
    directory = copied(tmp_path, "marian-untied")
    text = "\n".join([*billion_laughs(), "vocabs: [*l9, *l9]"]) + "\n"
    assert len(text) < 600
    (directory / "model.npz.decoder.yml").write_text(text)
    label = listed_in_a_process(directory)
    assert label.startswith("marian-untied · Marian · not readable: model.npz.decoder.yml holds YAML aliases"), label
    with measured() as cost, pytest.raises(CheckpointError, match=r"holds YAML aliases \(& or \*\)"):
        load_any_checkpoint(directory)
    assert cost.peak_growth_mb < 50, cost


def marian_with_options(directory: Path, change) -> None:
    """The folder's model.npz with its options' YAML text changed by `change(lines)`."""
    arrays = dict(np.load(directory / "model.npz"))
    lines = arrays["special:model.yml"].tobytes().rstrip(b"\0").decode().splitlines()
    arrays["special:model.yml"] = np.frombuffer("\n".join(change(lines)).encode() + b"\0", dtype=np.int8)
    np.savez(directory / "model.npz", **arrays)


@pytest.mark.parametrize("field", ["type", "transformer-heads"])
def test_aliases_in_a_marian_models_own_options_are_refused_unread(tmp_path, field):
    directory = copied(tmp_path, "marian-tied")
    marian_with_options(
        directory,
        lambda lines: [
            *billion_laughs(),
            *(f"{field}: *l9" if line.startswith(f"{field}:") else line for line in lines),
        ],
    )
    with measured() as cost, pytest.raises(CheckpointError, match=r"special:model\.yml holds YAML aliases"):
        load_any_checkpoint(directory)
    assert cost.peak_growth_mb < 50, cost


def set_option(saved: dict, path: str, value: object) -> None:
    """Sets cfg.model.arch (dots between a dict's keys or a Namespace's attributes) in a loaded checkpoint."""
    *parents, last = path.split(".")
    holder = saved
    for name in parents:
        holder = vars(holder)[name] if isinstance(holder, argparse.Namespace) else holder[name]
    if isinstance(holder, argparse.Namespace):
        setattr(holder, last, value)
    else:
        holder[last] = value


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
    directory = copied(tmp_path, name, "model.en-fr")
    rewritten_pt(directory / pt, lambda saved: set_option(saved, option, shared_leaves(16)))
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


def with_pickle_ops(path: Path, option: str, ops: bytes) -> None:
    """The checkpoint with cfg.model's `option` made of these pickle opcodes (which torch.save could not write: its
    pickler recurses), written into the zip's data.pkl in place of a placeholder string."""
    rewritten_pt(path, lambda saved: set_option(saved, f"cfg.model.{option}", "PLACEHOLDER"))
    with zipfile.ZipFile(path) as archive:
        members = {info.filename: archive.read(info) for info in archive.infolist()}
    (pkl,) = [name for name in members if name.endswith("/data.pkl")]
    placeholder = b"X\x0b\x00\x00\x00PLACEHOLDER"  # BINUNICODE, protocol 2
    assert members[pkl].count(placeholder) == 1
    members[pkl] = members[pkl].replace(placeholder, ops)
    with zipfile.ZipFile(path, "w", zipfile.ZIP_STORED) as archive:
        for name, data in members.items():
            archive.writestr(name, data)


def test_a_100000_deep_option_and_a_list_inside_itself_are_refused_in_one_line_not_a_traceback(tmp_path):
    """A 100,000-deep list as fairseq's arch ended in a RecursionError's traceback."""
    directory = copied(tmp_path, "fairseq-joined", "model.en-fr")
    depth = 100_000
    with_pickle_ops(directory / "checkpoint_best.pt", "arch", b"]" * (depth + 1) + b"a" * depth)  # [[[...]]]
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
    directory = copied(tmp_path, "fairseq-joined", "model.en-fr")
    name = "encoder.layers.0.fc1.weight"
    rewritten_pt(
        directory / "checkpoint_best.pt",
        lambda saved: saved["model"].__setitem__(name, torch.zeros(1, 1).expand(60_000, 8_000)),
    )
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
    directory = copied(tmp_path, "fairseq-joined", "model.en-fr")

    class Runs:
        def __reduce__(self):
            return (os.system, ("true",))

    torch.save({"model": {}, "cfg": {"task": Runs()}}, directory / "checkpoint_best.pt")
    with pytest.raises(CheckpointError, match=r"refused unread: Unsupported global: GLOBAL posix\.system$"):
        load_any_checkpoint(directory)


def test_a_file_of_torchs_format_before_1_6_is_refused_before_torch_reads_it(tmp_path, monkeypatch):
    """A 413-byte pickle declaring a 10 GB storage made torch reserve 10 GB before it refused it."""
    directory = copied(tmp_path, "fairseq-joined", "model.en-fr")
    saved = torch.load(directory / "checkpoint_best.pt", map_location="cpu", weights_only=False)
    torch.save(saved, directory / "checkpoint_best.pt", _use_new_zipfile_serialization=False)
    monkeypatch.setattr(pickled.torch, "load", lambda *a, **k: pytest.fail("torch read the file"))
    with pytest.raises(CheckpointError, match="format before torch 1.6 .* save it again"):
        load_any_checkpoint(directory)


def linked_out(directory: Path, pattern: str, outside: Path) -> None:
    """The one file of `directory` matching `pattern` moved outside it and linked back under another name."""
    (found,) = directory.glob(pattern)
    found.rename(outside / found.name)
    (directory / f"other{found.suffix}").symlink_to(outside / found.name)


@pytest.mark.parametrize(
    ("name", "pattern"),
    [("fairseq-joined", "checkpoint_best.pt"), ("marian-untied", "model.npz"), ("opennmt.en-fr", "model.pt")],
)
def test_a_file_found_by_its_kind_through_a_link_out_of_the_folder_is_refused_unread(tmp_path, name, pattern):
    """A reader's fixed names were confined to the folder, the files it found by kind (any .pt, any .npz) were not:
    a model placed elsewhere translated."""
    outside = tmp_path / "outside"
    outside.mkdir()
    directory = copied(tmp_path, name, "model.en-fr")
    linked_out(directory, pattern, outside)
    with pytest.raises(CheckpointError, match="a link that leads out of the directory"):
        load_any_checkpoint(directory)
    assert "not readable" in describe_directory(directory) or "no checkpoint" in describe_directory(directory)


def test_a_marian_archive_of_an_array_no_model_has_is_refused_before_any_array_is_read(tmp_path):
    """9 MB unpacking to 2 GB of zeros was read whole before "unexpected array 'zzz_bomb'"."""
    directory = copied(tmp_path, "marian-tied")
    with zipfile.ZipFile(directory / "model.npz", "a", compression=zipfile.ZIP_DEFLATED) as archive:
        with archive.open("zzz_bomb.npy", "w", force_zip64=True) as member:
            np.lib.format.write_array_header_1_0(member, {"descr": "<f4", "fortran_order": False, "shape": (2**27,)})
            for _ in range(2**9):
                member.write(bytes(2**20))
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
    directory = copied(tmp_path, "eole-shared.en-fr")
    vocab = json.loads((directory / "vocab.json").read_text())
    pieces = [f"▁p{i}" for i in range(400_000)]
    (directory / "vocab.json").write_text(json.dumps(vocab | {"src": vocab["src"] + pieces}))
    parse = json.loads
    monkeypatch.setattr(json, "loads", lambda text, **k: parse(text) if len(text) < 1e6 else pytest.fail("parsed"))
    with pytest.raises(CheckpointError, match="more than the 2,000 pieces config.json declares"):
        load_any_checkpoint(directory)


def test_an_eole_folder_whose_vocabulary_is_a_pipe_is_refused_as_an_eole_folder(tmp_path):
    """It was called "not a Hugging Face model directory"."""
    directory = copied(tmp_path, "eole-shared.en-fr")
    (directory / "vocab.json").unlink()
    os.mkfifo(directory / "vocab.json")
    with pytest.raises(CheckpointError, match="vocab.json in eole-shared.en-fr is not a regular file: refused"):
        load_any_checkpoint(directory)


def test_an_eole_width_of_4299_digits_is_refused_as_not_an_integer_of_a_size_read(tmp_path):
    """It was refused for "embeddings of another width than the layers'"."""
    directory = copied(tmp_path, "eole-shared.en-fr")
    text = (directory / "config.json").read_text().replace('"hidden_size": 32', '"hidden_size": ' + "9" * 4299)
    (directory / "config.json").write_text(text)
    with pytest.raises(
        CheckpointError,
        match="config.json's encoder hidden_size is an integer of about 4,299 digits, not an integer from 1",
    ):
        load_any_checkpoint(directory)


def test_the_shipped_fixtures_still_open_after_every_check():
    for name in ("fairseq-joined", "opennmt.en-fr", "marian-prenorm", "eole-separate.en-fr"):
        assert load_any_checkpoint(FIXTURES / name).config.d_model > 0
