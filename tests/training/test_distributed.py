"""Data-parallel training under torchrun on the CPU (gloo, two processes): it finishes, its ranks agree, a
two-rank step equals one process's step over both batches, and a resumed run continues as an uninterrupted one."""

from __future__ import annotations

import gc
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from helpers import reversal_corpus, tiny_training_options

from transformer.cli import main
from transformer.io.checkpoint import load_checkpoint
from transformer.model.config import TransformerConfig
from transformer.model.encoder_decoder import Transformer
from transformer.training.batches import collate
from transformer.training.distributed import Logits
from transformer.training.step import training_step

TORCHRUN = Path(sys.executable).parent / "torchrun"
SIZES = tiny_training_options(max_tokens=400, val_limit=20)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


DATA = ["--train-src", "s.txt", "--train-tgt", "t.txt", "--val-src", "s.txt", "--val-tgt", "t.txt"]


def _torchrun(tmp_path: Path, out: str, *extra: str) -> subprocess.CompletedProcess:
    command = [
        str(TORCHRUN),
        "--nproc_per_node",
        "2",
        "--master_port",
        str(_free_port()),
        "-m",
        "transformer",
        "train",
        *DATA,
        *SIZES,
        "--out",
        out,
        *extra,
    ]
    environment = os.environ | {"CUDA_VISIBLE_DEVICES": "", "OMP_NUM_THREADS": "1"}
    return subprocess.run(command, cwd=tmp_path, env=environment, capture_output=True, text=True, timeout=120)


@pytest.fixture
def corpus(tmp_path):
    reversal_corpus(tmp_path, 300, seed=3)
    return tmp_path


def test_two_ranks_finish_in_step_and_a_resumed_run_continues_as_an_uninterrupted_one(corpus):
    whole = _torchrun(corpus, "whole.safetensors", "--epochs", "2", "--max-seconds", "60")
    assert whole.returncode == 0, whole.stderr[-3000:]  # a rank out of step would also fail the weight check
    assert whole.stdout.count("done: ") == 1  # rank 0's line only
    first = _torchrun(corpus, "parts.safetensors", "--epochs", "2", "--max-steps", "7")
    assert first.returncode == 0, first.stderr[-3000:]
    second = _torchrun(corpus, "parts.safetensors", "--epochs", "2", "--resume")
    assert second.returncode == 0, second.stderr[-3000:]
    whole, parts = load_checkpoint(corpus / "whole.safetensors"), load_checkpoint(corpus / "parts.safetensors")
    training = whole.metadata["training"]
    assert training["hardware"].startswith("2 x") and training["steps"] == 10  # 11 batches an epoch: 5 each
    assert parts.metadata["training"]["loss_curve"] == training["loss_curve"]
    a, b = whole.model.state_dict(), parts.model.state_dict()
    assert all(torch.equal(a[name], b[name]) for name in a)


def _config() -> TransformerConfig:
    return TransformerConfig(
        30, 30, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1, n_decoder_layers=1, dropout=0.0, max_len=32
    )


def _pairs() -> list[tuple[list[int], list[int]]]:
    generator = torch.Generator().manual_seed(5)
    lengths = [(5, 7), (9, 4), (3, 6), (8, 8)]
    return [
        (
            torch.randint(4, 30, (s,), generator=generator).tolist() + [3],
            torch.randint(4, 30, (t,), generator=generator).tolist() + [3],
        )
        for s, t in lengths
    ]


def _step(model: Transformer, compute_logits, indices: list[int], world: int) -> float:
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)  # Adam's first step is about lr * sign(g): too coarse
    loss_fn = torch.nn.CrossEntropyLoss(ignore_index=0, label_smoothing=0.1, reduction="sum")
    batch = list(collate(_pairs(), indices, 0, 2))
    loss, _ = training_step(
        compute_logits, model, optimizer, loss_fn, batch, 1e-2, 1.0, world, torch.autocast("cpu", enabled=False)
    ).tolist()
    return loss


def _rank(rank: int, port: int, out: str) -> None:
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=2)
    torch.manual_seed(0)
    model = Transformer(_config())
    loss = _step(model, torch.nn.parallel.DistributedDataParallel(Logits(model)), [[0, 1], [2, 3]][rank], 2)
    if rank == 0:
        gradients = {name: p.grad for name, p in model.named_parameters()}  # after DDP's all-reduce and clipping
        torch.save({"loss": loss, "state": model.state_dict(), "gradients": gradients}, out)  # written by this test
    dist.destroy_process_group()


def test_one_two_rank_step_equals_one_step_over_both_batches(tmp_path):
    out = str(tmp_path / "rank0.pt")
    mp.spawn(_rank, args=(_free_port(), out), nprocs=2, join=True)
    torch.manual_seed(0)
    model = Transformer(_config())
    loss = _step(model, model.logits, [0, 1, 2, 3], 1)
    two = torch.load(out, weights_only=True)
    assert two["loss"] == pytest.approx(loss, abs=1e-5)
    single = model.state_dict()
    assert max((two["state"][name] - single[name]).abs().max().item() for name in single) < 1e-5
    gradients = {name: p.grad for name, p in model.named_parameters()}
    assert max((two["gradients"][name] - gradients[name]).abs().max().item() for name in gradients) < 1e-5
    assert max(g.abs().max().item() for g in gradients.values()) > 1e-3  # a real step, not a zero one


def _train_and_count_what_is_left(rank: int, port: int, folder: str) -> None:
    """One rank of a short run under the environment torchrun gives, the garbage collector off: how many
    data-parallel wrappers (each holding the process group) are left once the command has returned."""
    environment = {"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": "2", "MASTER_PORT": str(port)}
    os.environ.update(environment | {"MASTER_ADDR": "127.0.0.1", "CUDA_VISIBLE_DEVICES": ""})
    gc.disable()
    os.chdir(folder)
    code = main(["train", *DATA, *SIZES, "--out", "run.safetensors", "--epochs", "1", "--max-steps", "2"])
    left = sum(type(o) is torch.nn.parallel.DistributedDataParallel for o in gc.get_objects())
    Path(f"left.{rank}").write_text(f"{code} {left}")


def test_a_finished_rank_holds_no_data_parallel_wrapper_once_its_run_returns(corpus):
    """The wrapper sits in a reference cycle: left to the garbage collector, it (and the process group its reducer
    holds) outlived destroy_process_group, to be torn down with the interpreter, where gloo's threads can end a rank
    that finished its run in SIGABRT ("terminate called without an active exception", seen once under torchrun)."""
    mp.spawn(_train_and_count_what_is_left, args=(_free_port(), str(corpus)), nprocs=2, join=True)
    assert [(corpus / f"left.{rank}").read_text() for rank in (0, 1)] == ["0 0", "0 0"]
