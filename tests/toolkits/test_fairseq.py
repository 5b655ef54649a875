"""fairseq models read in place: our decode of the files fairseq left equals fairseq's own greedy output on them.

The models and fairseq's outputs were made once by tests/fixtures/toolkits/make_fairseq.py, with fairseq-fixed
0.12.3.1 in an environment of its own: `fairseq-joined` (one dictionary, every embedding shared, post-norm, ReLU,
sinusoids) and `fairseq-separate` (a dictionary per language, pre-norm with final norms, GELU, the decoder's embedding
shared with its output layer, learned positions and a layer norm on the embeddings).
"""

from __future__ import annotations

import argparse
import dataclasses
import pickle
import re
import shutil
from pathlib import Path

import pytest
import torch
from fixtures.toolkit_outputs import FIXTURES, recorded
from helpers import WritesAMarker, open_on_every_page, run_cli

from transformer.decoding.strategies import DecodeSettings, decode_text
from transformer.io.checkpoint import CheckpointError, load_checkpoint, model_from_tensors, unique_state
from transformer.model.config import ConfigError
from transformer.toolkits.fairseq import (
    REFUSED_OPTIONS,
    fairseq_config,
    import_fairseq,
    language_pair,
    model_options,
    read_dictionary,
)
from transformer.toolkits.opening import describe_directory, is_model_directory, load_any_checkpoint
from transformer.toolkits.pickled import read_pickled
from transformer.toolkits.vocabulary import joint_vocabulary

MODELS = ["fairseq-joined", "fairseq-separate"]
MAX_TOKENS = 60  # make_fairseq.py's max_len_b


def source_rows(directory: Path) -> list[int]:
    """For each id of our vocabulary, fairseq's source dictionary id (the joint vocabulary of two dictionaries)."""
    source, target = (read_dictionary(directory / f"dict.{language}.txt") for language in ("en", "fr"))
    return joint_vocabulary(source, target, 3)[1]


def largest_differences(model, tokenizer, sentences: list[dict], rows: list[int]) -> tuple[int, float, float]:
    """How many dev sentences our greedy decode writes as fairseq did (same source ids, tokens and text), and over
    those the largest difference of a token's log-probability and of the last layer's cross-attention (mean over
    heads, what fairseq's generator returns)."""
    same, log_probability, attention = 0, 0.0, 0.0
    for sentence in sentences:
        result = decode_text(model, tokenizer, sentence["source"], DecodeSettings(max_new_tokens=MAX_TOKENS))
        assert [rows[i] for i in result.src_ids] == sentence["source_ids"]
        expected = sentence["output_ids"][:MAX_TOKENS]  # past its max_len_b fairseq ends the output with a forced </s>
        if result.tgt_ids != expected or result.text != sentence["output"]:
            continue
        same, kept = same + 1, len(expected)
        theirs = torch.tensor(sentence["log_probabilities"][:kept])
        log_probability = max(log_probability, (result.token_probs.log() - theirs).abs().max().item())
        mean = result.cross[-1].mean(0)
        attention = max(attention, (mean - torch.tensor(sentence["attention"][:kept])).abs().max().item())
    return same, log_probability, attention


@pytest.mark.parametrize("name", MODELS)
def test_greedy_tokens_log_probabilities_and_attention_equal_fairseqs_own(name):
    checkpoint = load_any_checkpoint(FIXTURES / name)
    sentences = recorded(name)
    assert len(sentences) == 20 and sum(len(s["output_ids"]) for s in sentences) > 300
    same, log_probability, attention = largest_differences(
        checkpoint.model, checkpoint.tokenizer, sentences, source_rows(FIXTURES / name)
    )
    assert same == len(sentences)
    assert log_probability < 1e-4 and attention < 1e-5
    assert checkpoint.metadata["languages"] == {"src": "en", "tgt": "fr"}


# Each model read the wrong way: sinusoids with the paper's frequencies (not tensor2tensor's), learned positions from
# row 0 (not pad + 1).
WRONG_READINGS = {
    "fairseq-joined": {"sinusoid_frequencies": "paper"},
    "fairseq-separate": {"position_offset": 0, "max_len": 258},
}


@pytest.mark.parametrize("name", MODELS)
def test_the_check_has_teeth_a_wrong_reading_fails_it(name):
    checkpoint = import_fairseq(FIXTURES / name)
    config = dataclasses.replace(checkpoint.config, **WRONG_READINGS[name])
    model, _ = model_from_tensors(config, unique_state(checkpoint.model), "cpu")
    same, log_probability, _ = largest_differences(
        model.eval(), checkpoint.tokenizer, recorded(name), source_rows(FIXTURES / name)
    )
    assert same < 15 and (same == 0 or log_probability > 0.05)  # where some agree, their probabilities do not


def test_the_file_given_itself_opens_with_its_dictionaries_beside_it_and_the_list_names_the_toolkit():
    directory = FIXTURES / "fairseq-separate"
    by_file = load_any_checkpoint(directory / "checkpoint_best.pt")
    assert not by_file.config.tie_embeddings and by_file.config.norm_first
    assert is_model_directory(directory) and not is_model_directory(FIXTURES)
    size = (directory / "checkpoint_best.pt").stat().st_size / 1e6
    assert describe_directory(directory) == f"fairseq-separate · en/fr · fairseq · {size:.1f} MB"


def test_a_piece_only_the_source_knows_is_never_written_and_one_only_the_target_knows_reads_as_unknown():
    directory = FIXTURES / "fairseq-separate"
    source, target = (read_dictionary(directory / f"dict.{language}.txt") for language in ("en", "fr"))
    pieces, rows = joint_vocabulary(source, target, 3)
    checkpoint = import_fairseq(directory)
    only_source = [i for i, piece in enumerate(pieces) if piece not in target]
    only_target = [i for i, piece in enumerate(pieces) if piece not in source]
    assert only_source and only_target and pieces[: len(target)] == target
    assert all(rows[i] == 3 for i in only_target)  # fairseq's <unk>
    result = decode_text(checkpoint.model, checkpoint.tokenizer, recorded("fairseq-separate")[0]["source"])
    assert result.topk_ids.shape[1] >= 5 and not set(result.topk_ids.flatten().tolist()) & set(only_source)
    assert (checkpoint.model.generator.bias[only_source] == -1e4).all()


def options(**changed):
    saved = read_pickled(FIXTURES / "fairseq-joined" / "checkpoint_best.pt")
    return {**model_options(saved), **changed}


@pytest.mark.parametrize("option", sorted(REFUSED_OPTIONS))
def test_each_option_this_format_cannot_hold_is_refused_naming_it(option):
    with pytest.raises(ConfigError, match=re.escape(REFUSED_OPTIONS[option])):
        fairseq_config(options(**{option: True}), 608, True)


@pytest.mark.parametrize(
    "changed, named",
    [
        ({"arch": "transformer_lm"}, "the architecture 'transformer_lm'"),
        ({"arch": "lstm"}, "the architecture 'lstm'"),
        ({"decoder_embed_dim": 16}, "different embed dim"),
        ({"decoder_normalize_before": True}, "different normalize before"),
        ({"adaptive_softmax_cutoff": "5000,20000"}, "an adaptive softmax"),
        ({"activation_fn": "tanh"}, "the activation 'tanh'"),
        ({"encoder_learned_pos": True}, "learned positions on one side only"),
        (
            {"encoder_learned_pos": True, "decoder_learned_pos": True, "max_target_positions": 512},
            "learned position tables of different lengths",
        ),
    ],
)
def test_other_models_are_refused_in_one_line_naming_what(changed, named):
    with pytest.raises(ConfigError, match=named) as refused:
        fairseq_config(options(**changed), 608, True)
    assert "\n" not in str(refused.value)


def copied(tmp_path: Path, name: str = "fairseq-joined", to: str = "model.en-fr") -> Path:
    return Path(shutil.copytree(FIXTURES / name, tmp_path / to))


@pytest.mark.parametrize("zipped", [True, False])
def test_a_checkpoint_whose_pickle_would_run_code_is_refused_before_it_runs(tmp_path, zipped):
    directory = copied(tmp_path)
    marker = tmp_path / "marker"
    payload = {"model": {}, "cfg": {"model": argparse.Namespace(), "task": WritesAMarker(marker)}}
    path = directory / "checkpoint_best.pt"
    if zipped:
        torch.save(payload, path)
    else:
        path.write_bytes(pickle.dumps(payload, protocol=2))  # torch.save's before 1.6
    pickle.loads(pickle.dumps(WritesAMarker(tmp_path / "control")))  # plain unpickling would have run it
    assert (tmp_path / "control").read_text() == "ran"
    with pytest.raises(CheckpointError, match="refused unread") as refused:
        load_any_checkpoint(directory)
    assert not marker.exists() and "Unsupported global: GLOBAL getattr" in str(refused.value)


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda d: (d / "dict.fr.txt").unlink(), "found 1"),
        (lambda d: (d / "sentencepiece.bpe.model").rename(d / "bpecodes"), "bpecodes is subword-nmt's BPE"),
        (lambda d: (d / "checkpoint_best.pt").write_bytes(b"not a pickle"), "not a PyTorch file"),
        (lambda d: (d / "dict.fr.txt").write_text("▁le\n"), "line 1: not a symbol and its count"),
        (lambda d: (d / "dict.fr.txt").write_text("▁le 5\n"), "dict.fr.txt has 5 symbols .* embedding 408 rows"),
    ],
)
def test_a_damaged_directory_is_refused_with_what_is_wrong(tmp_path, damage, message):
    directory = copied(tmp_path)
    damage(directory)
    with pytest.raises(CheckpointError, match=message):
        import_fairseq(directory)


def test_the_pair_is_read_from_the_options_the_data_bin_or_the_directory_and_else_asked_for(tmp_path):
    directory = copied(tmp_path, to="model")
    assert language_pair({"cfg": {"task": {"source_lang": "fr", "target_lang": "en"}}}, directory) == ("fr", "en")
    assert language_pair({"cfg": {"task": {"data": "/data-bin/iwslt.fr-en"}}}, directory) == ("fr", "en")
    assert language_pair({"args": argparse.Namespace(data="x")}, copied(tmp_path, to="m.en-fr")) == ("en", "fr")
    with pytest.raises(CheckpointError, match="which of en and fr is the source is not said"):
        language_pair({"cfg": {"task": {"data": "/data-bin/x"}}}, directory)


def test_the_command_line_translates_with_it_and_converts_it_once(tmp_path):
    directory = FIXTURES / "fairseq-joined"
    sentence = recorded("fairseq-joined")[0]
    translated = run_cli("translate", "--checkpoint", str(directory), stdin=sentence["source"] + "\n")
    assert translated.returncode == 0 and translated.stdout.strip() == sentence["output"]
    converted = run_cli("import-fairseq", str(directory), "--out", str(tmp_path / "m.safetensors"))
    assert converted.returncode == 0, converted.stderr
    checkpoint = load_checkpoint(tmp_path / "m.safetensors")
    assert decode_text(checkpoint.model, checkpoint.tokenizer, sentence["source"]).tgt_ids == sentence["output_ids"]
    assert checkpoint.metadata["imported"]["from"] == "fairseq"


@pytest.mark.parametrize("name", MODELS)
def test_a_fairseq_directory_among_the_checkpoints_works_on_every_page(name, tmp_path, monkeypatch):
    size = (FIXTURES / name / "checkpoint_best.pt").stat().st_size / 1e6
    at = open_on_every_page(FIXTURES / name, tmp_path, monkeypatch, f"{name} · en/fr · fairseq · {size:.1f} MB")
    sidebar = " ".join(caption.value for caption in at.sidebar.caption)
    assert "Imported from fairseq" in sidebar, sidebar


def test_a_checkpoint_written_over_in_place_is_read_anew_by_the_app(tmp_path):
    """fairseq-train replaces checkpoint_best.pt by a rename, which changes the directory's time; a copy over it does
    not: the app's key for a directory follows its files too."""
    import os

    from ui.services.checkpoints import checkpoint_key

    directory = copied(tmp_path)
    key, before = checkpoint_key(directory), directory.stat().st_mtime_ns
    later = max(before, (directory / "checkpoint_best.pt").stat().st_mtime_ns) + 10**9
    os.utime(directory / "checkpoint_best.pt", ns=(later, later))
    assert directory.stat().st_mtime_ns == before and checkpoint_key(directory) != key


def test_files_linked_from_a_folder_inside_the_directory_are_read_by_their_names_there(tmp_path):
    """A SentencePiece model or dictionary linked from a folder inside (data/spm-en-fr.model) was looked up by its
    target's name in the directory itself, and refused as missing."""
    directory = copied(tmp_path)
    (directory / "data").mkdir()
    for name, target in (("sentencepiece.bpe.model", "spm-en-fr.model"), ("dict.fr.txt", "fr.dict")):
        (directory / name).rename(directory / "data" / target)
        (directory / name).symlink_to(Path("data") / target)
    checkpoint = import_fairseq(directory)
    sentence = recorded("fairseq-joined")[0]
    assert decode_text(checkpoint.model, checkpoint.tokenizer, sentence["source"]).text == sentence["output"]
