"""Linear weights laid out for the one-row products of decoding, and weights derived from parameters for inference."""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn


def wants_gradient(x: torch.Tensor, *parameters: torch.Tensor) -> bool:
    """Whether this product must be differentiable: training and attribution take the ordinary path."""
    return torch.is_grad_enabled() and (x.requires_grad or any(p.requires_grad for p in parameters))


class DerivedWeights:
    """Tensors made from parameters for inference (a transposed weight, three weights side by side), made
    again whenever any of the parameters changes (training, loading, a move to another device or dtype).

    `make` is a function of the parameters alone, never of a module, so that a copied model derives from
    its own weights. Any thread may make them, and every copy made from the same parameters is the same.
    """

    def __init__(self, make: Callable[..., tuple[torch.Tensor, ...]]) -> None:
        self._make = make
        self._made: tuple[tuple, tuple[torch.Tensor, ...]] | None = None

    @property
    def made(self) -> bool:
        return self._made is not None

    def of(self, *parameters: torch.Tensor) -> tuple[torch.Tensor, ...]:
        stamp = tuple((p._version, p.data_ptr(), p.dtype) for p in parameters)
        made = self._made
        if made is None or made[0] != stamp:
            with torch.no_grad():
                made = (stamp, self._make(*(p.detach() for p in parameters)))
            self._made = made
        return made[1]


def hold_transposed(model: nn.Module) -> None:
    """Lays every nn.Linear weight W (out, in) of `model` out in memory as its transpose W_t (in, out): W is then a
    transposed view of W_t, with the same shape, values and state dict, and x @ W.T reads W_t row by row.

    A decode step multiplies one row by each weight matrix, so it is bound by reading the weights from memory; on a
    CPU, x @ W.T reads a row-major W (out, in) at half to a quarter of the speed it reads W_t
    (measured: docs/performance.md), and F.linear on the transposed layout runs the same product as x @ W_t, bit for
    bit. The layout replaces a transposed copy of each weight, which doubled a loaded model's memory. Tied weights
    (the output layer and the target embedding) are laid out once; the embedding then reads its rows strided,
    a few rows a step. The largest go first: while a weight is laid out its original and its copy are both held, so
    a loading model (its originals freed as they go) peaks at the weights once plus its largest weight, not twice it.
    """
    linears = {id(m.weight): m for m in model.modules() if isinstance(m, nn.Linear)}.values()
    with torch.no_grad():
        for module in sorted(linears, key=lambda m: m.weight.numel(), reverse=True):
            module.weight.data = module.weight.data.t().contiguous().t()
