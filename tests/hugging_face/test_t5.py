"""Hugging Face T5 and Flan-T5 models, imported: logits, every attention map and greedy output equal transformers'
own, and every view works on them.

Offline: small random models (T5's ReLU with the output scale and tied output layer; T5 v1.1's and Flan-T5's gated
GELU without it) and a SentencePiece unigram model trained here are saved the way Hugging Face saves them.
"""

from __future__ import annotations

import pytest
import torch
from fixtures.hf_models import EditedCopy, hf_greedy, save_t5
from helpers import (
    assert_follows_the_format,
    assert_same_as_transformers,
    make_sentences,
    open_on_every_page,
    weights_megabytes,
)
from transformers import MT5ForConditionalGeneration, T5ForConditionalGeneration, T5Tokenizer

from transformer.analysis.walkthrough import attention_stages, sublayer_inputs
from transformer.decoding.greedy import decode_with_chooser
from transformer.decoding.strategies import DecodeSettings, decode_text
from transformer.decoding.translate import translate_texts
from transformer.hugging_face.directory import describe_hf, import_hf
from transformer.io.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from transformer.model.kinds import AttentionKind

SENTENCES = ["the red dog runs.", "a woman jumps in the blue park", "le chien rouge court!"]
CORPUS = [" ".join(s.split()) for s in make_sentences(300, seed=1)] + ["le chien rouge court la femme!"] * 20


@pytest.fixture(scope="module", params=["t5", "flan", "mt5"])
def t5(request, tmp_path_factory):
    """(directory, transformers' model, its tokenizer) for each variant."""
    variant = request.param
    directory = save_t5(
        tmp_path_factory.mktemp(f"{variant}-tiny"), CORPUS, flan=variant == "flan", multilingual=variant == "mt5"
    )
    model_class = MT5ForConditionalGeneration if variant == "mt5" else T5ForConditionalGeneration
    model = model_class.from_pretrained(directory, attn_implementation="eager").eval()
    return directory, model, T5Tokenizer.from_pretrained(directory)


@pytest.mark.parametrize("sentence", SENTENCES)
def test_logits_and_every_attention_map_equal_transformers(t5, sentence):
    directory, hf_model, hf_tokenizer = t5
    ours = import_hf(directory)
    src_ids = hf_tokenizer(sentence)["input_ids"]
    assert decode_with_chooser(ours.model, ours.tokenizer, sentence).src_ids == src_ids  # the pieces and </s>
    decoder_input = [ours.config.start_id, 12, 5, 9, 12, 5, 9, 12, 5, 9, 12]  # past the exact relative buckets
    assert_same_as_transformers(ours.model, hf_model, src_ids, decoder_input, layers=2)


@pytest.mark.parametrize("sentence", SENTENCES)
def test_greedy_decoding_equals_generate(t5, sentence):
    directory, hf_model, hf_tokenizer = t5
    ours = import_hf(directory)
    result = decode_text(ours.model, ours.tokenizer, sentence, DecodeSettings(max_new_tokens=16))
    generated = hf_greedy(hf_model, hf_tokenizer(sentence)["input_ids"], 16)
    assert [ours.config.start_id, *result.tgt_ids] == generated
    assert result.text == hf_tokenizer.decode(generated, skip_special_tokens=True) and result.text.strip()
    # the batched translation (the CLI's and Corpus'), with rows of other lengths beside it, and beam search
    batch = translate_texts(
        ours.model, ours.tokenizer, [sentence, "the cat", SENTENCES[1]], DecodeSettings(max_new_tokens=16)
    )
    assert batch[0] == result.text
    beam = decode_text(ours.model, ours.tokenizer, sentence, DecodeSettings(strategy="beam", beam_width=3))
    assert (
        beam.text
        == translate_texts(ours.model, ours.tokenizer, [sentence, "the cat"], DecodeSettings("beam", beam_width=3))[0]
    )


def test_the_imported_file_round_trips_and_follows_the_format(t5, tmp_path):
    directory, *_ = t5
    imported = import_hf(directory)
    size = weights_megabytes(directory)
    assert describe_hf(directory) in (
        f"{directory.name} · Hugging Face T5 · {size}",
        f"{directory.name} · Hugging Face mT5 · {size}",
    )
    save_checkpoint(tmp_path / "t5.safetensors", imported.model, imported.tokenizer)
    loaded = load_checkpoint(tmp_path / "t5.safetensors")
    config = loaded.config
    assert (config.norm, config.bias, config.attention_scale, config.positional) == ("rms", False, False, "relative")
    assert (
        loaded.tokenizer.same_as(imported.tokenizer)
        and loaded.tokenizer.id_to_piece(config.src_vocab_size - 1) == "<unused11>"
    )
    assert_follows_the_format(tmp_path / "t5.safetensors", loaded, SENTENCES)


@pytest.mark.parametrize("kind", list(AttentionKind))
def test_the_step_by_step_page_recomputes_the_model_own_attention(t5, kind):
    directory, *_ = t5
    ours = import_hf(directory)
    result = decode_with_chooser(ours.model, ours.tokenizer, SENTENCES[0])
    inputs = sublayer_inputs(ours.model, result.src_ids, result.tgt_ids, kind, 1)
    assert (inputs.position_bias is None) == (kind is AttentionKind.CROSS)  # self-attention only
    for head in range(ours.config.n_heads):
        stages = attention_stages(inputs, head)
        torch.testing.assert_close(stages.p_attn, inputs.p_attn[head], atol=1e-6, rtol=1e-5)
    torch.testing.assert_close(stages.output, inputs.output, atol=1e-5, rtol=1e-5)


def test_what_cannot_be_read_is_one_clear_line(t5, tmp_path):
    directory, *_ = t5
    copy = EditedCopy(directory, tmp_path / "broken")
    broken = copy.path
    copy.with_fields(d_kv=8)
    with pytest.raises(CheckpointError, match=r"an attention width \(num_heads x d_kv\) other than d_model"):
        import_hf(broken)
    copy.with_fields(num_layers=3)
    with pytest.raises(CheckpointError, match="the weights do not fit the config: encoder_layers.2"):
        import_hf(broken)
    copy.with_fields(vocab_size=10**9)
    with pytest.raises(CheckpointError, match="does not fit the tokenizer's"):
        import_hf(broken)
    copy.with_fields(model_type="longt5")  # a variant: the reason
    with pytest.raises(CheckpointError, match="LongT5 attends locally .* which this format cannot hold"):
        import_hf(broken)


@pytest.mark.parametrize("d_kv", [[0], "x", 8.0, True, 10**12])
def test_a_config_value_of_the_wrong_type_is_refused_before_it_is_used(t5, tmp_path, d_kv):
    """A list as d_kv was multiplied by num_heads (3e8) into 2.6 GB before any check; every importer checks the
    type of every number it reads first."""
    from helpers import measured

    directory, *_ = t5
    copy = EditedCopy(directory, tmp_path / "broken")
    broken = copy.path
    copy.with_fields(d_kv=d_kv, num_heads=300_000_000)
    with measured() as cost, pytest.raises(CheckpointError, match=r"config.json's (d_kv|num_heads) is .*, not an"):
        import_hf(broken)
    assert cost.peak_growth_mb < 100, cost
    assert describe_hf(broken) == "broken · Hugging Face (config.json unreadable)"


def test_a_t5_directory_works_on_every_page(t5, tmp_path, monkeypatch):

    directory, *_ = t5
    label = describe_hf(directory)
    assert label.endswith(
        (f"Hugging Face T5 · {weights_megabytes(directory)}", f"Hugging Face mT5 · {weights_megabytes(directory)}")
    )
    at = open_on_every_page(directory, tmp_path, monkeypatch, label)
    at = at.switch_page("pages/positional.py").run()  # the relative positions' bias, not sinusoids
    assert not at.exception and at.radio(key="relative_side").value == "encoder"
    at = at.radio(key="relative_side").set_value("decoder").run()
    assert not at.exception and "relative_matrix" in str(at.get("plotly_chart"))
