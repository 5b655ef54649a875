"""Hugging Face Marian models, imported: logits, every attention map and greedy output equal transformers' own.

Offline: a small random MarianMTModel and two tiny SentencePiece models are made here and saved the way
Hugging Face saves them; nothing is downloaded.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
import sentencepiece as spm
import torch
from fixtures.hf_models import EditedCopy, hf_greedy, save_marian, weights_as_a_pickle
from helpers import assert_same_as_transformers, make_sentences, open_on_every_page, weights_megabytes
from transformers import MarianMTModel, MarianTokenizer

from transformer.decoding.greedy import decode_with_chooser
from transformer.decoding.strategies import DecodeSettings, decode_text
from transformer.hugging_face.marian import import_marian
from transformer.io.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from transformer.model.masks import padding_mask

SOURCE_WORDS = "the a dog cat man woman runs jumps red blue park ball".split()
TARGET_WORDS = "le la chien chat homme femme court saute rouge bleu parc balle".split()


def _sentences(words: list[str], seed: int) -> list[str]:
    sentences = [" ".join(s.split()) for s in make_sentences(300, seed=seed)]
    return [
        " ".join(words[SOURCE_WORDS.index(w) % len(words)] if w in SOURCE_WORDS else w for w in s.split())
        for s in sentences
    ]


@pytest.fixture(scope="module")
def marian_dir(tmp_path_factory):
    """A saved random Marian model (swish, scaled embeddings, a final logits bias) with its tokenizer files."""
    directory = tmp_path_factory.mktemp("opus-mt-en-fr")
    return save_marian(directory, _sentences(SOURCE_WORDS, 1), _sentences(TARGET_WORDS, 2))


@pytest.fixture(scope="module")
def hugging_face(marian_dir):
    return MarianMTModel.from_pretrained(
        marian_dir, attn_implementation="eager"
    ).eval(), MarianTokenizer.from_pretrained(marian_dir)


SENTENCES = ["the red dog runs", "a woman jumps in the blue park", ">>fra<< the cat"]


@pytest.mark.parametrize("sentence", SENTENCES)
def test_logits_and_every_attention_map_equal_transformers(marian_dir, hugging_face, sentence):
    hf_model, hf_tokenizer = hugging_face
    ours = import_marian(marian_dir)
    src_ids = hf_tokenizer(sentence)["input_ids"]
    result = decode_with_chooser(ours.model, ours.tokenizer, sentence)
    assert result.src_ids == src_ids  # the same pieces, ids, language code and </s>
    decoder_input = [ours.config.pad_id, 7, 12, 5]
    assert_same_as_transformers(ours.model, hf_model, src_ids, decoder_input)


@pytest.mark.parametrize("sentence", SENTENCES)
def test_greedy_decoding_equals_generate(marian_dir, hugging_face, sentence):
    hf_model, hf_tokenizer = hugging_face
    ours = import_marian(marian_dir)
    settings = DecodeSettings(max_new_tokens=12)
    result = decode_text(ours.model, ours.tokenizer, sentence, settings)
    src_ids = hf_tokenizer(sentence)["input_ids"]
    generated = hf_greedy(hf_model, src_ids, 12, bad_words_ids=None, forced_eos_token_id=None)
    assert [ours.config.pad_id, *result.tgt_ids] == generated
    assert result.text == hf_tokenizer.decode(generated, skip_special_tokens=True)


def test_the_imported_file_round_trips_and_follows_the_format(marian_dir, tmp_path):
    from numpy_reference import ReferenceModel

    save_checkpoint(
        tmp_path / "marian.safetensors", import_marian(marian_dir).model, import_marian(marian_dir).tokenizer
    )
    loaded = load_checkpoint(tmp_path / "marian.safetensors")
    assert loaded.config.sinusoid_layout == "halves" and loaded.config.activation == "swish"
    assert loaded.tokenizer.same_as(import_marian(marian_dir).tokenizer)
    for sentence in SENTENCES:
        reference = ReferenceModel(str(tmp_path / "marian.safetensors")).greedy(sentence)
        result = decode_with_chooser(loaded.model, loaded.tokenizer, sentence)
        assert reference["tgt_ids"] == result.tgt_ids
        np.testing.assert_allclose(reference["cross"], result.cross.numpy(), atol=1e-5)
    assert padding_mask(torch.tensor([[1, 2]]), 0).all()


def test_what_the_format_cannot_hold_is_named(marian_dir, tmp_path):

    copy = EditedCopy(marian_dir, tmp_path / "separate")
    broken = copy.path
    copy.with_fields(share_encoder_decoder_embeddings=False)
    with pytest.raises(CheckpointError, match="separate source and target vocabularies"):
        import_marian(broken)
    copy.with_fields()
    weights_as_a_pickle(broken)
    with pytest.raises(CheckpointError, match="pytorch_model.bin is a pickle and is not read"):
        import_marian(broken)
    with pytest.raises(CheckpointError, match="not a Hugging Face Marian model directory"):
        import_marian(tmp_path)


def test_the_command_line_converts_a_directory_and_reads_one_directly(marian_dir, tmp_path, capsys):
    from transformer.cli import main

    out = tmp_path / "opus.safetensors"
    assert main(["import-hf", str(marian_dir), "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out and load_checkpoint(out).config.decoder_start_id is not None
    for checkpoint in (str(out), str(marian_dir)):
        assert (
            main(["inspect", "--checkpoint", checkpoint, "--text", "the dog runs", "--out", str(tmp_path / "m.npz")])
            == 0
        )
    assert np.load(tmp_path / "m.npz")["cross"].shape[:2] == (2, 4)


def test_a_marian_directory_among_the_checkpoints_works_on_every_page(marian_dir, tmp_path, monkeypatch):
    at = open_on_every_page(
        marian_dir,
        tmp_path,
        monkeypatch,
        f"{marian_dir.name} · en→fr · Hugging Face Marian · {weights_megabytes(marian_dir)}",
    )
    sidebar = " ".join(caption.value for caption in at.sidebar.caption)
    assert "Imported from Hugging Face Marian, translating en→fr" in sidebar and "Trained to" not in sidebar


def _copy(marian_dir, tmp_path, name="hostile"):
    import shutil

    copy = tmp_path / name
    shutil.copytree(marian_dir, copy)
    return copy


def _hostile(marian_dir, tmp_path, kind: str):
    """A copy of the model directory with one file made hostile as the red team made it."""
    import os

    directory = _copy(marian_dir, tmp_path, kind)
    deep = "[" * 100_000 + "]" * 100_000
    if kind == "deep-config":
        (directory / "config.json").write_text(deep)
    elif kind == "deep-tokenizer-config":
        (directory / "tokenizer_config.json").write_text(deep)
    elif kind == "config-to-dev-zero":
        (directory / "config.json").unlink()
        (directory / "config.json").symlink_to("/dev/zero")
    elif kind == "tokenizer-config-pipe":
        (directory / "tokenizer_config.json").unlink()
        os.mkfifo(directory / "tokenizer_config.json")
    elif kind == "vocab-pipe":
        (directory / "vocab.json").unlink()
        os.mkfifo(directory / "vocab.json")
    elif kind == "vocab-link-out":
        outside = tmp_path / f"{kind}-vocab.json"
        outside.write_bytes((directory / "vocab.json").read_bytes())
        (directory / "vocab.json").unlink()
        (directory / "vocab.json").symlink_to(outside)
    elif kind == "huge-config":
        config = json.loads((directory / "config.json").read_text())
        (directory / "config.json").write_text(json.dumps(config | {"padding": "x" * (2 << 20)}))
    elif kind == "digits-config":  # past Python's 4,300 digits: a plain ValueError from the JSON reader
        text = (directory / "config.json").read_text().rstrip()
        (directory / "config.json").write_text(text[:-1] + ', "max_length": ' + "9" * 5000 + "}")
    elif kind == "list-in-config":  # a size that is no number
        config = json.loads((directory / "config.json").read_text())
        (directory / "config.json").write_text(json.dumps(config | {"d_model": [0]}))
    return directory


HOSTILE = ["deep-config", "deep-tokenizer-config", "config-to-dev-zero", "tokenizer-config-pipe", "vocab-pipe",
           "vocab-link-out", "huge-config", "digits-config", "list-in-config"]  # fmt: skip


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_hostile_marian_directory_is_refused_or_read_safely_in_seconds(marian_dir, tmp_path, kind):
    import subprocess
    import sys

    from helpers import REPO

    directory = _hostile(marian_dir, tmp_path, kind)
    # In a child process with a deadline: a pipe or /dev/zero read as a file would hang or fill the memory.
    code = (
        "import sys; from pathlib import Path\n"
        "from transformer.hugging_face.directory import describe_hf, import_hf, is_hf_directory\n"
        "from transformer.io.checkpoint import CheckpointError\n"
        "d = Path(sys.argv[1]); print(is_hf_directory(d)); print(describe_hf(d))\n"
        "try:\n    import_hf(d); print('imported')\n"
        "except CheckpointError as error:\n    print('refused:', error)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(directory)], capture_output=True, text=True, timeout=60, cwd=REPO
    )
    assert done.returncode == 0 and "Traceback" not in done.stderr, done.stderr
    listed, label, outcome = done.stdout.splitlines()
    if kind == "deep-tokenizer-config" or kind == "tokenizer-config-pipe":
        assert listed == "True" and outcome == "imported"  # the language pair is only a label: the name gives it
        assert label == f"{kind} · ?→? · Hugging Face Marian · {weights_megabytes(directory)}"
    else:
        assert outcome.startswith("refused:")
        reason = {
            "deep-config": "nested too deeply",
            "config-to-dev-zero": "leads out of the directory",
            "vocab-link-out": "leads out of the directory",
            "huge-config": "over 1 MB",
            "vocab-pipe": "not a regular file",
            "digits-config": "not JSON",
            "list-in-config": "d_model is [0], not an integer",
        }[kind]
        assert reason in outcome
    if kind in ("deep-config", "config-to-dev-zero", "huge-config", "digits-config", "list-in-config"):
        assert listed == "False"  # not offered in the checkpoint list at all


def test_a_hostile_directory_among_the_checkpoints_leaves_the_app_working(marian_dir, tmp_path, monkeypatch):
    import os
    import shutil

    from helpers import REPO, start

    import ui.services.models

    shutil.copy(REPO / "checkpoints" / "en-fr-captions.safetensors", tmp_path / "en-fr-captions.safetensors")
    for kind in HOSTILE:
        _hostile(marian_dir, tmp_path, kind)
    os.mkfifo(tmp_path / "fifo-file.safetensors")  # a checkpoint "file" whose header read would block every page
    (tmp_path / "dev-zero-file.safetensors").symlink_to("/dev/zero")
    monkeypatch.setattr(ui.services.checkpoints, "CHECKPOINT_DIR", tmp_path)
    monkeypatch.setattr(ui.services.checkpoints, "DEFAULT_CHECKPOINT", tmp_path / "en-fr-captions.safetensors")
    at = start()
    assert not at.exception
    options = at.selectbox(key="widget_checkpoint").options
    assert "deep-config" not in " ".join(options) and any("vocab-link-out" in option for option in options)
    assert not any(name in " ".join(options) for name in ("fifo-file", "dev-zero-file"))
    at.selectbox(key="widget_checkpoint").set_value("vocab-link-out").run()
    assert not at.exception  # refused with its reason on the page, not the generic error
    assert any("leads out of the directory" in error.value for error in at.error)


def _with_weights(directory, tensors):
    from safetensors.torch import save_file

    save_file(tensors, str(directory / "model.safetensors"), metadata={"format": "pt"})


@pytest.mark.parametrize(
    "damage, reason",
    [
        ("dropout", "config.json"),
        ("vocab-list", "vocab.json is not an object"),
        ("vocab-float-ids", "vocab.json is not an object"),
        ("index-without-map", "no weight_map"),
        ("index-list-map", "no weight_map"),
        ("index-shard-outside", "leads out of the directory"),
        ("weights-pickle", "not a safetensors file"),
        ("weights-zip", "not a safetensors file"),
        ("weights-empty", "not a safetensors file"),
        ("weights-int64", "weights must be F32, F16 or BF16"),
        ("weights-float8", "weights must be F32, F16 or BF16"),
        ("weights-truncated", "file truncated or corrupt"),
        ("weights-trailing", "tensor data covers"),
    ],
)
def test_a_damaged_marian_directory_is_one_clear_line(marian_dir, tmp_path, damage, reason):
    from safetensors.torch import load_file

    from transformer.cli import main

    directory = _copy(marian_dir, tmp_path, damage)
    config = json.loads((directory / "config.json").read_text())
    weights = load_file(str(directory / "model.safetensors"))
    index = {"weight_map": {name: "model-00001.safetensors" for name in weights}}
    if damage == "dropout":
        (directory / "config.json").write_text(json.dumps(config).replace('"dropout": 0.1', '"dropout": ' + "9" * 400))
    elif damage.startswith("vocab"):
        vocab = json.loads((directory / "vocab.json").read_text())
        (directory / "vocab.json").write_text(
            "[5, 6]" if damage == "vocab-list" else json.dumps({k: float(v) for k, v in vocab.items()})
        )
    elif damage.startswith("index"):
        (directory / "model.safetensors").rename(directory / "model-00001.safetensors")
        if damage == "index-without-map":
            index = {"metadata": {}}
        elif damage == "index-list-map":
            index = {"weight_map": list(weights)}
        else:
            (tmp_path / "outside.safetensors").write_bytes((directory / "model-00001.safetensors").read_bytes())
            index = {"weight_map": {name: "../outside.safetensors" for name in weights}}
        (directory / "model.safetensors.index.json").write_text(json.dumps(index))
    elif damage == "weights-pickle":
        (directory / "model.safetensors").write_bytes(b"\x80\x04\x95" + b"\x00" * 40)
    elif damage == "weights-zip":
        (directory / "model.safetensors").write_bytes(b"PK\x03\x04" + b"\x00" * 40)
    elif damage == "weights-empty":
        (directory / "model.safetensors").write_bytes(b"")
    elif damage == "weights-int64":
        _with_weights(directory, {k: v.to(torch.int64) for k, v in weights.items()})
    elif damage == "weights-float8":
        _with_weights(directory, {k: v.to(torch.float8_e4m3fn) for k, v in weights.items()})
    elif damage == "weights-truncated":  # each tensor is mapped from the file: one past its end is refused first
        (directory / "model.safetensors").write_bytes((directory / "model.safetensors").read_bytes()[:-100])
    elif damage == "weights-trailing":  # bytes no tensor accounts for, which safetensors refuses too
        (directory / "model.safetensors").write_bytes((directory / "model.safetensors").read_bytes() + b"\0" * 8)
    assert '"dropout": 0.1' in (marian_dir / "config.json").read_text()  # the damage above did replace something
    with pytest.raises(CheckpointError, match=reason):
        import_marian(directory)
    import contextlib
    import io as text_io

    errors = text_io.StringIO()
    with contextlib.redirect_stderr(errors):
        assert main(["import-hf", str(directory), "--out", str(tmp_path / "x.safetensors")]) == 2
    assert errors.getvalue().count("\n") == 1 and reason in errors.getvalue()


def test_a_vocabulary_with_a_start_piece_imports_to_a_file_that_loads(marian_dir, tmp_path):
    directory = _copy(marian_dir, tmp_path, "with-s")
    vocab = json.loads((directory / "vocab.json").read_text())
    vocab["<s>"] = vocab.pop(">>fra<<")  # same size, so the weights still fit
    (directory / "vocab.json").write_text(json.dumps(vocab))
    imported = import_marian(directory)
    assert imported.config.bos_id == vocab["<s>"] and imported.config.start_id == imported.config.pad_id
    out = tmp_path / "with-s.safetensors"
    save_checkpoint(out, imported.model, imported.tokenizer, imported.metadata)
    loaded = load_checkpoint(out)  # refused before: the file said bos = pad, its tokenizer said <s>
    assert (
        decode_text(loaded.model, loaded.tokenizer, "the red dog runs").tgt_ids
        == decode_text(imported.model, imported.tokenizer, "the red dog runs").tgt_ids
    )


def test_pieces_only_the_source_model_knows_decode_as_transformers_does(marian_dir, hugging_face):
    _, hf_tokenizer = hugging_face
    tokenizer = import_marian(marian_dir).tokenizer
    target = spm.SentencePieceProcessor()
    target.LoadFromSerializedProto((marian_dir / "target.spm").read_bytes())
    source_only = [
        i
        for i, piece in enumerate(tokenizer.pieces)
        if piece.startswith("▁") and len(piece) > 1 and target.PieceToId(piece) == target.unk_id()
    ]
    assert source_only, "the fixture's source model has pieces of its own"
    some_target = next(
        i
        for i, p in enumerate(tokenizer.pieces)
        if p.startswith("▁") and i not in source_only and target.PieceToId(p) != target.unk_id()
    )
    for ids in ([source_only[0], source_only[0]], [some_target, source_only[0], some_target], source_only[:5]):
        expected = hf_tokenizer.decode(ids, skip_special_tokens=True)
        assert tokenizer.decode(ids) == expected and "▁" not in tokenizer.decode(ids)


def test_a_directory_whose_weights_would_not_fit_in_free_memory_is_refused_saying_what_it_needs(
    marian_dir, monkeypatch
):
    """A directory is opened in place, whatever its size: NLLB-3.3B's 13.4 GB opened on a 24 GB machine. One that
    would not fit beside the app is refused before anything is laid out (a model past the memory was killed
    mid-import, and a server with it)."""
    import transformer.hugging_face.files as files
    from transformer.io.checkpoint import APP_ROOM_BYTES, CheckpointTooLarge

    weights = (marian_dir / "model.safetensors").stat().st_size
    monkeypatch.setattr(files, "memory_available", lambda: APP_ROOM_BYTES + weights // 2)
    with pytest.raises(CheckpointTooLarge, match=r"its weights need 0\.\d GB of memory .* GB is free now: not opened"):
        import_marian(marian_dir)
    monkeypatch.setattr(files, "memory_available", lambda: APP_ROOM_BYTES + 2 * weights)
    assert import_marian(marian_dir).model is not None


def test_a_config_of_nllb_3_3bs_size_is_accepted_and_an_absurd_one_refused():
    from transformer.model.config import ConfigError, TransformerConfig

    nllb = dict(src_vocab_size=256_206, tgt_vocab_size=256_206, n_heads=16, n_encoder_layers=24, n_decoder_layers=24)
    assert TransformerConfig(**nllb, d_model=2048, d_ff=8192).parameter_count() > 3.3e9
    with pytest.raises(ConfigError, match="over the limit"):
        TransformerConfig(**nllb, d_model=8192, d_ff=32768)
