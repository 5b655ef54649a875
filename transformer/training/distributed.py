"""One process, or data-parallel under torchrun (one process per GPU): the rank, its device, the model as DDP needs
it, rank 0's decisions for every rank, and the check that every rank ends with the same weights; for work split
by rank (a pair set's pairs), each rank's results gathered on rank 0 and a common end."""

from __future__ import annotations

import os

import torch
import torch.distributed as dist
from torch import nn

from transformer.model.encoder_decoder import Transformer
from transformer.training.state import (
    Progress,
)


def rank_and_world() -> tuple[int, int]:
    """(rank, world size) under torchrun, (0, 1) otherwise."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world > 1 and not dist.is_initialized():
        dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    return (dist.get_rank(), world) if world > 1 else (0, 1)


def device_for_rank(rank: int) -> torch.device:
    if torch.cuda.is_available():
        index = int(os.environ.get("LOCAL_RANK", rank))
        torch.cuda.set_device(index)
        return torch.device("cuda", index)
    return torch.device("cpu")


class Logits(nn.Module):
    """model.logits as a forward(), which DistributedDataParallel needs to synchronise gradients."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        self.model = model

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        return self.model.logits(src, tgt)


def rank_zero_says(flag: bool, world: int, device: torch.device) -> bool:
    """Rank 0's decision for every rank (each rank's own clock and state would disagree, and a rank that
    stopped alone would leave the others waiting in a collective)."""
    if world == 1:
        return flag
    decision = torch.tensor([int(flag)], device=device)
    dist.broadcast(decision, src=0)
    return bool(decision.item())


def finish(model: Transformer, world: int, device: torch.device, progress: Progress) -> Progress:
    """Under torchrun: checks that every rank holds the same weights, waits for rank 0's saves, and leaves."""
    if world > 1:
        checksum = torch.stack([p.detach().double().sum() for p in model.parameters()]).to(device)
        gathered = [torch.zeros_like(checksum) for _ in range(world)]
        dist.all_gather(gathered, checksum)
        if any(not torch.equal(gathered[0], other) for other in gathered[1:]):
            raise RuntimeError("the ranks' weights differ after training: data-parallel steps went out of step")
        dist.barrier()
        dist.destroy_process_group()
    return progress


def in_turn(world: int) -> None:
    """Every rank waits here for the others (rank 0's files written before the others read them)."""
    if world > 1:
        dist.barrier()


def gathered_on_rank_zero(value: object, world: int) -> list[object] | None:
    """Every rank's `value`, by rank, on rank 0 (None on the others); [value] in one process."""
    if world == 1:
        return [value]
    found: list[object] | None = [None] * world if dist.get_rank() == 0 else None
    dist.gather_object(value, found, dst=0)
    return found


def leave(world: int) -> None:
    """Under torchrun: waits for every rank, then ends the process group (before the interpreter does)."""
    if world > 1:
        dist.barrier()
        dist.destroy_process_group()
