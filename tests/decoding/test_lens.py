"""The logit lens: each decoder layer's output read by the model's own final norm and generator."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from helpers import measured, tiny_config

from transformer.decoding.beam import beam_search
from transformer.decoding.forcing import teacher_force_ids
from transformer.decoding.greedy import decode_with_chooser
from transformer.decoding.lens import LENS_TOP, LogitLens, read_lens
from transformer.decoding.result import source_ids
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint
from transformer.model.encoder_decoder import Transformer

SENTENCE = "A man in a red shirt is riding a bicycle down the street."


@pytest.fixture(scope="module")
def shipped():
    return load_checkpoint(DEFAULT_CHECKPOINT)


@pytest.fixture(scope="module", params=[False, True], ids=["post-norm", "pre-norm"])
def random_model(request, tokenizer):
    torch.manual_seed(1)
    return Transformer(tiny_config(tokenizer, norm_first=request.param)).eval()


def cut_after(model: Transformer, layer: int) -> Transformer:
    """The same model with its decoder ending at `layer` (its final norm and generator kept)."""
    config = dataclasses.replace(model.config, n_decoder_layers=layer + 1)
    cut = Transformer(config).eval()
    kept = {
        k: v
        for k, v in model.state_dict().items()
        if not k.startswith("decoder_layers.") or int(k.split(".")[1]) <= layer
    }
    cut.load_state_dict(kept)
    return cut


def decodes(model, tokenizer, text):
    ids, _ = source_ids(tokenizer, text, model.config.max_len)
    greedy = decode_with_chooser(model, tokenizer, text)
    return {
        "greedy": greedy,
        "beam": beam_search(model, tokenizer, text, width=3),
        "teacher forcing": teacher_force_ids(model, tokenizer, ids, greedy.tgt_ids),
    }


def test_the_last_layers_lens_is_the_models_output_distribution(random_model, tokenizer):
    for strategy, result in decodes(random_model, tokenizer, "the red ball").items():
        lens = result.lens
        layers = random_model.config.n_decoder_layers
        assert lens.top_ids.shape == lens.top_probs.shape == (layers, result.steps, LENS_TOP), strategy
        assert torch.equal(lens.top_ids[-1], result.topk_ids[:, :LENS_TOP]), strategy
        assert torch.equal(lens.top_probs[-1], result.topk_probs[:, :LENS_TOP]), strategy
        assert torch.equal(lens.chosen_probs[-1], result.token_probs), strategy
        above = (result.topk_probs > result.token_probs[:, None]).sum(dim=1) + 1  # the rank from the top 10
        assert torch.equal(lens.chosen_rank[-1], above), strategy
    # and the lens itself, on the last layer's output, is the model's output head
    ids = torch.tensor([source_ids(tokenizer, "the red ball", 64)[0]])
    output = random_model(ids, torch.tensor([[random_model.config.start_id, 5, 6, 7]]), need_weights=True)
    assert len(output.decoder_layer_states) == random_model.config.n_decoder_layers
    assert torch.allclose(random_model.lens_log_probs(output.decoder_layer_states[-1]), output.log_probs, atol=1e-6)


@pytest.mark.parametrize("layer", [0, 1])
def test_a_middle_layers_lens_is_the_model_cut_after_that_layer(random_model, tokenizer, layer):
    ids, _ = source_ids(tokenizer, "the red ball", random_model.config.max_len)
    cut = cut_after(random_model, layer)
    for strategy, result in decodes(random_model, tokenizer, "the red ball").items():
        alone = teacher_force_ids(cut, tokenizer, ids, result.tgt_ids)  # the cut model reading the same output
        assert torch.equal(result.lens.top_ids[layer], alone.topk_ids[:, :LENS_TOP]), strategy
        assert torch.allclose(result.lens.top_probs[layer], alone.topk_probs[:, :LENS_TOP], atol=1e-6), strategy
        assert torch.allclose(result.lens.chosen_probs[layer], alone.token_probs, atol=1e-6), strategy


def test_the_shipped_models_first_layer_reads_as_the_model_cut_there(shipped):
    model, tokenizer = shipped.model, shipped.tokenizer
    result = decode_with_chooser(model, tokenizer, SENTENCE)
    alone = teacher_force_ids(cut_after(model, 0), tokenizer, result.src_ids, result.tgt_ids)
    assert torch.equal(result.lens.top_ids[0], alone.topk_ids[:, :LENS_TOP])
    assert torch.allclose(result.lens.chosen_probs[0], alone.token_probs, atol=1e-5)
    assert (result.lens.chosen_rank[0] > 1).any()  # the first layer does not yet guess what the last one takes
    assert (result.lens.chosen_rank[-1] == 1).all()  # greedy takes the last layer's top guess


def test_entropy_is_measured_in_bits_of_each_steps_distribution(random_model, tokenizer):
    result = decode_with_chooser(random_model, tokenizer, "the red ball")
    ids = torch.tensor([result.src_ids])
    output = random_model(ids, torch.tensor([[random_model.config.start_id, *result.tgt_ids[:-1]]]))
    probs = output.log_probs[0].exp()
    expected = -(probs * probs.log2()).sum(dim=-1)
    assert torch.allclose(result.entropy_bits, expected, atol=1e-4)
    assert (result.entropy_bits <= torch.log2(torch.tensor(float(probs.size(-1)))) + 1e-4).all()


@pytest.mark.parametrize(
    ("layers", "d_model", "vocabulary", "at_decode"),
    [(3, 256, 8000, True), (6, 512, 59_514, True), (12, 1024, 256_206, False)],
    ids=["default", "opus-mt", "NLLB-600M"],
)
def test_the_lens_of_a_large_vocabulary_waits_to_be_asked(tokenizer, layers, d_model, vocabulary, at_decode):
    """At NLLB-600M's size every layer's guesses made the app's whole decode 1.41 times transformers' on 2 cores."""
    from transformer.decoding.lens import read_at_decode

    config = dataclasses.replace(
        tiny_config(tokenizer),
        n_decoder_layers=layers,
        d_model=d_model,
        src_vocab_size=vocabulary,
        tgt_vocab_size=vocabulary,
    )
    assert read_at_decode(config) is at_decode


def test_a_lens_left_unread_at_decode_reads_as_the_decode_would_have(random_model, tokenizer, monkeypatch):
    import transformer.decoding.lens as lens_module
    from transformer.decoding.lens import read_lens
    from transformer.io.export import result_arrays

    eager = decodes(random_model, tokenizer, "the red ball")
    monkeypatch.setattr(lens_module, "EAGER_LENS_PRODUCTS", 0)  # every model's lens left to be asked for
    deferred = decodes(random_model, tokenizer, "the red ball")
    for strategy, result in deferred.items():
        assert not result.lens.read and result.lens.top_ids is None, strategy
        torch.testing.assert_close(result.lens.states, eager[strategy].lens.states)
        assert "layer_top_ids" not in result_arrays(result, tokenizer)  # nothing made up in its place
        read, expected = read_lens(random_model, result.lens, result.tgt_ids), eager[strategy].lens
        assert read.read and torch.equal(read.top_ids, expected.top_ids), strategy
        assert torch.equal(read.chosen_rank, expected.chosen_rank), strategy
        torch.testing.assert_close(read.top_probs, expected.top_probs, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(read.chosen_probs, expected.chosen_probs, atol=1e-5, rtol=1e-4)
        assert read_lens(random_model, read, result.tgt_ids) is read  # a read lens as it is


def test_reading_many_layers_over_a_large_vocabulary_holds_one_layers_scores(tokenizer):
    """ "Each layer's guesses" grew the server by 580 MB on a 40-layer upload with a 120k vocabulary: each layer's
    small results, kept between the layers' (T, V) scores, split the memory those freed."""
    config = tiny_config(tokenizer, n_decoder_layers=40, src_vocab_size=120_000, tgt_vocab_size=120_000)
    model = Transformer(config).eval()
    states = torch.randn(40, 30, config.d_model)
    tgt_ids = list(range(4, 34))
    read_lens(model, LogitLens(None, None, None, None, states=states[:2]), tgt_ids)  # the first products' buffers
    with measured() as cost:
        read = read_lens(model, LogitLens(None, None, None, None, states=states), tgt_ids)
    assert cost.peak_growth_mb < 250, cost  # 1,146 MB before (a layer's scores: 14 MB)
    assert read.top_ids.shape == (40, 30, 5) and read.chosen_rank.shape == (40, 30)
    with torch.inference_mode():
        layer = model.lens_log_probs(states[17]).exp()
    torch.testing.assert_close(read.top_probs[17], layer.topk(5).values)
    assert read.chosen_rank[17, 3] == int((layer[3] > layer[3, tgt_ids[3]]).sum()) + 1
