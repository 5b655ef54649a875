"""Checkpoint averaging: the mean of several saved models' weights (fairseq's and Marian's tool).

The models of the last few epochs sit near one minimum on different sides; their mean usually
translates better than any of them alone, at no training cost.
"""

from __future__ import annotations

from pathlib import Path

from transformer.io.checkpoint import Checkpoint, CheckpointError, load_checkpoint


def average_checkpoints(paths: list[str | Path]) -> Checkpoint:
    """One checkpoint whose every weight is the mean (in float32) of the given ones; they must share the model's
    shape and the tokenizer. Its metadata is the last one's, with the files averaged named."""
    if len(paths) < 2:
        raise CheckpointError("give at least two checkpoints to average")
    first = load_checkpoint(paths[0])
    sums = {name: tensor.float().clone() for name, tensor in first.model.state_dict().items()}
    last = first
    for path in paths[1:]:
        last = load_checkpoint(path)
        if not last.same_model_as(first):
            raise CheckpointError(f"{path} is not the same model as {paths[0]} (another shape or vocabulary)")
        for name, tensor in last.model.state_dict().items():
            sums[name] += tensor.float()
    first.model.load_state_dict({name: total / len(paths) for name, total in sums.items()})
    first.metadata = {**last.metadata, "averaged": [Path(p).name for p in paths]}
    return first
