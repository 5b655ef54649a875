"""Hugging Face M2M100 models, imported: logits, every attention map and greedy output equal transformers' own.

Offline: a small random M2M100ForConditionalGeneration and a tiny SentencePiece model are made here and saved
the way Hugging Face saves them; nothing is downloaded.
"""

from __future__ import annotations

import numpy as np
import pytest
from fixtures.hf_models import TINY, EditedCopy, hf_greedy, save_m2m100, save_nllb, weights_as_a_pickle
from helpers import assert_same_as_transformers, make_sentences, open_on_every_page, step_view, weights_megabytes
from transformers import M2M100ForConditionalGeneration, M2M100Tokenizer

from transformer.decoding.greedy import decode_with_chooser
from transformer.decoding.strategies import DecodeSettings, decode_text
from transformer.decoding.translate import translate_texts
from transformer.hugging_face.directory import describe_hf, import_hf
from transformer.hugging_face.m2m100 import import_m2m100
from transformer.io.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from transformer.text.pieces import readable
from transformer.viz.charts import token_probabilities

SENTENCES = ["the red dog runs", "a woman jumps in the blue park", "le chien rouge court"]


@pytest.fixture(scope="module")
def m2m_dir(tmp_path_factory):
    """A saved random M2M100 model (pre-norm, final norms, offset sinusoids) with its tokenizer files, en→fr."""
    sentences = [" ".join(s.split()) for s in make_sentences(300, seed=1)] + ["le chien rouge court la femme"] * 20
    return save_m2m100(tmp_path_factory.mktemp("m2m100-tiny"), sentences)


@pytest.fixture(scope="module")
def hugging_face(m2m_dir):
    model = M2M100ForConditionalGeneration.from_pretrained(m2m_dir, attn_implementation="eager").eval()
    return model, M2M100Tokenizer.from_pretrained(m2m_dir)


@pytest.mark.parametrize("sentence", SENTENCES)
def test_logits_and_every_attention_map_equal_transformers(m2m_dir, hugging_face, sentence):
    hf_model, hf_tokenizer = hugging_face
    ours = import_m2m100(m2m_dir)
    src_ids = hf_tokenizer(sentence)["input_ids"]
    result = decode_with_chooser(ours.model, ours.tokenizer, sentence)
    assert result.src_ids == src_ids  # __en__, the same pieces and ids, </s>
    decoder_input = [ours.config.start_id, hf_tokenizer.get_lang_id("fr"), 12, 5, 9]
    assert_same_as_transformers(ours.model, hf_model, src_ids, decoder_input, layers=2)


@pytest.mark.parametrize("sentence", SENTENCES)
def test_greedy_decoding_equals_generate_with_the_forced_language(m2m_dir, hugging_face, sentence):
    hf_model, hf_tokenizer = hugging_face
    ours = import_m2m100(m2m_dir)
    result = decode_text(ours.model, ours.tokenizer, sentence, DecodeSettings(max_new_tokens=12))
    src_ids = hf_tokenizer(sentence)["input_ids"]
    generated = hf_greedy(hf_model, src_ids, 12, forced_bos_token_id=hf_tokenizer.get_lang_id("fr"))
    assert [ours.config.start_id, *result.tgt_ids] == generated
    text = [i for i in generated if i not in hf_tokenizer.lang_token_to_id.values()]  # codes are not text
    assert result.tgt_pieces[0] == "__fr__" and result.text == hf_tokenizer.decode(text, skip_special_tokens=True)
    assert result.text.strip()
    # the batched translation (the CLI's and Corpus') and beam search force the language too
    assert translate_texts(ours.model, ours.tokenizer, [sentence], DecodeSettings(max_new_tokens=12)) == [result.text]
    beam = decode_text(ours.model, ours.tokenizer, sentence, DecodeSettings(strategy="beam", beam_width=3))
    assert beam.tgt_pieces[0] == "__fr__"
    batch = translate_texts(ours.model, ours.tokenizer, [sentence, "the cat"], DecodeSettings("beam", beam_width=3))
    assert batch[0] == beam.text


def test_another_target_language_is_forced_instead(m2m_dir, hugging_face):
    hf_model, hf_tokenizer = hugging_face
    ours = import_m2m100(m2m_dir, target_language="de")
    result = decode_text(ours.model, ours.tokenizer, SENTENCES[0], DecodeSettings(max_new_tokens=8))
    src_ids = hf_tokenizer(SENTENCES[0])["input_ids"]
    generated = hf_greedy(hf_model, src_ids, 8, forced_bos_token_id=hf_tokenizer.get_lang_id("de"))
    assert [ours.config.start_id, *result.tgt_ids] == generated and result.tgt_pieces[0] == "__de__"
    with pytest.raises(CheckpointError, match="no language code 'xx'"):
        import_m2m100(m2m_dir, target_language="xx")


def test_the_imported_file_round_trips_and_follows_the_format(m2m_dir, tmp_path):
    from numpy_reference import ReferenceModel

    imported = import_hf(m2m_dir)
    save_checkpoint(tmp_path / "m2m.safetensors", imported.model, imported.tokenizer)
    loaded = load_checkpoint(tmp_path / "m2m.safetensors")
    assert (loaded.config.position_offset, loaded.config.sinusoid_frequencies) == (2, "tensor2tensor")
    assert loaded.tokenizer.same_as(imported.tokenizer) and loaded.tokenizer.target_prefix == "__fr__"
    for sentence in SENTENCES:
        reference = ReferenceModel(str(tmp_path / "m2m.safetensors")).greedy(sentence)
        result = decode_with_chooser(loaded.model, loaded.tokenizer, sentence)
        assert reference["src_ids"] == result.src_ids and reference["tgt_ids"] == result.tgt_ids
        np.testing.assert_allclose(reference["encoder_self"], result.encoder_self.numpy(), atol=1e-5)
        np.testing.assert_allclose(reference["cross"], result.cross.numpy(), atol=1e-5)


def test_what_cannot_be_read_is_one_clear_line(m2m_dir, tmp_path):
    copy = EditedCopy(m2m_dir, tmp_path / "broken")
    broken = copy.path
    copy.with_fields(encoder_layers=3)  # lies about its tensors
    with pytest.raises(CheckpointError, match="the weights do not fit the config: encoder_layers.2"):
        import_hf(broken)
    copy.with_fields(decoder_ffn_dim=64)
    with pytest.raises(CheckpointError, match="different feed-forward widths"):
        import_hf(broken)
    copy.with_fields()
    weights_as_a_pickle(broken)
    with pytest.raises(CheckpointError, match="pytorch_model.bin is a pickle and is not read"):
        import_hf(broken)
    copy.with_fields(model_type="pegasus")
    with pytest.raises(CheckpointError, match="not a Hugging Face model directory of a family read here"):
        import_hf(broken)


def test_the_command_line_converts_and_translates(m2m_dir, tmp_path, capsys):
    from transformer.cli import main

    out = tmp_path / "m2m.safetensors"
    assert main(["import-hf", str(m2m_dir), "--out", str(out)]) == 0
    assert "wrote" in capsys.readouterr().out
    (tmp_path / "in.txt").write_text("the red dog runs\n")
    expected = decode_with_chooser(load_checkpoint(out).model, load_checkpoint(out).tokenizer, "the red dog runs").text
    for checkpoint in (str(out), str(m2m_dir)):
        assert main(["translate", "--checkpoint", checkpoint, "--input", str(tmp_path / "in.txt")]) == 0
        assert capsys.readouterr().out.strip() == expected


def test_an_m2m100_directory_among_the_checkpoints_works_on_every_page(m2m_dir, tmp_path, monkeypatch):

    at = open_on_every_page(
        m2m_dir, tmp_path, monkeypatch, f"{m2m_dir.name} · en→fr · Hugging Face M2M100 · {weights_megabytes(m2m_dir)}"
    )
    sidebar = " ".join(caption.value for caption in at.sidebar.caption)
    assert "Imported from Hugging Face M2M100, translating en→fr" in sidebar


@pytest.fixture(scope="module")
def nllb_dir(tmp_path_factory):
    """A saved random NLLB-200 model (M2M100's class, two embedding rows past the tokens) with a BPE tokenizer.json
    and the 202 language codes, eng_Latn→fra_Latn."""
    corpus = [" ".join(s.split()) + "." for s in make_sentences(300, seed=1)] + ["le chien rouge court la femme!"] * 20
    return save_nllb(tmp_path_factory.mktemp("nllb-tiny"), corpus)


@pytest.mark.parametrize("target", ["fra_Latn", "deu_Latn"])
def test_nllb_equals_transformers_in_logits_maps_and_greedy_output(nllb_dir, target):
    from transformers import NllbTokenizer

    hf_model = M2M100ForConditionalGeneration.from_pretrained(nllb_dir, attn_implementation="eager").eval()
    hf_tokenizer = NllbTokenizer.from_pretrained(nllb_dir, src_lang="eng_Latn", tgt_lang=target)
    ours = import_hf(nllb_dir) if target == "fra_Latn" else import_m2m100(nllb_dir, target_language=target)
    assert ours.metadata["imported"]["from"] == "Hugging Face NLLB-200"
    # the checkpoint list gives its name, languages, family and size (it gave the family alone)
    assert (
        describe_hf(nllb_dir)
        == f"{nllb_dir.name} · eng_Latn→fra_Latn · Hugging Face NLLB-200 · {weights_megabytes(nllb_dir)}"
    )
    assert ours.tokenizer.vocab_size == hf_model.config.vocab_size == len(hf_tokenizer) + 2
    forced = hf_tokenizer.convert_tokens_to_ids(target)
    for sentence in ("the red dog runs.", "a woman jumps in the blue park."):
        src_ids = hf_tokenizer(sentence)["input_ids"]
        assert (
            decode_with_chooser(ours.model, ours.tokenizer, sentence).src_ids == src_ids
        )  # eng_Latn, the pieces, </s>
        assert_same_as_transformers(ours.model, hf_model, src_ids, [2, forced, 12, 5, 9], layers=2)
        result = decode_text(ours.model, ours.tokenizer, sentence, DecodeSettings(max_new_tokens=12))
        generated = hf_greedy(hf_model, src_ids, 12, forced_bos_token_id=forced)
        assert [2, *result.tgt_ids] == generated and result.tgt_pieces[0] == target
        assert result.text == hf_tokenizer.decode(generated, skip_special_tokens=True) and result.text.strip()


def test_nllb_round_trips_through_the_format(nllb_dir, tmp_path):
    from numpy_reference import ReferenceModel

    imported = import_hf(nllb_dir)
    save_checkpoint(tmp_path / "nllb.safetensors", imported.model, imported.tokenizer)
    loaded = load_checkpoint(tmp_path / "nllb.safetensors")
    assert loaded.tokenizer.same_as(imported.tokenizer) and loaded.tokenizer.target_prefix == "fra_Latn"
    assert loaded.tokenizer.id_to_piece(loaded.tokenizer.vocab_size - 1) == "<unused1>"  # the rows past the tokens
    reference = ReferenceModel(str(tmp_path / "nllb.safetensors")).greedy("the red dog runs.")
    result = decode_with_chooser(loaded.model, loaded.tokenizer, "the red dog runs.")
    assert reference["src_ids"] == result.src_ids and reference["tgt_ids"] == result.tgt_ids
    np.testing.assert_allclose(reference["cross"], result.cross.numpy(), atol=1e-5)


@pytest.mark.parametrize("family", ["m2m", "nllb"])
def test_a_vocab_size_far_past_the_tokens_is_refused_before_anything_is_built(family, m2m_dir, nllb_dir, tmp_path):
    copy = EditedCopy(m2m_dir if family == "m2m" else nllb_dir, tmp_path / "broken")
    broken = copy.path
    copy.with_fields(vocab_size=10**9)  # a list of 10^9 names
    with pytest.raises(CheckpointError, match="vocab_size 1000000000 does not fit the tokenizer's"):
        import_hf(broken)
    if family == "nllb":
        copy.with_fields()
        copy.with_fields("tokenizer_config.json", legacy_behaviour=True)
        with pytest.raises(CheckpointError, match="legacy_behaviour puts the language code after the text"):
            import_hf(broken)


def test_an_nllb_directory_works_on_every_page_in_the_language_chosen(nllb_dir, tmp_path, monkeypatch):

    at = open_on_every_page(
        nllb_dir,
        tmp_path,
        monkeypatch,
        f"{nllb_dir.name} · eng_Latn→fra_Latn · Hugging Face NLLB-200 · {weights_megabytes(nllb_dir)}",
    )
    assert at.selectbox(key="widget_source_language").value == "eng_Latn"
    # the chooser lists names with the codes (it listed "deu_Latn" alone: typing "German" found nothing)
    assert {"English · eng_Latn", "German · deu_Latn"} <= set(at.selectbox(key="widget_target_language").options)
    at = at.selectbox(key="widget_target_language").set_value("deu_Latn").run()
    assert not at.exception and at.session_state.result.tgt_pieces[0] == "deu_Latn"
    # The language code the output is forced to start with is said to be forced, shown as the code it is (it
    # showed as "·deu_Latn", a piece carrying on a word, at an unremarked probability), and left out of the bars.
    view = step_view(at.switch_page("pages/explorer.py").run())
    assert view["forced"] == 1 and view["next"][0] == "deu_Latn"
    result = at.session_state.result
    chart = token_probabilities(result.tgt_pieces, result.token_probs.numpy(), forced=result.forced)
    assert list(chart.data[0].x[:1]) == ["deu_Latn"] and chart.data[0].marker.color[0] != chart.data[0].marker.color[1]
    assert "forced" in chart.data[0].customdata[0] and chart.data[0].customdata[1] == ""


def test_language_codes_read_as_codes_and_word_pieces_as_pieces():
    assert [readable(p) for p in ("fra_Latn", "fr_XX", "__fr__", "ent", "▁chat")] == [
        "fra_Latn",
        "fr_XX",
        "__fr__",
        "·ent",
        "chat",
    ]


def test_an_import_holds_the_weights_once_not_the_file_beside_them(tmp_path):
    """Mapped whole (safetensors' load_file), the file stayed resident beside the weights laid out from it until the
    last was: NLLB-600M's import peaked at 5.2 GB for 2.5 GB of weights; and checking the finiteness of a whole
    weight made twice its size in temporaries. Now each tensor's mapping goes as it is laid out."""
    from helpers import measured

    wide = dict(d_model=1024, encoder_ffn_dim=4096, decoder_ffn_dim=4096, encoder_layers=1, decoder_layers=1)
    directory = save_nllb(tmp_path, SENTENCES * 5, {**TINY, **wide})
    weights_mb = (directory / "model.safetensors").stat().st_size / 2**20
    import_hf(directory)  # the first import loads what is imported lazily and the meta device's kernels
    with measured() as cost:
        checkpoint = import_hf(directory)
    # the weights once, the largest in flight and the allocator's slack (1.1-1.26 times); 1.76 times mapped whole
    assert weights_mb > 100 and cost.peak_growth_mb < 1.45 * weights_mb, (weights_mb, cost)
    assert checkpoint.model.decoder_layers[0].feed_forward.outer.weight.t().is_contiguous()  # laid out, not mapped


def test_the_file_an_import_writes_opens_holding_its_bytes_and_weights_never_a_third_copy(tmp_path):
    """A checkpoint file is read whole (a file replaced meanwhile cannot mix two versions); its tensors were then
    copied out of the bytes before the model laid them out, so the bytes, the copies and the weight being laid out
    (NLLB-600M's 1 GB embedding) were held at once: 6.2 GB for a 2.3 GiB file. The tensors are now views of the
    bytes until laid out."""
    import dataclasses

    from helpers import measured

    from transformer.model.encoder_decoder import Transformer

    imported = import_hf(save_nllb(tmp_path, SENTENCES * 5))
    tokenizer = imported.tokenizer.padded_to(60_000)  # an embedding of 60,000 x 1,024: the largest weight by far
    size = tokenizer.vocab_size
    config = dataclasses.replace(imported.config, src_vocab_size=size, tgt_vocab_size=size, d_model=1024)
    save_checkpoint(tmp_path / "nllb.safetensors", Transformer(config), tokenizer, imported.metadata)
    file_mb = (tmp_path / "nllb.safetensors").stat().st_size / 2**20
    load_checkpoint(tmp_path / "nllb.safetensors")  # the first load imports what is imported lazily
    with measured() as cost:
        loaded = load_checkpoint(tmp_path / "nllb.safetensors")
    assert file_mb > 300 and cost.peak_growth_mb < 2.3 * file_mb, (file_mb, cost)
    embedding = loaded.model.generator.weight
    assert embedding.shape == (size, 1024) and embedding.t().is_contiguous()  # laid out, no view of the bytes
