"""Hugging Face BART and mBART-50 models, imported: logits, every attention map and greedy output equal
transformers' own.

Offline: small random models and tokenizers trained here (a byte-level BPE for BART, a SentencePiece unigram model
for mBART-50) are saved the way Hugging Face saves them; nothing is downloaded.
"""

from __future__ import annotations

import shutil

import pytest
from fixtures.hf_models import EditedCopy, hf_greedy, save_bart, save_mbart50
from helpers import (
    assert_follows_the_format,
    assert_same_as_transformers,
    make_sentences,
    open_on_every_page,
    weights_megabytes,
)
from transformers import (
    BartForConditionalGeneration,
    BartTokenizer,
    MBart50Tokenizer,
    MBartForConditionalGeneration,
)

from transformer.decoding.greedy import decode_with_chooser
from transformer.decoding.strategies import DecodeSettings, decode_text
from transformer.decoding.translate import translate_texts
from transformer.hugging_face.bart import import_bart
from transformer.hugging_face.directory import import_hf
from transformer.io.checkpoint import CheckpointError, load_checkpoint, save_checkpoint

SENTENCES = ["the red dog runs.", "a woman jumps in the blue park", "le chien rouge court!"]
CORPUS = [" ".join(s.split()) for s in make_sentences(300, seed=1)] + ["le chien rouge court la femme!"] * 20


@pytest.fixture(scope="module")
def mbart_dir(tmp_path_factory):
    """A saved random mBART-50 model (pre-norm, final and embedding norms, learned positions from row 2) with its
    tokenizer, en_XX→fr_XX."""
    return save_mbart50(tmp_path_factory.mktemp("mbart50-tiny"), CORPUS)


@pytest.fixture(scope="module")
def bart_dir(tmp_path_factory):
    """A saved random BART model (post-norm, embedding norms, learned positions from row 2) with a byte-level BPE."""
    return save_bart(tmp_path_factory.mktemp("bart-tiny"), CORPUS)


FAMILIES = {
    "mbart": (MBartForConditionalGeneration, MBart50Tokenizer, "fr_XX"),
    "bart": (BartForConditionalGeneration, BartTokenizer, None),
}


@pytest.fixture(scope="module", params=sorted(FAMILIES))
def family(request, mbart_dir, bart_dir):
    """(name, directory, transformers' model, its tokenizer, the forced first output token's id)."""
    model_class, tokenizer_class, target = FAMILIES[request.param]
    directory = {"mbart": mbart_dir, "bart": bart_dir}[request.param]
    model = model_class.from_pretrained(directory, attn_implementation="eager").eval()
    tokenizer = tokenizer_class.from_pretrained(directory)
    forced = model.generation_config.forced_bos_token_id if target is None else tokenizer.convert_tokens_to_ids(target)
    return request.param, directory, model, tokenizer, forced


@pytest.mark.parametrize("sentence", SENTENCES)
def test_logits_and_every_attention_map_equal_transformers(family, sentence):
    _, directory, hf_model, hf_tokenizer, forced = family
    ours = import_hf(directory)
    src_ids = hf_tokenizer(sentence)["input_ids"]
    result = decode_with_chooser(ours.model, ours.tokenizer, sentence)
    assert result.src_ids == src_ids  # <s> or en_XX, the same pieces and ids, </s>
    decoder_input = [ours.config.start_id, forced, 12, 5, 9]
    assert_same_as_transformers(ours.model, hf_model, src_ids, decoder_input, layers=2)


@pytest.mark.parametrize("sentence", SENTENCES)
def test_greedy_decoding_equals_generate_with_the_forced_first_token(family, sentence):
    _, directory, hf_model, hf_tokenizer, forced = family
    ours = import_hf(directory)
    result = decode_text(ours.model, ours.tokenizer, sentence, DecodeSettings(max_new_tokens=12))
    src_ids = hf_tokenizer(sentence)["input_ids"]
    generated = hf_greedy(hf_model, src_ids, 12, forced_bos_token_id=forced, forced_eos_token_id=None)  # ours stops
    assert [ours.config.start_id, *result.tgt_ids] == generated and result.tgt_ids[0] == forced
    assert result.text == hf_tokenizer.decode(generated, skip_special_tokens=True) and result.text.strip()
    # the batched translation (the CLI's and Corpus') and beam search force the first token too
    assert translate_texts(ours.model, ours.tokenizer, [sentence], DecodeSettings(max_new_tokens=12)) == [result.text]
    beam = decode_text(ours.model, ours.tokenizer, sentence, DecodeSettings(strategy="beam", beam_width=3))
    assert beam.tgt_ids[0] == forced


def test_the_imported_file_round_trips_and_follows_the_format(family, tmp_path):
    name, directory, *_ = family
    imported = import_hf(directory)
    save_checkpoint(tmp_path / "model.safetensors", imported.model, imported.tokenizer)
    loaded = load_checkpoint(tmp_path / "model.safetensors")
    assert (loaded.config.embedding_norm, loaded.config.position_offset) == (True, 2)
    assert loaded.config.norm_first == (name == "mbart")
    assert loaded.tokenizer.same_as(imported.tokenizer)
    assert_follows_the_format(tmp_path / "model.safetensors", loaded, SENTENCES)


def test_words_of_pieces_follow_the_text(family):
    _, directory, *_ = family
    tokenizer = import_hf(directory).tokenizer
    ids, words = tokenizer.encode_words("the red dog runs.")
    assert ids == tokenizer.encode("the red dog runs.")
    assert words[0] == range(0, 1) and words[-1] == range(3, 4)  # "the" ... "runs." (its full stop too)
    assert sorted({w for r in words for w in r}) == [0, 1, 2, 3]


def test_mbart_languages_are_listed_and_chosen(mbart_dir):
    tokenizer = import_bart(mbart_dir).tokenizer
    codes = [tokenizer.id_to_piece(i) for i in tokenizer.code_ids]
    assert {"en_XX", "fr_XX", "de_DE"} <= set(codes) and len(codes) == 52
    german = import_bart(mbart_dir, target_language="de_DE")
    result = decode_text(german.model, german.tokenizer, SENTENCES[0], DecodeSettings(max_new_tokens=6))
    assert result.tgt_pieces[0] == "de_DE" and "de_DE" not in result.text
    with pytest.raises(CheckpointError, match="no language code 'xx_XX'; the model knows ar_AR, "):
        import_bart(mbart_dir, target_language="xx_XX")


def test_bart_reads_vocab_and_merges_when_there_is_no_tokenizer_json(bart_dir, tmp_path):
    copy = tmp_path / "bart-files"
    shutil.copytree(bart_dir, copy)
    (copy / "tokenizer.json").unlink()
    from_files, from_json = import_hf(copy).tokenizer, import_hf(bart_dir).tokenizer
    for sentence in SENTENCES:
        assert from_files.encode(sentence) == from_json.encode(sentence)
        assert from_files.decode(from_files.encode(sentence)) == sentence


def test_what_cannot_be_read_is_one_clear_line(mbart_dir, tmp_path):
    copy = EditedCopy(mbart_dir, tmp_path / "broken")
    broken = copy.path
    copy.with_fields(decoder_layers=3)  # lies about its tensors
    with pytest.raises(CheckpointError, match="the weights do not fit the config: decoder_layers.2"):
        import_hf(broken)
    copy.with_fields()
    copy.with_fields("tokenizer_config.json", tokenizer_class="MBartTokenizer")
    with pytest.raises(CheckpointError, match="mBART's puts the language code after the text"):
        import_hf(broken)
    copy.with_fields("tokenizer_config.json")
    (broken / "tokenizer.json").write_text("{not json")
    with pytest.raises(CheckpointError, match="not a tokenizer.json"):
        import_hf(broken)
    (broken / "tokenizer.json").unlink()
    with pytest.raises(CheckpointError, match="lacks the tokenizer file"):
        import_hf(broken)


def test_a_bart_directory_among_the_checkpoints_works_on_every_page(bart_dir, tmp_path, monkeypatch):

    open_on_every_page(
        bart_dir, tmp_path, monkeypatch, f"{bart_dir.name} · Hugging Face BART · {weights_megabytes(bart_dir)}"
    )


def test_an_mbart_directory_works_on_every_page_and_translates_into_the_language_chosen(
    mbart_dir, tmp_path, monkeypatch
):

    at = open_on_every_page(
        mbart_dir,
        tmp_path,
        monkeypatch,
        f"{mbart_dir.name} · en_XX→fr_XX · Hugging Face mBART-50 · {weights_megabytes(mbart_dir)}",
    )
    into = at.selectbox(key="widget_target_language")
    assert into.value == "fr_XX" and {"German · de_DE", "French · fr_XX"} <= set(into.options)  # name or code finds it
    assert at.session_state.result.tgt_pieces[0] == "fr_XX"
    at = into.set_value("de_DE").run()  # no new click: the sentence is translated again, into German
    assert not at.exception and at.session_state.result.tgt_pieces[0] == "de_DE"
    sidebar = " ".join(caption.value for caption in at.sidebar.caption)
    assert r"translating en\_XX→de\_DE" in sidebar  # markdown-escaped
    assert at.query_params["into"] == "de_DE"
    from helpers import start

    linked = start({"ckpt": mbart_dir.name, "into": "de_DE", "text": "the red dog runs"})  # the link opens that pair
    assert not linked.exception and linked.session_state.result.tgt_pieces[0] == "de_DE"
    # a model without languages: no chooser
    at = at.selectbox(key="widget_checkpoint").set_value("en-fr-captions").run()
    assert not at.exception and "widget_target_language" not in [box.key for box in at.selectbox]
