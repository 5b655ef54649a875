"""CTranslate2 models read as data: our decode of each directory equals CTranslate2's own (`ctranslate2`, pinned in
requirements-dev.txt, run here on the same files): its greedy tokens, its log-probabilities (`score_batch`) and the
attention its translator returns (the last decoder layer's cross-attention, head 0, without the column of the `</s>`
it adds to the source).

The directories were made once by tests/fixtures/toolkits/make_ctranslate2.py with CTranslate2's own converters from
the OpenNMT-py and Marian fixtures: `argos-opennmt.en-fr` (an Argos Translate package, float32), `ct2-opennmt-int8` and
`ct2-opennmt-float16` (the same model), `ct2-marian.en-fr` (post-norm, a vocabulary a side, a decoder started from a
zero vector; the converter's sinusoids, not Marian's).
"""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path

import ctranslate2
import pytest
import torch
from ctranslate2.converters import MarianConverter
from ctranslate2.specs import model_spec
from fixtures.toolkit_outputs import FIXTURES, recorded
from helpers import open_on_every_page, run_cli

from transformer.decoding.strategies import DecodeSettings, decode_text
from transformer.io.checkpoint import load_checkpoint, model_from_tensors, unique_state
from transformer.toolkits.opening import describe_directory, is_model_directory, load_any_checkpoint

sys.path.insert(0, str(FIXTURES))  # the fixture script, for a variant of the Marian converter
from make_ctranslate2 import convert_marian  # noqa: E402

MAX_TOKENS = 60
SOURCES = [sentence["source"] for sentence in recorded("opennmt.en-fr")]


def translator(directory: Path, compute_type: str = "float32") -> ctranslate2.Translator:
    model = directory / "model" if (directory / "model").is_dir() else directory
    return ctranslate2.Translator(str(model), device="cpu", compute_type=compute_type, intra_threads=1)


def agreement(directory: Path, checkpoint, compute_type: str = "float32") -> tuple[int, float, float]:
    """How many of the 20 sentences our greedy decode writes as CTranslate2 does, and over those the largest
    difference of a token's log-probability and of the attention CTranslate2 returns."""
    ct2 = translator(directory, compute_type)
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    same, log_probability, attention = 0, 0.0, 0.0
    for source in SOURCES:
        pieces = tokenizer.processor.EncodeAsPieces(source)
        theirs = ct2.translate_batch([pieces], beam_size=1, max_decoding_length=MAX_TOKENS, return_attention=True)[0]
        ours = decode_text(model, tokenizer, source, DecodeSettings(max_new_tokens=MAX_TOKENS))
        written = [tokenizer.id_to_piece(i) for i in ours.tgt_ids if i != tokenizer.eos_id]
        if written != theirs.hypotheses[0]:
            continue
        same += 1
        scores = torch.tensor(ct2.score_batch([pieces], [written])[0].log_probs)  # each token's and </s>'s
        steps = min(len(scores), len(ours.token_probs))
        log_probability = max(log_probability, (ours.token_probs.log()[:steps] - scores[:steps]).abs().max().item())
        returned = torch.tensor(theirs.attention[0])
        mine = ours.cross[-1][0][: len(returned), : returned.shape[1]]
        attention = max(attention, (mine - returned).abs().max().item())
    return same, log_probability, attention


@pytest.mark.parametrize("name", ["argos-opennmt.en-fr", "ct2-marian.en-fr"])
def test_greedy_tokens_log_probabilities_and_attention_equal_ctranslate2s_own(name):
    checkpoint = load_any_checkpoint(FIXTURES / name)
    same, log_probability, attention = agreement(FIXTURES / name, checkpoint)
    assert same == 20 and log_probability < 1e-4 and attention < 1e-5, (same, log_probability, attention)
    assert checkpoint.metadata["languages"] == {"src": "en", "tgt": "fr"}


def test_the_marian_conversion_starts_from_a_zero_row_and_its_converters_sinusoids_not_marians():
    config = load_any_checkpoint(FIXTURES / "ct2-marian.en-fr").config
    assert (config.sinusoid_layout, config.sinusoid_frequencies, config.norm_first) == ("halves", "paper", False)
    assert config.start_id == config.tgt_vocab_size - 1 and config.activation == "swish"


@pytest.mark.parametrize("wrong", ["halves for interleaved", "the start token </s>"])
def test_the_check_has_teeth_a_wrong_reading_fails_it(wrong):
    checkpoint = load_any_checkpoint(FIXTURES / "argos-opennmt.en-fr")
    changed = {"sinusoid_layout": "halves"} if "halves" in wrong else {"decoder_start_id": checkpoint.config.eos_id}
    model, _ = model_from_tensors(
        dataclasses.replace(checkpoint.config, **changed), unique_state(checkpoint.model), "cpu"
    )
    misread = dataclasses.replace(checkpoint, model=model)
    same, _, _ = agreement(FIXTURES / "argos-opennmt.en-fr", misread)
    assert same < 10


class WithoutTables(MarianConverter):
    """CTranslate2's Marian converter leaving the position tables out: CTranslate2 then makes its own sinusoids."""

    def _load(self):
        spec = super()._load()
        for side in (spec.encoder, spec.decoder):
            side.position_encodings.encodings = model_spec.OPTIONAL
        return spec


def test_without_a_stored_table_ctranslate2s_own_sinusoids_from_position_1_are_read(tmp_path):
    directory = tmp_path / "generated.en-fr"
    convert_marian(FIXTURES / "marian-untied", directory, "float32", WithoutTables)
    checkpoint = load_any_checkpoint(directory)
    config = checkpoint.config
    assert (config.sinusoid_layout, config.sinusoid_frequencies, config.position_offset) == (
        "halves",
        "tensor2tensor",
        1,
    )
    same, log_probability, attention = agreement(directory, checkpoint)
    assert same == 20 and log_probability < 1e-4 and attention < 1e-5


def test_a_conversion_whose_vocabularies_have_pad_and_start_pieces_names_its_zero_start_row_apart(tmp_path):
    directory = tmp_path / "pad.en-fr"
    convert_marian(FIXTURES / "marian-pad", directory, "float32")
    checkpoint = load_any_checkpoint(directory)
    assert checkpoint.tokenizer.id_to_piece(checkpoint.config.start_id) == "<start>"
    assert checkpoint.tokenizer.id_to_piece(checkpoint.config.pad_id) == "<pad>"
    same, log_probability, attention = agreement(directory, checkpoint)
    assert same == 20 and log_probability < 1e-4 and attention < 1e-5


@pytest.mark.parametrize("quantization", ["int8", "float16", "bfloat16", "int16"])
def test_quantized_weights_are_laid_out_as_ctranslate2_dequantizes_them(tmp_path, quantization):
    """Each type CTranslate2 writes: asked to compute in float32, CTranslate2 multiplies out the same weights we lay
    out, so every output is equal; int8 and float16 files are the fixtures, the others converted here."""
    directory = FIXTURES / f"ct2-opennmt-{quantization}.en-fr"
    if not directory.exists():
        directory = tmp_path / f"ct2-marian-{quantization}.en-fr"
        convert_marian(FIXTURES / "marian-untied", directory, quantization)
    checkpoint = load_any_checkpoint(directory)
    same, log_probability, attention = agreement(directory, checkpoint)
    assert same == 20 and log_probability < 1e-4 and attention < 1e-5
    dequantized = ", dequantized" if quantization.startswith("int") else ""
    assert checkpoint.metadata["imported"]["from"] == f"CTranslate2, {quantization} weights{dequantized}"


def test_an_int8_model_run_in_int8_differs_where_ctranslate2_quantizes_each_layers_input_too():
    """CTranslate2 computing in int8 also rounds each linear layer's input to 8 bits, which a float32 model does not:
    most outputs still agree, and the share is what docs/ctranslate2.md reports."""
    directory = FIXTURES / "ct2-opennmt-int8.en-fr"
    same, _, _ = agreement(directory, load_any_checkpoint(directory), "int8")
    assert 12 <= same < 20


def test_listed_with_its_kind_pair_and_weights_and_opened_by_the_command_line(tmp_path):
    assert describe_directory(FIXTURES / "argos-opennmt.en-fr") == (
        "argos-opennmt.en-fr · en/fr · CTranslate2 (Argos) · float32 · 0.9 MB"
    )
    assert describe_directory(FIXTURES / "ct2-opennmt-int8.en-fr").endswith("· CTranslate2 · int8 · 0.7 MB")
    assert is_model_directory(FIXTURES / "ct2-marian.en-fr")
    out = tmp_path / "converted.safetensors"
    done = run_cli("import-ctranslate2", FIXTURES / "argos-opennmt.en-fr", "--out", out)
    assert done.returncode == 0, done.stderr
    converted = load_checkpoint(out)
    assert agreement(FIXTURES / "argos-opennmt.en-fr", converted)[0] == 20
    assert converted.metadata["imported"]["from"] == "CTranslate2 (Argos Translate), float32 weights"
    done = run_cli("translate", "--checkpoint", FIXTURES / "ct2-opennmt-int8.en-fr" / "model.bin", stdin=SOURCES[0])
    assert done.returncode == 0 and done.stdout.strip(), done.stderr


def test_an_argos_package_opens_on_every_page(tmp_path, monkeypatch):
    label = "argos-opennmt.en-fr · en/fr · CTranslate2 (Argos) · float32 · 0.9 MB"
    at = open_on_every_page(FIXTURES / "argos-opennmt.en-fr", tmp_path, monkeypatch, label)
    sidebar = " ".join(caption.value for caption in at.sidebar.caption).replace("\\", "")
    assert "Imported from CTranslate2 (Argos Translate), float32 weights" in sidebar, sidebar
