"""One optimizer step (section 5.3 and 5.4 of the paper: Adam on the Noam schedule, label smoothing in the loss),
the same on one process or under DDP."""

from __future__ import annotations

import contextlib
from collections.abc import Callable

import torch
import torch.distributed as dist
from torch import nn

from transformer.model.encoder_decoder import Transformer
from transformer.text.tokenizer import PAD_ID
from transformer.training.state import (
    Progress,
)


def noam_rate(step: int, d_model: int, factor: float, warmup: int) -> float:
    """lrate = factor * d_model^-0.5 * min(step^-0.5, step * warmup^-1.5) (equation 3)."""
    step = max(step, 1)
    return factor * d_model**-0.5 * min(step**-0.5, step * warmup**-1.5)


def training_step(
    compute_logits: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
    model: Transformer,
    optimizer: torch.optim.Optimizer,
    loss_fn: nn.Module,
    batch: list[torch.Tensor],
    lr: float,
    clip_norm: float,
    world: int,
    autocast: contextlib.AbstractContextManager,
) -> torch.Tensor:
    """One optimizer step on (src, decoder input, gold) of this rank; returns [the loss per target token, the
    target tokens], both over every rank, as a tensor on the device (reading it waits for the step to finish).

    The loss is normalised by every rank's target tokens together, so that a step of W ranks equals one
    process's step over all W batches: DDP averages the ranks' gradients, so each rank's summed loss is
    scaled by W / (all ranks' tokens).
    """
    src, decoder_input, gold = batch
    for group in optimizer.param_groups:
        group["lr"] = lr
    with autocast:
        logits = compute_logits(src, decoder_input)
    summed = loss_fn(logits.float().flatten(0, 1), gold.flatten())  # one row per token: softmax over the last dim
    totals = torch.stack([summed.detach(), (gold != PAD_ID).sum().to(summed)])
    if world > 1:
        dist.all_reduce(totals)
    optimizer.zero_grad(set_to_none=True)
    (summed * world / totals[1]).backward()
    nn.utils.clip_grad_norm_(model.parameters(), clip_norm)
    optimizer.step()
    return torch.stack([totals[0] / totals[1], totals[1]]).detach()


def record_losses(progress: Progress, pending: list[torch.Tensor]) -> int:
    """Appends the pending steps' losses to the curve and empties the list; returns their target tokens."""
    values = torch.stack(pending).tolist()
    pending.clear()
    progress.loss_curve.extend(loss for loss, _ in values)
    return int(sum(tokens for _, tokens in values))
