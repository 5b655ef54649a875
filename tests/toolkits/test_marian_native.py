"""Marian models read in place: our decode of the files Marian left equals Marian's own output on them.

The models and Marian's outputs were made once by tests/fixtures/toolkits/make_marian.py, with pymarian 1.12.42 in an
environment of its own: `marian-tied` (Marian's defaults: post-norm, swish, one vocabulary, every embedding tied),
`marian-untied` (a vocabulary per language, nothing tied), `marian-prenorm` (a vocabulary per language, pre-norm,
ReLU, the decoder's embedding tied to its output layer) and `marian-pad` (as `marian-untied`, its vocabularies with
`<s>` and `<pad>` pieces of their own).
"""

from __future__ import annotations

import dataclasses
import re
import shutil
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch
from fixtures.toolkit_outputs import FIXTURES, recorded
from helpers import WritesAMarker, open_on_every_page, run_cli

from transformer.decoding.forcing import teacher_force_ids
from transformer.decoding.result import source_ids
from transformer.decoding.strategies import DecodeSettings, decode_text
from transformer.io.checkpoint import (
    CheckpointError,
    CheckpointTooLarge,
    load_checkpoint,
    model_from_tensors,
    unique_state,
)
from transformer.model.config import ConfigError
from transformer.text.tokenizer import Tokenizer
from transformer.toolkits.arrays import read_npz
from transformer.toolkits.marian import REFUSED_OPTIONS, import_marian_npz, marian_config, marian_options
from transformer.toolkits.opening import describe_directory, is_model_directory, load_any_checkpoint
from transformer.toolkits.vocabulary import joint_vocabulary

MODELS = ["marian-tied", "marian-untied", "marian-prenorm"]
POST_NORM = ["marian-tied", "marian-untied"]


def source_rows(name: str) -> list[int]:
    """For each id of our vocabulary, Marian's source vocabulary id (the joint vocabulary of two)."""
    vocabularies = sorted((FIXTURES / name).glob("*.spm"))
    pieces = [Tokenizer(path.read_bytes()).pieces for path in vocabularies]
    source, target = pieces if len(pieces) == 2 else pieces * 2  # vocab.en.spm, vocab.fr.spm
    return joint_vocabulary(source, target, source.index("<unk>"))[1]


def greedy_differences(model, tokenizer, name: str) -> tuple[int, float, float]:
    """How many dev sentences our greedy decode writes as Marian's translator did (same source ids, pieces and
    text), and over those the largest difference of a piece's log-probability and of the last layer's
    cross-attention of head 0 (Marian's soft alignment)."""
    same, log_probability, attention, rows = 0, 0.0, 0.0, source_rows(name)
    for sentence in recorded(name):
        result = decode_text(
            model, tokenizer, sentence["source"], DecodeSettings(max_new_tokens=3 * len(sentence["source_ids"]))
        )
        assert [rows[i] for i in result.src_ids] == sentence["source_ids"]
        if result.tgt_ids != sentence["output_ids"] or result.text != sentence["output"]:
            continue
        same += 1
        ours = result.token_probs.log()
        log_probability = max(log_probability, (ours - torch.tensor(sentence["log_probabilities"])).abs().max().item())
        attention = max(attention, (result.cross[-1][0] - torch.tensor(sentence["attention"])).abs().max().item())
    return same, log_probability, attention


def scored_differences(model, tokenizer, name: str) -> tuple[float, float]:
    """Over every dev sentence and Marian's translation of it, teacher-forced: the largest difference from Marian's
    scorer of a piece's log-probability and of the soft alignment."""
    log_probability, attention = 0.0, 0.0
    for sentence in recorded(name):
        scored = sentence["scored"]
        ids = source_ids(tokenizer, sentence["source"], model.config.max_len)[0]
        result = teacher_force_ids(model, tokenizer, ids, scored["target_ids"])
        ours = result.token_probs.log()
        log_probability = max(log_probability, (ours - torch.tensor(scored["log_probabilities"])).abs().max().item())
        attention = max(attention, (result.cross[-1][0] - torch.tensor(scored["attention"])).abs().max().item())
    return log_probability, attention


@pytest.mark.parametrize("name", POST_NORM)
def test_greedy_pieces_log_probabilities_and_alignment_equal_marians_translator(name):
    checkpoint = load_any_checkpoint(FIXTURES / name)
    sentences = recorded(name)
    assert len(sentences) == 20 and sum(len(s["output_ids"]) for s in sentences) > 300
    same, log_probability, attention = greedy_differences(checkpoint.model, checkpoint.tokenizer, name)
    assert same == len(sentences)
    assert log_probability < 1e-4 and attention < 1e-5


@pytest.mark.parametrize("name", MODELS)
def test_teacher_forced_log_probabilities_and_alignment_equal_marians_scorer(name):
    checkpoint = load_any_checkpoint(FIXTURES / name)
    log_probability, attention = scored_differences(checkpoint.model, checkpoint.tokenizer, name)
    assert log_probability < 1e-4 and attention < 1e-5


def test_vocabularies_with_pad_and_start_pieces_of_their_own_open_and_translate_as_marian_does():
    """Tried as a new user would: a Marian model whose SentencePiece vocabularies were trained with `<pad>` and `<s>`
    pieces (fairseq's spm_train recipe, `marian-pad`) was refused on every page, the zero row the decoder starts
    from having been named `<pad>`; Marian trains and translates with it."""
    checkpoint = load_any_checkpoint(FIXTURES / "marian-pad")
    tokenizer, config = checkpoint.tokenizer, checkpoint.config
    assert (tokenizer.id_to_piece(config.pad_id), tokenizer.id_to_piece(config.bos_id)) == ("<pad>", "<s>")
    assert tokenizer.id_to_piece(config.start_id) == "<start>" and config.start_id == config.tgt_vocab_size - 1
    assert greedy_differences(checkpoint.model, tokenizer, "marian-pad")[0] == 20
    log_probability, attention = scored_differences(checkpoint.model, tokenizer, "marian-pad")
    assert log_probability < 1e-4 and attention < 1e-5


def test_marians_translator_reads_a_pre_norm_decoder_otherwise_than_its_scorer_and_we_read_it_as_the_scorer():
    """Marian 1.12's translator, from its second step on, reads the decoder's self-attention keys and values from
    the stream before the norm (its fix for pre-norm applies only where the keys are the layer's input itself, and
    the cached steps are not); training and scoring read them normalised. We compute the model as trained: our
    greedy output differs from the translator's where that matters, and equals the scorer's reading throughout."""
    checkpoint = load_any_checkpoint(FIXTURES / "marian-prenorm")
    same, _, _ = greedy_differences(checkpoint.model, checkpoint.tokenizer, "marian-prenorm")
    assert same < 10
    first = recorded("marian-prenorm")[0]
    result = decode_text(checkpoint.model, checkpoint.tokenizer, first["source"])
    assert result.tgt_ids[0] == first["output_ids"][0]  # the first step reads normalised keys in both


# Each model read the wrong way: sinusoids with the paper's frequencies (not tensor2tensor's), the decoder started from
# its </s> row instead of a zero vector.
WRONG_READINGS = [{"sinusoid_frequencies": "paper"}, {"decoder_start_id": 0}]


@pytest.mark.parametrize("wrong", WRONG_READINGS, ids=lambda w: next(iter(w)))
def test_the_check_has_teeth_a_wrong_reading_fails_it(wrong):
    checkpoint = import_marian_npz(FIXTURES / "marian-tied")
    config = dataclasses.replace(checkpoint.config, **wrong)
    model, _ = model_from_tensors(config, unique_state(checkpoint.model), "cpu")
    same, log_probability, _ = greedy_differences(model.eval(), checkpoint.tokenizer, "marian-tied")
    assert same < 15 and log_probability > 0.05


def test_the_file_given_itself_opens_and_the_list_names_the_toolkit_and_the_pair_where_names_say_it():
    directory = FIXTURES / "marian-prenorm"
    by_file = load_any_checkpoint(directory / "model.npz")
    assert not by_file.config.tie_embeddings and by_file.config.norm_first and by_file.config.layer_norm_eps == 1e-9
    assert by_file.metadata["languages"] == {"src": "en", "tgt": "fr"}
    assert is_model_directory(directory) and not is_model_directory(FIXTURES)
    size = (directory / "model.npz").stat().st_size / 1e6
    assert describe_directory(directory) == f"marian-prenorm · en/fr · Marian · {size:.1f} MB"
    tied = FIXTURES / "marian-tied"
    assert describe_directory(tied) == f"marian-tied · Marian · {(tied / 'model.npz').stat().st_size / 1e6:.1f} MB"


def test_the_added_start_row_is_zero_and_never_written_and_source_only_pieces_are_never_written():
    checkpoint = import_marian_npz(FIXTURES / "marian-untied")
    tokenizer, model = checkpoint.tokenizer, checkpoint.model
    start = checkpoint.config.start_id
    assert tokenizer.pieces[start] == "<pad>" and start == tokenizer.vocab_size - 1
    assert (model.tgt_embed.lookup.weight[start] == 0).all()
    target = Tokenizer((FIXTURES / "marian-untied" / "vocab.fr.spm").read_bytes()).pieces
    beyond = list(range(len(target), tokenizer.vocab_size))
    assert len(beyond) > 1 and (model.generator.bias[beyond] == -1e4).all()


def options(**changed):
    return {**marian_options(read_npz(FIXTURES / "marian-tied" / "model.npz"), "model.npz"), **changed}


SPECIALS = {"start": 600, "unk": 1, "eos": 0}


@pytest.mark.parametrize("option", sorted(REFUSED_OPTIONS))
def test_each_option_this_format_cannot_hold_is_refused_naming_it(option):
    with pytest.raises(ConfigError, match=re.escape(REFUSED_OPTIONS[option])):
        marian_config(options(**{option: True}), 601, SPECIALS)


@pytest.mark.parametrize(
    "changed, named",
    [
        ({"type": "s2s"}, "the model type 's2s'"),
        ({"transformer-decoder-autoreg": "rnn", "dec-cell": "ssru"}, "a decoder of 'rnn' \\('ssru'\\)"),
        ({"transformer-decoder-autoreg": "average-attention"}, "a decoder of 'average-attention'"),
        ({"transformer-ffn-activation": "gelu"}, "the activation 'gelu'"),
        ({"transformer-preprocess": "n"}, "the layer processing n/dan/"),
        ({"transformer-postprocess-emb": "dn"}, "the embeddings' postprocessing 'dn'"),
        ({"transformer-ffn-depth": 3}, "feed-forward blocks of other than two layers"),
        ({"transformer-attention-mask": "alibi"}, "the attention mask 'alibi'"),
    ],
)
def test_other_models_are_refused_in_one_line_naming_what(changed, named):
    with pytest.raises(ConfigError, match=named) as refused:
        marian_config(options(**changed), 601, SPECIALS)
    assert "\n" not in str(refused.value)


def copied(tmp_path: Path, name: str = "marian-tied") -> Path:
    return Path(shutil.copytree(FIXTURES / name, tmp_path / name))


def rewritten(path: Path, arrays: dict[str, np.ndarray]) -> None:
    with zipfile.ZipFile(path, "w") as archive:
        for name, array in arrays.items():
            with archive.open(f"{name}.npy", "w") as member:
                np.lib.format.write_array(member, array, allow_pickle=True)


def test_an_archive_holding_a_pickle_that_would_run_code_is_refused_before_it_runs(tmp_path):
    directory = copied(tmp_path)
    marker = tmp_path / "marker"
    arrays = read_npz(directory / "model.npz")
    payload = np.empty(1, dtype=object)
    payload[0] = WritesAMarker(marker)
    rewritten(directory / "model.npz", {**arrays, "Wemb": payload})
    with np.load(directory / "model.npz", allow_pickle=True) as control:  # a reader that unpickles would run it
        control["Wemb"]
    assert marker.read_text() == "ran"
    marker.unlink()
    with pytest.raises(CheckpointError, match="holds Python objects"):
        load_any_checkpoint(directory)
    assert not marker.exists()


def test_an_array_declaring_more_than_the_archive_holds_is_refused_before_it_is_allocated(tmp_path):
    path = tmp_path / "model.npz"
    with zipfile.ZipFile(path, "w") as archive:
        with archive.open("Wemb.npy", "w") as member:
            np.lib.format.write_array_header_1_0(member, {"descr": "<f4", "fortran_order": False, "shape": (10**12,)})
            member.write(b"\0" * 64)
    with pytest.raises(CheckpointError, match="declares more data than the archive holds"):
        read_npz(path)


def test_an_archive_that_unpacks_past_the_memory_free_is_refused_before_it_is_read(tmp_path, monkeypatch):
    """A compressed member is small in the file and large unpacked: the file's size alone let 200 MB be read where
    50 MB was free."""
    import transformer.toolkits.arrays as arrays

    path = tmp_path / "model.npz"
    np.savez_compressed(path, Wemb=np.zeros(50_000_000, np.float32))
    assert path.stat().st_size < 1_000_000
    monkeypatch.setattr(arrays, "file_limit", lambda available: 50_000_000)
    with pytest.raises(CheckpointTooLarge, match="^model.npz unpacks to 0.20 GB; 0.05 GB opens now: not opened$"):
        read_npz(path)
    monkeypatch.setattr(arrays, "file_limit", lambda available: 1000)  # the file itself too large: said as such
    with pytest.raises(CheckpointTooLarge, match="^model.npz is 0.00 GB; 0.00 GB opens now: not opened$"):
        read_npz(path)


@pytest.mark.parametrize(
    "damage, message",
    [
        (lambda d: (d / "model.npz").write_bytes(b"not an archive"), "not a NumPy archive"),
        (lambda d: (d / "vocab.spm").unlink(), "lacks the vocabulary 'vocab.spm'"),
        (lambda d: (d / "model.npz.decoder.yml").write_text("vocabs: [vocab.yml, vocab.yml]\n"), "only SentencePiece"),
        (lambda d: (d / "model.npz.decoder.yml").write_text("vocabs: [\n"), "not YAML that can be read"),
        (lambda d: (d / "model.npz.decoder.yml").write_text("vocabs: [vocab.spm]\n"), "does not name two vocabularies"),
        (lambda d: (d / "model.npz").rename(d / "model.intgemm8.bin"), "binary .bin models are not read"),
        (lambda d: rewritten(d / "model.npz", {"Wemb": np.zeros((2, 2), np.float32)}), "holds no options"),
    ],
)
def test_a_damaged_directory_is_refused_with_what_is_wrong(tmp_path, damage, message):
    directory = copied(tmp_path)
    damage(directory)
    with pytest.raises(CheckpointError, match=message) as refused:
        import_marian_npz(directory)
    assert "\n" not in str(refused.value)


def test_an_array_of_another_model_is_refused_naming_it(tmp_path):
    directory = copied(tmp_path)
    arrays = read_npz(directory / "model.npz")
    rewritten(directory / "model.npz", {**arrays, "decoder_l1_aan_W1": np.zeros((64, 64), np.float32)})
    with pytest.raises(CheckpointError, match="unexpected array 'decoder_l1_aan_W1'"):
        import_marian_npz(directory)


def test_an_older_models_untransposed_output_layer_reads_as_the_transposed_one(tmp_path):
    """Marian stored the output layer as `_W` (width, vocabulary) before `_Wt` (vocabulary, width)."""
    directory = copied(tmp_path, "marian-untied")
    arrays = read_npz(directory / "model.npz")
    legacy = {name: array for name, array in arrays.items() if name != "decoder_ff_logit_out_Wt"}
    rewritten(directory / "model.npz", {**legacy, "decoder_ff_logit_out_W": arrays["decoder_ff_logit_out_Wt"].T})
    ours, theirs = import_marian_npz(directory).model, import_marian_npz(FIXTURES / "marian-untied").model
    assert torch.equal(ours.generator.weight, theirs.generator.weight)


def test_a_model_without_an_output_bias_reads_with_zeros_there(tmp_path):
    """--output-omit-bias: no decoder_ff_logit_out_b; the added start row is still never written."""
    directory = copied(tmp_path, "marian-untied")
    arrays = read_npz(directory / "model.npz")
    rewritten(directory / "model.npz", {name: a for name, a in arrays.items() if name != "decoder_ff_logit_out_b"})
    checkpoint = import_marian_npz(directory)
    bias, start = checkpoint.model.generator.bias, checkpoint.config.start_id
    target = len(Tokenizer((directory / "vocab.fr.spm").read_bytes()).pieces)
    assert (bias[:target] == 0).all() and bias[start] == -1e4


def test_the_command_line_translates_with_it_and_converts_it_once(tmp_path):
    directory = FIXTURES / "marian-untied"
    sentence = recorded("marian-untied")[0]
    translated = run_cli("translate", "--checkpoint", str(directory), stdin=sentence["source"] + "\n")
    assert translated.returncode == 0 and translated.stdout.strip() == sentence["output"]
    converted = run_cli("import-marian", str(directory), "--out", str(tmp_path / "m.safetensors"))
    assert converted.returncode == 0, converted.stderr
    checkpoint = load_checkpoint(tmp_path / "m.safetensors")
    assert decode_text(checkpoint.model, checkpoint.tokenizer, sentence["source"]).tgt_ids == sentence["output_ids"]
    assert checkpoint.metadata["imported"]["from"] == "Marian"


def test_a_marian_directory_among_the_checkpoints_works_on_every_page(tmp_path, monkeypatch):
    name = "marian-prenorm"
    size = (FIXTURES / name / "model.npz").stat().st_size / 1e6
    at = open_on_every_page(FIXTURES / name, tmp_path, monkeypatch, f"{name} · en/fr · Marian · {size:.1f} MB")
    sidebar = " ".join(caption.value for caption in at.sidebar.caption)
    assert "Imported from Marian" in sidebar, sidebar
