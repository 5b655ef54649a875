"""The tuned lens' file: a safetensors file beside its checkpoint (lenses/NAME.safetensors) holding the maps and
the checkpoint file's SHA-256, so that a lens fitted to another model is refused."""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path

import torch
from safetensors import SafetensorError
from safetensors.torch import load as load_safetensors
from safetensors.torch import save_file

from transformer.analysis.tuned_lens import TunedLens, TunedLensError
from transformer.io.header import read_header
from transformer.model.encoder_decoder import Transformer
from transformer.text.files import open_regular, read_regular

# A lens is (decoder layers - 1) d_model x d_model numbers: 386 MB for a 3.3B model's 24 layers of 2,048.
MAX_LENS_BYTES = 1 << 30


def tuned_lens_path(checkpoint: Path) -> Path:
    """Where a checkpoint file's tuned lens is kept: lenses/NAME.safetensors beside it (out of the checkpoint list)."""
    return checkpoint.parent / "lenses" / f"{checkpoint.stem}.safetensors"


def file_sha256(path: str | Path) -> str:
    digest = hashlib.sha256()
    with open_regular(path) as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def save_tuned_lens(path: str | Path, lens: TunedLens, checkpoint_sha256: str, corpus: str) -> None:
    metadata = {
        "format": "tuned-lens",
        "checkpoint_sha256": checkpoint_sha256,
        "corpus": corpus,
        "kl_logit": json.dumps(lens.kl_logit),
        "kl_tuned": json.dumps(lens.kl_tuned),
    }
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    save_file({"weights": lens.weights.contiguous(), "biases": lens.biases.contiguous()}, str(path), metadata)


def load_tuned_lens(path: str | Path, model: Transformer, checkpoint_sha256: str) -> TunedLens:
    """The lens in `path`, refused with a TunedLensError unless it was fitted to this checkpoint's very file."""
    try:
        data = read_regular(path, MAX_LENS_BYTES)
        metadata = read_header(data)["__metadata__"]
        tensors = load_safetensors(data)
    except (OSError, ValueError, SafetensorError) as error:  # FileRefused, CheckpointError (a bad header) too
        raise TunedLensError(f"{Path(path).name} is not a readable tuned lens: {error}") from None
    if metadata.get("format") != "tuned-lens":
        raise TunedLensError(f"{Path(path).name} is not a tuned lens file")
    if metadata.get("checkpoint_sha256") != checkpoint_sha256:
        raise TunedLensError(f"{Path(path).name} was fitted to another checkpoint (its SHA-256 differs)")
    layers, width = model.config.n_decoder_layers - 1, model.config.d_model
    weights, biases = tensors.get("weights"), tensors.get("biases")
    if weights is None or biases is None or weights.shape != (layers, width, width) or biases.shape != (layers, width):
        raise TunedLensError(f"{Path(path).name} does not fit this model's {layers + 1} decoder layers of {width}")
    if not (torch.isfinite(weights).all() and torch.isfinite(biases).all()):
        raise TunedLensError(f"{Path(path).name} holds values that are not finite")
    kl = [
        _kl_per_layer(metadata.get(name, "[]"), layers, f"{Path(path).name}'s {name}")
        for name in ("kl_logit", "kl_tuned")
    ]
    return TunedLens(weights.float(), biases.float(), kl[0], kl[1])


def _kl_per_layer(text: str, layers: int, what: str) -> tuple[float, ...]:
    """A lens file's measured KL: none, or one finite number per early layer (every visitor's browser gets them)."""
    if len(text) > 64 * (layers + 1):
        raise TunedLensError(f"{what} is longer than {layers} numbers")
    try:
        values = json.loads(text)
    except (ValueError, RecursionError):
        raise TunedLensError(f"{what} is not JSON") from None
    numbers = isinstance(values, list) and all(type(v) in (int, float) and math.isfinite(v) for v in values)
    if not numbers or len(values) not in (0, layers):
        raise TunedLensError(f"{what} is not a list of {layers} finite numbers")
    return tuple(float(v) for v in values)
