"""Attention knockout and pinning, checked against routes that do not go through the edit: a model whose
cross-attention values are zero, a decoder given a memory without the blocked positions, and the softmax's own
renormalization over the keys left."""

from __future__ import annotations

import copy

import pytest
import torch
from fixtures.hf_models import save_marian
from fixtures.patching_pair import CLEAN
from helpers import make_sentences

from transformer.analysis.interventions.knockout import AttentionEdit, Pin, edited_decode
from transformer.decoding.forcing import teacher_force_ids
from transformer.decoding.strategies import decode_text
from transformer.hugging_face.marian import import_marian
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint
from transformer.model.masks import padding_mask, target_mask


@pytest.fixture(scope="module")
def shipped():
    return load_checkpoint(DEFAULT_CHECKPOINT)


@pytest.fixture(scope="module")
def tiny_marian(tmp_path_factory):
    sentences = [" ".join(s.split()) for s in make_sentences(300, seed=1)]
    return import_marian(save_marian(tmp_path_factory.mktemp("marian"), sentences, sentences))


def blind_copy(model, layers):
    """The model with the cross-attention of `layers` seeing nothing, by another route: its values are zero, so
    whatever the weights, the sublayer gives its output projection's bias alone."""
    blind = copy.deepcopy(model)
    for layer in layers:
        values = blind.decoder_layers[layer].cross_attn.v_proj
        torch.nn.init.zeros_(values.weight)
        if values.bias is not None:
            torch.nn.init.zeros_(values.bias)
    return blind


@pytest.mark.parametrize("family", ["shipped", "tiny_marian"])
def test_every_source_word_blocked_is_a_decoder_whose_cross_attention_sees_nothing(family, request):
    checkpoint = request.getfixturevalue(family)
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    original = decode_text(model, tokenizer, CLEAN if family == "shipped" else "the red dog runs")
    source, layers = len(original.src_ids), (0, model.config.n_decoder_layers - 1)
    edited = edited_decode(model, tokenizer, original, 1, AttentionEdit(tuple(range(source)), layers))
    blind = teacher_force_ids(blind_copy(model, layers), tokenizer, original.src_ids, edited.tgt_ids)
    torch.testing.assert_close(edited.topk_probs[1:], blind.topk_probs[1:], atol=1e-5, rtol=0)
    assert torch.equal(edited.topk_ids[1:], blind.topk_ids[1:])
    assert edited.tgt_ids[:1] == original.tgt_ids[:1]  # the output up to the step kept as it was
    assert not torch.isnan(edited.topk_probs).any()
    if family == "shipped":
        assert edited.tgt_ids != original.tgt_ids  # the translation without the source is another


def test_blocked_in_every_layer_is_a_memory_without_those_positions(shipped):
    model, tokenizer = shipped.model, shipped.tokenizer
    original = decode_text(model, tokenizer, CLEAN)
    tired = original.src_ids.index(tokenizer.encode("tired")[0])
    blocked = (tired - 3, tired)  # "it", "tired"
    edit = AttentionEdit(blocked, tuple(range(model.config.n_decoder_layers)))
    edited = edited_decode(model, tokenizer, original, 4, edit)
    src = torch.tensor([original.src_ids])
    kept = [p for p in range(src.size(1)) if p not in blocked]
    decoder_input = torch.tensor([[model.config.start_id, *edited.tgt_ids[:-1]]])
    with torch.inference_mode():
        memory = model.encode(src, padding_mask(src, model.config.pad_id)).memory[:, kept]
        hidden = model.decode(
            decoder_input,
            memory,
            padding_mask(src[:, kept], model.config.pad_id),
            target_mask(decoder_input, model.config.pad_id),
        ).hidden
    probs = model.log_probs(hidden)[0].exp()
    expected = probs.gather(1, torch.tensor(edited.tgt_ids)[:, None])[:, 0]
    torch.testing.assert_close(edited.token_probs, expected, atol=1e-5, rtol=0)
    torch.testing.assert_close(edited.topk_probs, probs.topk(edited.topk_ids.size(1)).values, atol=1e-5, rtol=0)
    assert edited.tgt_ids[:4] == original.tgt_ids[:4]


def test_the_lowest_edited_layer_shares_a_blocked_words_weight_among_the_rest_and_a_pinned_head_looks_at_its_word(
    shipped,
):
    """Below the lowest edited layer nothing changes, so its queries are the unedited model's on the same output:
    its weights are the unedited ones with the blocked keys at 0 and the others renormalized; a head pinned to a
    word of one piece gives it all its weight at every step."""
    model, tokenizer = shipped.model, shipped.tokenizer
    original = decode_text(model, tokenizer, CLEAN)
    tired = original.src_ids.index(tokenizer.encode("tired")[0])
    edit = AttentionEdit((tired,), (1, 2), (Pin(2, 1, (tired - 3,)),))
    edited = edited_decode(model, tokenizer, original, 6, edit)
    unedited = teacher_force_ids(model, tokenizer, original.src_ids, edited.tgt_ids).cross[1]  # (H, T, S)
    expected = unedited.clone()
    expected[..., tired] = 0
    expected /= expected.sum(dim=-1, keepdim=True)
    torch.testing.assert_close(edited.cross[1], expected, atol=1e-5, rtol=0)
    assert float(unedited[..., tired].max()) > 0.05  # the blocked key had weight to share
    pinned = edited.cross[2, 1]
    assert torch.all(pinned[:, tired - 3] == 1) and float(pinned.sum()) == pytest.approx(pinned.size(0))


def test_an_edit_out_of_range_is_refused_naming_the_range(shipped):
    model, tokenizer = shipped.model, shipped.tokenizer
    original = decode_text(model, tokenizer, "Hello.")
    with pytest.raises(ValueError, match="past the source's"):
        edited_decode(model, tokenizer, original, 0, AttentionEdit((40,), (0,)))
    with pytest.raises(ValueError, match="past the decoder's 3 layers"):
        edited_decode(model, tokenizer, original, 0, AttentionEdit((0,), (3,)))
    with pytest.raises(ValueError, match="needs a source word"):
        edited_decode(model, tokenizer, original, 0, AttentionEdit(pins=(Pin(0, 0, ()),)))
    assert AttentionEdit((1,), ()).empty and not AttentionEdit(pins=(Pin(0, 0, (1,)),)).empty
