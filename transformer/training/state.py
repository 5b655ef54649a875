"""The resumable training state: weights, optimizer moments and progress, in safetensors."""

from __future__ import annotations

import base64
import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save

from transformer.io.checkpoint import CheckpointError, load_checkpoint, unique_state, write_atomically
from transformer.model.config import TransformerConfig
from transformer.model.encoder_decoder import Transformer
from transformer.text.tokenizer import Tokenizer


@dataclass
class Progress:
    """Where training stands, enough to continue exactly where it stopped."""

    epoch: int = 0  # the epoch in progress
    batch: int = 0  # next batch of that epoch
    step: int = 0  # optimizer steps done
    elapsed_seconds: float = 0.0
    loss_curve: list[float] = field(default_factory=list)  # training loss per step
    lr_curve: list[float] = field(default_factory=list)
    epochs: list[dict[str, float]] = field(default_factory=list)  # validation per epoch
    best_bleu: float = -1.0
    best_epoch: int = -1
    epochs_without_gain: int = 0


def save_state(
    path: Path,
    model: Transformer,
    optimizer: torch.optim.Optimizer,
    tokenizer: Tokenizer,
    progress: Progress,
    settings: dict[str, Any],
) -> None:
    """Writes the state atomically: an interrupted save leaves the previous one intact."""
    tensors = {f"model.{k}": v.detach().cpu().contiguous() for k, v in unique_state(model).items()}
    optimizer_state = optimizer.state_dict()
    for index, values in optimizer_state["state"].items():
        for key, value in values.items():
            tensors[f"optimizer.{index}.{key}"] = torch.as_tensor(value).detach().cpu().contiguous()
    metadata = {
        "config": model.config.to_json(),
        "tokenizer": base64.b64encode(tokenizer.model_proto).decode("ascii"),
        "param_groups": json.dumps(optimizer_state["param_groups"]),
        "progress": json.dumps(asdict(progress)),
        "settings": json.dumps(settings),
    }
    write_atomically(path, save(tensors, metadata=metadata))


@dataclass
class LoadedState:
    """A training state read back from disk, ready to restore into a fresh model and optimizer."""

    config: TransformerConfig
    tokenizer: Tokenizer
    progress: Progress
    settings: dict[str, Any]
    tensors: dict[str, torch.Tensor]
    param_groups: list[dict[str, Any]]  # empty: no optimizer moments (a state rebuilt from a checkpoint)

    def restore(self, model: Transformer, optimizer: torch.optim.Optimizer) -> None:
        """Puts weights and optimizer moments back (dropout's random numbers follow from the step: see train)."""
        weights = {k[len("model.") :]: v for k, v in self.tensors.items() if k.startswith("model.")}
        model.load_state_dict(weights, strict=False)
        if not self.param_groups:
            return
        state: dict[int, dict[str, torch.Tensor]] = {}
        for key, value in self.tensors.items():
            if key.startswith("optimizer."):
                _, index, name = key.split(".", 2)
                state.setdefault(int(index), {})[name] = value
        optimizer.load_state_dict({"state": state, "param_groups": self.param_groups})


class TrainingStateError(ValueError):
    """A training state that cannot be resumed; the message says which file and what to do."""


def load_state(path: Path) -> LoadedState:
    """Reads a state written by save_state (data only, no code).

    A truncated or altered file (a disk filled during a save) is refused with one line, whatever part fails.
    """
    try:
        with safe_open(str(path), framework="pt") as handle:
            metadata = handle.metadata()
        return LoadedState(
            config=TransformerConfig.from_json(metadata["config"]),
            tokenizer=Tokenizer(base64.b64decode(metadata["tokenizer"])),
            progress=Progress(**json.loads(metadata["progress"])),
            settings=json.loads(metadata["settings"]),
            tensors=load_file(str(path)),
            param_groups=json.loads(metadata["param_groups"]),
        )
    except (SafetensorError, OSError, ValueError, KeyError, TypeError, RuntimeError) as error:
        raise TrainingStateError(
            f"the training state {path} cannot be read ({type(error).__name__}: {str(error)[:200]}); "
            "restore it from a copy, or start afresh without --resume (the checkpoint beside it is untouched)"
        ) from None


def state_from_checkpoint(path: Path) -> LoadedState:
    """A run's state rebuilt from a checkpoint that `train` wrote, for when the resumable state itself is lost:
    its weights (float32 from the file's float16), tokenizer and progress (epochs, steps, validations, the curves
    at the resolution the file kept them). Adam's moments are not in a checkpoint: they start again at zero.

    Refused in one line when the file is no checkpoint of a run (an imported or averaged model has no progress).
    """
    try:
        checkpoint = load_checkpoint(path)
    except CheckpointError as error:
        raise TrainingStateError(f"cannot continue from {path}: {error}") from None
    record, scores = checkpoint.metadata.get("training"), checkpoint.metadata.get("scores", {})
    if not isinstance(record, dict) or not record.get("steps") or not isinstance(checkpoint.tokenizer, Tokenizer):
        raise TrainingStateError(
            f"cannot continue from {path}: it holds no training record of this project's `train` "
            "(an imported or averaged model): train afresh, or resume from the state file"
        )
    every, steps, epochs = int(record.get("loss_curve_every", 1)), int(record["steps"]), int(record["epochs_done"])
    validation = list(record.get("validation", []))
    best = max(validation, key=lambda epoch: epoch["val_bleu"], default={"epoch": -1, "val_bleu": -1.0})
    best_epoch = int(record.get("best_epoch", best["epoch"]))
    progress = Progress(
        epoch=epochs,
        step=steps,
        elapsed_seconds=float(record.get("seconds", 0.0)),
        loss_curve=[x for x in record.get("loss_curve", []) for _ in range(every)][:steps],
        lr_curve=[x for x in record.get("lr_curve", []) for _ in range(every)][:steps],
        epochs=validation,
        best_bleu=float(scores.get("val_bleu_greedy", best["val_bleu"])),
        best_epoch=best_epoch,
        epochs_without_gain=epochs - best_epoch,
    )
    weights = {f"model.{name}": value.float() for name, value in unique_state(checkpoint.model).items()}
    return LoadedState(
        checkpoint.config, checkpoint.tokenizer, progress, checkpoint.metadata.get("settings", {}), weights, []
    )


RESUMABLE_CHANGES = {"dropout"}  # model settings a resumed run may change


def check_same_model(path: Path, saved: TransformerConfig, asked: TransformerConfig) -> None:
    """Refuses to resume into a model of another shape, naming each setting that differs (not 100 tensors).

    Dropout may change: it is how training regularises, not what the weights mean (a long run on much data
    may drop it to learn faster per step once overfitting is not the risk).
    """
    differing = [
        f"--{f.name.replace('_', '-')} {getattr(saved, f.name)} there, {getattr(asked, f.name)} here"
        for f in fields(TransformerConfig)
        if f.name not in RESUMABLE_CHANGES and getattr(saved, f.name) != getattr(asked, f.name)
    ]
    if differing:
        raise TrainingStateError(
            f"the training state {path} is for another model ({'; '.join(differing)}): "
            "repeat the first run's settings to resume, or start afresh without --resume"
        )
