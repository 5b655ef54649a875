import math

import pytest
import torch
import torch.nn.functional as F

from transformer.model import attention as attention_module
from transformer.model.attention import EXPLICIT_KEYS, MultiHeadAttention, attention
from transformer.model.masks import padding_mask, subsequent_mask, target_mask


def test_explicit_attention_equals_fused_kernel():
    torch.manual_seed(0)
    q, k, v = torch.randn(2, 4, 5, 8), torch.randn(2, 4, 7, 8), torch.randn(2, 4, 7, 8)
    mask = torch.ones(2, 1, 5, 7, dtype=torch.bool)
    mask[0, :, :, 5:] = False
    out, p_attn = attention(q, k, v, mask)
    expected = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(p_attn.sum(-1), torch.ones(2, 4, 5))
    assert (p_attn[0, :, :, 5:] == 0).all()


@pytest.mark.parametrize("keys", [EXPLICIT_KEYS, EXPLICIT_KEYS + 1])
def test_a_differentiated_pass_on_the_cpu_takes_the_explicit_products_up_to_their_key_count(config, keys, monkeypatch):
    """The explicit products are faster to differentiate on the CPU for short inputs: with them the output and its
    gradients are the fused kernel's, and no weights are returned that were not asked for."""
    torch.manual_seed(2)
    module = MultiHeadAttention(config).eval()
    x, context = torch.randn(2, 3, config.d_model), torch.randn(2, keys, config.d_model, requires_grad=True)
    mask = torch.ones(2, 1, 1, keys, dtype=torch.bool)
    mask[1, :, :, keys // 2 :] = False
    fused_calls, fused = [], F.scaled_dot_product_attention
    monkeypatch.setattr(F, "scaled_dot_product_attention", lambda *a, **k: fused_calls.append(1) or fused(*a, **k))

    out, p_attn = module(x, context, mask)
    assert p_attn is None and len(fused_calls) == (keys > EXPLICIT_KEYS)
    (gradient,) = torch.autograd.grad(out.sum(), context)
    monkeypatch.setattr(attention_module, "EXPLICIT_KEYS", 0)
    expected, _ = module(x, context, mask)
    assert fused_calls[-1:] == [1]
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(gradient, torch.autograd.grad(expected.sum(), context)[0], atol=1e-5, rtol=1e-5)


def test_scores_are_scaled_by_sqrt_dk():
    q = torch.tensor([[[[1.0, 0.0, 0.0, 0.0]]]])
    k = torch.tensor([[[[2.0, 0.0, 0.0, 0.0], [0.0, 0.0, 0.0, 0.0]]]])
    _, p_attn = attention(q, k, k)
    expected = torch.tensor([2.0 / math.sqrt(4), 0.0]).softmax(-1)
    torch.testing.assert_close(p_attn[0, 0, 0], expected)


def test_masks():
    ids = torch.tensor([[5, 6, 0, 0]])
    assert padding_mask(ids, 0).tolist() == [[[[True, True, False, False]]]]
    assert subsequent_mask(3)[0, 0].tolist() == [[True, False, False], [True, True, False], [True, True, True]]
    combined = target_mask(ids, 0)[0, 0]
    assert combined.shape == (4, 4)
    assert not combined[3, 2] and combined[1, 0] and not combined[0, 1]


@pytest.mark.parametrize("need_weights", [True, False])
def test_multi_head_attention_equals_torch_multihead_attention(config, need_weights):
    torch.manual_seed(1)
    ours = MultiHeadAttention(config).eval()
    reference = torch.nn.MultiheadAttention(config.d_model, config.n_heads, batch_first=True).eval()
    with torch.no_grad():
        reference.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        reference.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        reference.out_proj.weight.copy_(ours.out_proj.weight)
        reference.out_proj.bias.copy_(ours.out_proj.bias)
    x, context = torch.randn(2, 5, config.d_model), torch.randn(2, 6, config.d_model)
    keep = torch.ones(2, 6, dtype=torch.bool)
    keep[1, 4:] = False
    out, p_attn = ours(x, context, keep[:, None, None, :], need_weights=need_weights)
    expected, expected_weights = reference(x, context, context, key_padding_mask=~keep, average_attn_weights=False)
    torch.testing.assert_close(out, expected, atol=1e-5, rtol=1e-4)
    if need_weights:
        torch.testing.assert_close(p_attn, expected_weights, atol=1e-6, rtol=1e-5)
    else:
        assert p_attn is None
