"""OpenNMT-py 3.x models read in place: our decode of the checkpoint onmt_train saved equals OpenNMT-py's own greedy
output on it.

The model and OpenNMT-py's outputs were made once by tests/fixtures/toolkits/make_opennmt.py, with OpenNMT-py 3.5.1 in
an environment of its own: `opennmt.en-fr` (one vocabulary, every embedding shared, the interleaved sinusoids, pre-norm
with ε 1e-6, biases in the feed-forward layers only where asked). Like eole's, its sources end without `</s>`.
"""

from __future__ import annotations

import argparse
import copy
import dataclasses
import re
import shutil
import sys
import types
from pathlib import Path

import pytest
import torch
from fixtures.toolkit_outputs import FIXTURES, recorded
from helpers import WritesAMarker, open_on_every_page, run_cli

from transformer.decoding.strategies import DecodeSettings, decode_text
from transformer.io.checkpoint import CheckpointError, load_checkpoint, model_from_tensors, unique_state
from transformer.model.config import ConfigError
from transformer.toolkits.eole import eole_config
from transformer.toolkits.opening import describe_directory, is_model_directory, load_any_checkpoint
from transformer.toolkits.opennmt import eole_options, import_opennmt
from transformer.toolkits.pickled import read_pickled

FIXTURE = FIXTURES / "opennmt.en-fr"
MAX_TOKENS = 60  # make_opennmt.py's max_length


def saved() -> dict:
    return read_pickled(FIXTURE / "model.pt")


def same_outputs(model, tokenizer, check_source: bool = True) -> tuple[int, float, float]:
    """How many dev sentences our greedy decode writes as OpenNMT-py did (same source ids unless not `check_source`,
    tokens and text), and over those the largest difference of a token's log-probability and of the last layer's
    cross-attention head 0 (what its translator returns)."""
    source = saved()["vocab"]["src"]
    same, log_probability, attention = 0, 0.0, 0.0
    for sentence in recorded(FIXTURE.name):
        result = decode_text(model, tokenizer, sentence["source"], DecodeSettings(max_new_tokens=MAX_TOKENS))
        theirs = [source.index(p) if p in source else 0 for p in map(tokenizer.id_to_piece, result.src_ids)]
        if (check_source and theirs != sentence["source_ids"]) or result.tgt_ids != sentence["output_ids"]:
            continue
        same += result.text == sentence["output"]
        probabilities = torch.tensor(sentence["log_probabilities"])
        log_probability = max(log_probability, (result.token_probs.log() - probabilities).abs().max().item())
        if check_source:
            mine = result.cross[-1][0]
            attention = max(attention, (mine - torch.tensor(sentence["attention"])).abs().max().item())
    return same, log_probability, attention


def test_greedy_tokens_log_probabilities_and_attention_equal_opennmts_own():
    checkpoint = load_any_checkpoint(FIXTURE)
    assert len(recorded(FIXTURE.name)) == 20 and sum(len(s["output_ids"]) for s in recorded(FIXTURE.name)) > 300
    same, log_probability, attention = same_outputs(checkpoint.model, checkpoint.tokenizer)
    assert same == 20 and log_probability < 1e-4 and attention < 1e-5
    assert checkpoint.metadata["languages"] == {"src": "en", "tgt": "fr"}
    assert checkpoint.metadata["imported"] == {"from": "OpenNMT-py", "directory": FIXTURE.name, "file": "model.pt"}
    assert not checkpoint.tokenizer.source_eos and checkpoint.config.layer_norm_eps == 1e-6


@pytest.mark.parametrize("wrong", ["source ended with </s>", "interleaved read as halves"])
def test_the_check_has_teeth_a_wrong_reading_fails_it(wrong):
    checkpoint = import_opennmt(FIXTURE)
    changed = {"sinusoid_layout": "halves"} if "halves" in wrong else {}
    model, _ = model_from_tensors(
        dataclasses.replace(checkpoint.config, **changed), unique_state(checkpoint.model), "cpu"
    )
    tokenizer = copy.copy(checkpoint.tokenizer)
    tokenizer.source_eos = "</s>" in wrong
    same, log_probability, _ = same_outputs(model.eval(), tokenizer, check_source=False)
    assert same < 15 and (same == 0 or log_probability > 0.05)


def test_the_checkpoint_given_itself_or_the_last_step_of_several_opens_and_the_list_names_the_toolkit(tmp_path):
    directory = Path(shutil.copytree(FIXTURE, tmp_path / "run.en-fr"))
    (directory / "model.pt").rename(directory / "run_step_2000.pt")
    shutil.copy(directory / "run_step_2000.pt", directory / "run_step_500.pt")
    (directory / "run_step_500.pt").write_bytes(b"an earlier step, not read")
    assert import_opennmt(directory).metadata["imported"]["file"] == "run_step_2000.pt"
    assert load_any_checkpoint(directory / "run_step_2000.pt").config.tie_embeddings
    assert is_model_directory(directory) and describe_directory(directory).startswith("run.en-fr · en/fr · OpenNMT-py")


def test_a_checkpoint_whose_pickle_would_run_code_is_refused_before_it_runs(tmp_path):
    directory = Path(shutil.copytree(FIXTURE, tmp_path / "m.en-fr"))
    marker = tmp_path / "marker"
    torch.save({"opt": argparse.Namespace(), "vocab": WritesAMarker(marker), "model": {}}, directory / "model.pt")
    with pytest.raises(CheckpointError, match="refused unread"):
        load_any_checkpoint(directory)
    assert not marker.exists()


def test_a_2x_checkpoint_holding_torchtext_objects_is_refused_unread_saying_how_to_convert_it(tmp_path, monkeypatch):
    for name in ("torchtext", "torchtext.data", "torchtext.data.field"):  # torchtext, as pickle finds it
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    field = sys.modules["torchtext.data.field"]
    field.Field = type("Field", (), {"__module__": "torchtext.data.field", "__qualname__": "Field"})
    directory = Path(shutil.copytree(FIXTURE, tmp_path / "m.en-fr"))
    torch.save({**saved(), "vocab": {"src": field.Field()}}, directory / "model.pt")
    with pytest.raises(CheckpointError, match="OpenNMT-py 2.x checkpoint.*convertv2_v3.py"):
        import_opennmt(directory)


def options(**changed) -> dict:
    return vars(saved()["opt"]) | changed


SPECIALS = {"<pad>": 1, "<unk>": 0, "<s>": 2, "</s>": 3, "start": 2}


@pytest.mark.parametrize(
    "changed, named",
    [
        ({"self_attn_type": "average"}, "'average-attention' decoder"),
        ({"position_encoding": False, "max_relative_positions": 20}, "'Relative' positions"),
        ({"position_encoding": False, "max_relative_positions": -1}, "'Rotary' positions"),
        ({"position_encoding": False, "max_relative_positions": -2}, "'Alibi' positions"),
        ({"position_encoding": False}, "'no' positions"),
        ({"num_kv": 2}, "grouped-query attention"),
        ({"num_experts": 4}, "a mixture of experts"),
        ({"parallel_residual": True}, "parallel residual layers"),
        ({"model_task": "lm"}, "the architecture 'lm/text'"),
        ({"encoder_type": "brnn"}, "a 'brnn' encoder"),
        ({"pos_ffn_activation_fn": "gated-silu"}, "the activation 'gated-silu'"),
        ({"layer_norm": "rms"}, "'rms' norms"),
    ],
)
def test_other_models_are_refused_in_one_line_naming_what(changed, named):
    with pytest.raises(ConfigError, match=re.escape(named)) as refused:
        eole_config({"model": eole_options(options(**changed))}, 408, SPECIALS, True)
    assert "\n" not in str(refused.value)


def test_a_copy_attention_and_a_lone_fairseq_checkpoint_are_refused_saying_what_they_are(tmp_path):
    directory = Path(shutil.copytree(FIXTURE, tmp_path / "m.en-fr"))
    torch.save({**saved(), "opt": argparse.Namespace(**options(copy_attn=True))}, directory / "model.pt")
    with pytest.raises(CheckpointError, match="copy attention"):
        import_opennmt(directory)
    shutil.copy(FIXTURES / "fairseq-joined" / "checkpoint_best.pt", directory / "model.pt")
    with pytest.raises(CheckpointError, match="a fairseq checkpoint: put its data-bin's dict"):
        load_any_checkpoint(directory / "model.pt")


def test_the_command_line_translates_with_it_and_converts_it_once(tmp_path):
    sentence = recorded(FIXTURE.name)[0]
    translated = run_cli("translate", "--checkpoint", str(FIXTURE / "model.pt"), stdin=sentence["source"] + "\n")
    assert translated.returncode == 0 and translated.stdout.strip() == sentence["output"]
    converted = run_cli("import-opennmt", str(FIXTURE), "--out", str(tmp_path / "m.safetensors"))
    assert converted.returncode == 0, converted.stderr
    checkpoint = load_checkpoint(tmp_path / "m.safetensors")
    settings = DecodeSettings(max_new_tokens=MAX_TOKENS)
    assert (
        decode_text(checkpoint.model, checkpoint.tokenizer, sentence["source"], settings).tgt_ids
        == sentence["output_ids"]
    )
    assert checkpoint.metadata["imported"]["from"] == "OpenNMT-py" and not checkpoint.tokenizer.source_eos


def test_an_opennmt_folder_among_the_checkpoints_works_on_every_page(tmp_path, monkeypatch):
    size = (FIXTURE / "model.pt").stat().st_size / 1e6
    at = open_on_every_page(FIXTURE, tmp_path, monkeypatch, f"{FIXTURE.name} · en/fr · OpenNMT-py · {size:.1f} MB")
    sidebar = " ".join(caption.value for caption in at.sidebar.caption).replace("\\", "")
    assert "Imported from OpenNMT-py" in sidebar, sidebar
