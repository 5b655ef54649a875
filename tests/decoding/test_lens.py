"""The logit lens: each decoder layer's output read by the model's own final norm and generator."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from helpers import tiny_config

from transformer.decoding.beam import beam_search
from transformer.decoding.forcing import teacher_force_ids
from transformer.decoding.greedy import decode
from transformer.decoding.lens import LENS_TOP
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
    greedy = decode(model, tokenizer, text)
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
    result = decode(model, tokenizer, SENTENCE)
    alone = teacher_force_ids(cut_after(model, 0), tokenizer, result.src_ids, result.tgt_ids)
    assert torch.equal(result.lens.top_ids[0], alone.topk_ids[:, :LENS_TOP])
    assert torch.allclose(result.lens.chosen_probs[0], alone.token_probs, atol=1e-5)
    assert (result.lens.chosen_rank[0] > 1).any()  # the first layer does not yet guess what the last one takes
    assert (result.lens.chosen_rank[-1] == 1).all()  # greedy takes the last layer's top guess


def test_entropy_is_measured_in_bits_of_each_steps_distribution(random_model, tokenizer):
    result = decode(random_model, tokenizer, "the red ball")
    ids = torch.tensor([result.src_ids])
    output = random_model(ids, torch.tensor([[random_model.config.start_id, *result.tgt_ids[:-1]]]))
    probs = output.log_probs[0].exp()
    expected = -(probs * probs.log2()).sum(dim=-1)
    assert torch.allclose(result.entropy_bits, expected, atol=1e-4)
    assert (result.entropy_bits <= torch.log2(torch.tensor(float(probs.size(-1)))) + 1e-4).all()
