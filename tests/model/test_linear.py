"""The model's Linear: nn.Linear's numbers, a faster path without gradients, never a stale weight."""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F

from transformer.model.linear import Linear


def test_the_inference_path_equals_nn_linear_and_follows_every_weight_change():
    torch.manual_seed(0)
    layer = Linear(16, 40)
    x = torch.randn(3, 5, 16)
    with torch.inference_mode():
        fast = layer(x)
    torch.testing.assert_close(fast, F.linear(x, layer.weight, layer.bias), rtol=1e-6, atol=1e-6)
    with torch.no_grad():
        layer.weight.mul_(2.0)  # as an optimiser step does, in place
    with torch.inference_mode():
        torch.testing.assert_close(layer(x), F.linear(x, layer.weight, layer.bias), rtol=1e-6, atol=1e-6)
    layer.load_state_dict({"weight": torch.randn(40, 16), "bias": torch.zeros(40)})
    with torch.no_grad():
        torch.testing.assert_close(layer(x[0]), x[0] @ layer.weight.T, rtol=1e-6, atol=1e-6)


def test_a_copied_layer_derives_from_its_own_weight():
    layer = Linear(8, 4)
    x = torch.randn(2, 8)
    with torch.inference_mode():
        layer(x)  # the original has made its copy
    twin = copy.deepcopy(layer).double()
    with torch.no_grad():
        twin.weight.mul_(-1.0)
    with torch.inference_mode():
        torch.testing.assert_close(twin(x.double()), F.linear(x.double(), twin.weight, twin.bias))


def test_gradients_flow_through_the_ordinary_path():
    layer = Linear(4, 3)
    layer(torch.randn(2, 4)).sum().backward()
    assert layer.weight.grad is not None and layer.bias.grad is not None
    assert not layer._transposed.made  # training never made or read the copy
