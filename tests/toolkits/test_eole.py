"""eole models read in place: our decode of the folders eole saved equals eole's own greedy output on them.

The models and eole's outputs were made once by tests/fixtures/toolkits/make_eole.py, with eole 0.6.4 in an
environment of its own: `eole-shared.en-fr` (one vocabulary, every embedding shared, the interleaved sinusoids, no
biases but the generator's) and `eole-separate.en-fr` (a vocabulary per language, nothing shared, sinusoids in halves,
GELU, biases everywhere). eole ends no source with `</s>`: FORMAT.md's `source_eos` says so.
"""

from __future__ import annotations

import copy
import dataclasses
import json
import re
import shutil
from pathlib import Path

import pytest
import torch
from fixtures.toolkit_outputs import FIXTURES, recorded
from helpers import assert_follows_the_format, measured, open_on_every_page, run_cli
from safetensors.torch import load_file, save_file

from transformer.decoding.strategies import DecodeSettings, decode_text
from transformer.io.checkpoint import (
    CheckpointError,
    load_checkpoint,
    model_from_tensors,
    read_file_header,
    save_checkpoint,
    unique_state,
)
from transformer.model.config import ConfigError
from transformer.toolkits.eole import REFUSED_OPTIONS, eole_config, import_eole, read_vocabularies
from transformer.toolkits.opening import describe_directory, is_model_directory, load_any_checkpoint

MODELS = ["eole-shared.en-fr", "eole-separate.en-fr"]
MAX_TOKENS = 60  # make_eole.py's max_length


def eole_source_ids(tokenizer, name: str, ids: list[int]) -> list[int]:
    """Our source ids as eole's source vocabulary numbers them (our vocabulary is the target's and the source's)."""
    source = read_vocabularies(FIXTURES / name)[0]
    return [source.index(p) if p in source else source.index("<unk>") for p in map(tokenizer.id_to_piece, ids)]


def largest_differences(model, tokenizer, name: str, check_source: bool = True) -> tuple[int, float, float]:
    """How many dev sentences our greedy decode writes as eole did (same source ids unless not `check_source`, tokens
    and text), and over those the largest difference of a token's log-probability and of the last layer's
    cross-attention head 0 (what eole's predictor returns)."""
    same, log_probability, attention = 0, 0.0, 0.0
    for sentence in recorded(name):
        result = decode_text(model, tokenizer, sentence["source"], DecodeSettings(max_new_tokens=MAX_TOKENS))
        sources_agree = not check_source or eole_source_ids(tokenizer, name, result.src_ids) == sentence["source_ids"]
        if not sources_agree or result.tgt_ids != sentence["output_ids"] or result.text != sentence["output"]:
            continue
        same += 1
        theirs = torch.tensor(sentence["log_probabilities"])
        log_probability = max(log_probability, (result.token_probs.log() - theirs).abs().max().item())
        if check_source:  # else the source may be a token longer than eole's
            mine = result.cross[-1][0]
            attention = max(attention, (mine - torch.tensor(sentence["attention"])).abs().max().item())
    return same, log_probability, attention


@pytest.mark.parametrize("name", MODELS)
def test_greedy_tokens_log_probabilities_and_attention_equal_eoles_own(name):
    checkpoint = load_any_checkpoint(FIXTURES / name)
    sentences = recorded(name)
    assert len(sentences) == 20 and sum(len(s["output_ids"]) for s in sentences) > 300
    same, log_probability, attention = largest_differences(checkpoint.model, checkpoint.tokenizer, name)
    assert same == len(sentences)
    assert log_probability < 1e-4 and attention < 1e-5
    assert checkpoint.metadata["languages"] == {"src": "en", "tgt": "fr"}
    assert not checkpoint.tokenizer.source_eos and checkpoint.config.tie_embeddings == (name == MODELS[0])


# Each model read the wrong way: its source ended with </s> as every other toolkit's is, or its sinusoids laid out as
# the other kind eole has.
WRONG_READINGS = {
    "source ended with </s>": ("eole-shared.en-fr", {}, True),
    "interleaved read as halves": ("eole-shared.en-fr", {"sinusoid_layout": "halves"}, False),
    "halves read as interleaved": ("eole-separate.en-fr", {"sinusoid_layout": "interleaved"}, False),
}


@pytest.mark.parametrize("wrong", sorted(WRONG_READINGS))
def test_the_check_has_teeth_a_wrong_reading_fails_it(wrong):
    name, changed, source_eos = WRONG_READINGS[wrong]
    checkpoint = import_eole(FIXTURES / name)
    config = dataclasses.replace(checkpoint.config, **changed)
    model, _ = model_from_tensors(config, unique_state(checkpoint.model), "cpu")
    tokenizer = copy.copy(checkpoint.tokenizer)
    tokenizer.source_eos = source_eos
    same, log_probability, _ = largest_differences(model.eval(), tokenizer, name, check_source=False)
    assert same < 15 and (same == 0 or log_probability > 0.05)  # where some agree, their probabilities do not


def eole_saved(tmp_path: Path, name: str = "eole-shared.en-fr", to: str = "run.en-fr") -> Path:
    """The folder as eole's saver leaves it: each file in the step's folder, linked from the model's."""
    directory = tmp_path / to
    shutil.copytree(FIXTURES / name, directory / "step_2000")
    for file in ("config.json", "vocab.json", "model.00.safetensors", "spm.model"):
        (directory / file).symlink_to(Path("step_2000") / file)
    return directory


def test_the_folder_eole_saved_opens_where_it_is_and_the_list_names_the_toolkit(tmp_path):
    directory = eole_saved(tmp_path)
    checkpoint = load_any_checkpoint(directory)
    sentence = recorded("eole-shared.en-fr")[0]
    settings = DecodeSettings(max_new_tokens=MAX_TOKENS)
    assert decode_text(checkpoint.model, checkpoint.tokenizer, sentence["source"], settings).text == sentence["output"]
    assert is_model_directory(directory) and not is_model_directory(FIXTURES)
    size = (FIXTURES / "eole-shared.en-fr" / "model.00.safetensors").stat().st_size / 1e6
    assert describe_directory(directory) == f"run.en-fr · en/fr · eole · {size:.1f} MB"
    assert load_any_checkpoint(directory / "config.json").metadata["imported"]["from"] == "eole"


def test_its_sinusoid_tables_saved_beside_the_weights_are_left_unread(tmp_path):
    """eole saves its fixed tables (src_emb.pe.pe, 5,000 rows): make_eole.py leaves them out, eole's saver does not."""
    directory = Path(shutil.copytree(FIXTURES / "eole-shared.en-fr", tmp_path / "m.en-fr"))
    weights = load_file(directory / "model.00.safetensors")
    save_file(
        weights | {f"{side}_emb.pe.pe": torch.randn(5000, 1, 32) for side in ("src", "tgt")},
        directory / "model.00.safetensors",
    )
    assert torch.equal(
        import_eole(directory).model.generator.weight,
        import_eole(FIXTURES / "eole-shared.en-fr").model.generator.weight,
    )


def config_of(name: str = "eole-shared.en-fr") -> dict:
    return json.loads((FIXTURES / name / "config.json").read_text())


def with_model(**changed) -> dict:
    config = config_of()
    model = config["model"]
    for side in ("encoder", "decoder"):
        model[side] |= {k: v for k, v in changed.items() if not k.startswith("model.")}
    model |= {k.removeprefix("model."): v for k, v in changed.items() if k.startswith("model.")}
    return config


SPECIALS = {"<pad>": 1, "<unk>": 0, "<s>": 2, "</s>": 3, "start": 2}


@pytest.mark.parametrize("option", sorted(REFUSED_OPTIONS))
def test_each_option_this_format_cannot_hold_is_refused_naming_it(option):
    value = {"sliding_window": 8, "relative_positions_buckets": 32, "num_experts": 4, "num_mtp_heads": 1}
    changed = {option: value.get(option, ["full_attention"] if option == "layer_types" else True)}
    with pytest.raises(ConfigError, match=re.escape(REFUSED_OPTIONS[option][1])):
        eole_config(with_model(**changed), 408, SPECIALS, True)


@pytest.mark.parametrize(
    "changed, named",
    [
        ({"model.architecture": "transformer_lm"}, "the architecture 'transformer_lm'"),
        ({"decoder_type": "rnn"}, "a 'transformer' encoder and a 'rnn' decoder"),
        ({"position_encoding_type": "Rotary"}, "'Rotary' positions"),
        ({"position_encoding_type": "Alibi"}, "'Alibi' positions"),
        ({"position_encoding_type": "Relative"}, "'Relative' positions"),
        ({"position_encoding_type": "Learned"}, "'Learned' positions"),
        ({"mlp_activation_fn": "gated-silu"}, "the activation 'gated-silu'"),
        ({"layer_norm": "rms"}, "'rms' norms"),
        ({"encoder_layer_style": "postnorm"}, "an encoder other than pre-norm with a final norm"),
        ({"heads_kv": 2}, "grouped-query attention"),
        ({"head_dim": 16}, "heads of a width or scale of their own"),
        ({"model.embeddings": {"word_vec_size": 32, "position_shift": 2}}, "shifted positions"),
        ({"model.generator_function": "sparsemax"}, "sparsemax"),
    ],
)
def test_other_models_are_refused_in_one_line_naming_what(changed, named):
    with pytest.raises(ConfigError, match=re.escape(named)) as refused:
        eole_config(with_model(**changed), 408, SPECIALS, True)
    assert "\n" not in str(refused.value)


def test_a_side_differing_from_the_other_is_refused_naming_the_option():
    config = config_of()
    config["model"]["decoder"]["transformer_ff"] = 128
    with pytest.raises(ConfigError, match="encoder and decoder of different transformer_ff"):
        eole_config(config, 408, SPECIALS, True)


def rewrite(path: Path, change) -> None:
    path.write_text(json.dumps(change(json.loads(path.read_text()))))


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda d: (d / "spm.model").unlink(), "lacks the SentencePiece model 'spm.model'"),
        (lambda d: rewrite(d / "config.json", lambda c: c | {"transforms": ["onmt_tokenize"]}), "onmt_tokenize"),
        (lambda d: rewrite(d / "config.json", lambda c: c | {"transforms": ["bpe", "prefix"]}), "bpe, prefix"),
        (lambda d: rewrite(d / "vocab.json", lambda v: v | {"src": "not a list"}), "no src and tgt lists"),
        (
            lambda d: rewrite(d / "vocab.json", lambda v: v | {"tgt": v["tgt"][4:]}),
            "tgt lacks <blank>, <unk>, <s>, </s>",
        ),
        (lambda d: rewrite(d / "vocab.json", lambda v: v | {"tgt": [*v["tgt"], "<pad>"]}), "named <pad>"),
        (lambda d: (d / "model.00.safetensors").write_bytes(b"\0" * 16), "not a safetensors file"),
        (lambda d: (d / "config.json").write_text("[1]"), "config.json is not an object"),
    ],
)
def test_a_damaged_folder_is_refused_with_what_is_wrong(tmp_path, damage, message):
    directory = Path(shutil.copytree(FIXTURES / "eole-shared.en-fr", tmp_path / "m.en-fr"))
    damage(directory)
    with pytest.raises(CheckpointError, match=re.escape(message)):
        import_eole(directory)


def test_a_tensor_of_another_model_is_refused_naming_it(tmp_path):
    directory = Path(shutil.copytree(FIXTURES / "eole-shared.en-fr", tmp_path / "m.en-fr"))
    weights = load_file(directory / "model.00.safetensors")
    save_file(
        weights | {"encoder.transformer_layers.0.mlp.up_proj.weight": torch.zeros(64, 32)},
        directory / "model.00.safetensors",
    )
    with pytest.raises(CheckpointError, match=r"unexpected tensor 'encoder\.transformer_layers\.0\.mlp\.up_proj"):
        import_eole(directory)


def test_the_command_line_translates_with_it_and_converts_it_once_keeping_the_source_without_its_end(tmp_path):
    directory = FIXTURES / "eole-separate.en-fr"
    sentence = recorded("eole-separate.en-fr")[0]
    translated = run_cli("translate", "--checkpoint", str(directory), stdin=sentence["source"] + "\n")
    assert translated.returncode == 0 and translated.stdout.strip() == sentence["output"]
    converted = run_cli("import-eole", str(directory), "--out", str(tmp_path / "m.safetensors"))
    assert converted.returncode == 0, converted.stderr
    checkpoint = load_checkpoint(tmp_path / "m.safetensors")
    result = decode_text(checkpoint.model, checkpoint.tokenizer, sentence["source"])
    assert result.tgt_ids == sentence["output_ids"] and checkpoint.tokenizer.eos_id not in result.src_ids
    assert checkpoint.metadata["imported"]["from"] == "eole"


def test_the_numpy_reference_reads_a_converted_eole_model_by_format_md_its_source_without_the_end(tmp_path):
    checkpoint = import_eole(FIXTURES / "eole-shared.en-fr")
    save_checkpoint(tmp_path / "m.safetensors", checkpoint.model, checkpoint.tokenizer, checkpoint.metadata)
    assert read_file_header(tmp_path / "m.safetensors")["__metadata__"]["source_eos"] == "false"
    sentences = [s["source"] for s in recorded("eole-shared.en-fr")[:3]]
    assert_follows_the_format(tmp_path / "m.safetensors", load_checkpoint(tmp_path / "m.safetensors"), sentences)


def test_an_eole_folder_among_the_checkpoints_works_on_every_page(tmp_path, monkeypatch):
    name = "eole-separate.en-fr"
    size = (FIXTURES / name / "model.00.safetensors").stat().st_size / 1e6
    at = open_on_every_page(FIXTURES / name, tmp_path, monkeypatch, f"{name} · en/fr · eole · {size:.1f} MB")
    sidebar = " ".join(caption.value for caption in at.sidebar.caption)
    assert "Imported from eole" in sidebar, sidebar


def test_a_file_linked_from_outside_the_folder_is_refused_unread(tmp_path):
    directory = Path(shutil.copytree(FIXTURES / "eole-shared.en-fr", tmp_path / "m.en-fr"))
    (directory / "spm.model").rename(tmp_path / "elsewhere.model")
    (directory / "spm.model").symlink_to(tmp_path / "elsewhere.model")
    with pytest.raises(CheckpointError, match="a link that leads out of the directory"):
        import_eole(directory)


def test_a_config_that_lies_about_the_sizes_is_refused_by_the_weights_check_allocating_nothing(tmp_path):
    """Zero biases were laid out at the config's sizes before the weights were checked against it: 64 layers a side
    of feed-forward width 10^6 took 0.5 GB for a 0.2 MB file."""
    directory = Path(shutil.copytree(FIXTURES / "eole-shared.en-fr", tmp_path / "m.en-fr"))
    rewrite(directory / "config.json", lambda c: with_model(transformer_ff=10**6, layers=64))
    with measured() as cost, pytest.raises(CheckpointError, match="the weights do not fit the config"):
        import_eole(directory)
    assert cost.peak_growth_mb < 100, cost


def test_an_embedding_tensor_the_options_do_not_describe_is_refused_naming_it(tmp_path):
    """A learned position table in a model whose options say sinusoids was skipped unread with the embeddings."""
    directory = Path(shutil.copytree(FIXTURES / "eole-shared.en-fr", tmp_path / "m.en-fr"))
    weights = load_file(directory / "model.00.safetensors")
    save_file(weights | {"src_emb.pe.weight": torch.zeros(64, 32)}, directory / "model.00.safetensors")
    with pytest.raises(CheckpointError, match=r"unexpected tensor 'src_emb\.pe\.weight'"):
        import_eole(directory)


def test_a_folder_whose_weights_link_nowhere_is_listed_as_not_readable(tmp_path):
    """The list's label read the weights' sizes unguarded: a second shard linked to nothing raised out of the
    checkpoint list."""
    directory = eole_saved(tmp_path)
    (directory / "model.01.safetensors").symlink_to("step_2000/model.01.safetensors")
    assert describe_directory(directory).startswith("run.en-fr · en/fr · eole · not readable: ")
