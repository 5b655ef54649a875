"""Linear weights laid out for decoding: the same numbers, shapes and state dict, no copy of any weight."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from transformer.decoding.greedy import decode_with_chooser
from transformer.io.checkpoint import checkpoint_bytes, load_checkpoint_bytes
from transformer.model.attention import MultiHeadAttention
from transformer.model.linear import DerivedWeights, hold_transposed


def test_a_weight_held_transposed_gives_the_transposed_products_numbers_and_keeps_its_shape():
    torch.manual_seed(0)
    layer = nn.Linear(16, 40)
    expected_weight, x = layer.weight.detach().clone(), torch.randn(3, 5, 16)
    hold_transposed(layer)
    assert layer.weight.shape == (40, 16) and torch.equal(layer.weight, expected_weight)
    assert layer.weight.t().is_contiguous()  # x @ W.T reads W_t row by row
    with torch.inference_mode():
        fast = layer(x)
    torch.testing.assert_close(fast, F.linear(x, expected_weight, layer.bias), rtol=1e-6, atol=1e-6)
    assert torch.equal(
        fast, torch.addmm(layer.bias, x.reshape(-1, 16), expected_weight.t().contiguous()).view(3, 5, 40)
    )
    layer(torch.randn(2, 16)).sum().backward()  # training on it still works
    assert layer.weight.grad is not None and layer.weight.grad.shape == (40, 16)


def test_a_loaded_model_holds_each_weight_once(model, tokenizer):
    loaded = load_checkpoint_bytes(checkpoint_bytes(model, tokenizer)).model
    linears = [m for m in loaded.modules() if isinstance(m, nn.Linear)]
    assert linears and all(m.weight.t().is_contiguous() for m in linears)
    assert loaded.generator.weight is loaded.tgt_embed.lookup.weight or not loaded.config.tie_embeddings
    storages = {p.untyped_storage().data_ptr() for p in loaded.parameters()}
    assert len(storages) == len(list(loaded.parameters()))  # no parameter shares or copies another's memory
    for (name, ours), theirs in zip(loaded.state_dict().items(), model.state_dict().values()):
        assert torch.equal(ours, theirs), name
    src, tgt = torch.tensor([[5, 9, 14, 3]]), torch.tensor([[2, 11, 4]])
    with torch.inference_mode():
        torch.testing.assert_close(loaded(src, tgt).log_probs, model(src, tgt).log_probs, rtol=1e-5, atol=1e-5)
    again = load_checkpoint_bytes(checkpoint_bytes(loaded, tokenizer)).model  # a laid-out model saves as any other
    assert all(torch.equal(a, b) for a, b in zip(again.state_dict().values(), model.state_dict().values()))


def test_a_decode_copies_no_weight_but_the_self_attentions_fused_ones(model, tokenizer):
    """A decode made a transposed copy of every linear weight (a 600M model then held 5.3 GB for 2.9 GB of
    weights); now only self-attention's query, key and value weights side by side are made (one product a step)."""
    loaded = load_checkpoint_bytes(checkpoint_bytes(model, tokenizer)).model
    decode_with_chooser(loaded, tokenizer, "the red dog runs")
    derived = sum(
        tensor.nbytes
        for module in loaded.modules()
        for value in vars(module).values()
        if isinstance(value, DerivedWeights) and value.made
        for tensor in value._made[1]
        if tensor is not None
    )
    fused = sum(
        p.nbytes for m in loaded.modules() if isinstance(m, MultiHeadAttention) for p in m.query_key_value_parameters()
    )
    assert 0 < derived <= fused
