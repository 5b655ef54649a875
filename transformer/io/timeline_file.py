"""The timeline file: a Timeline as one safetensors file, read back as data only and refused in one line if hostile.

Specified in FORMAT.md ("The timeline file"). Every tensor's shape follows from the metadata (snapshots, probes'
pieces, layers, heads), so the header is checked against them before anything is allocated, as a checkpoint's is.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load as load_safetensors
from safetensors.torch import save as save_safetensors

from transformer.analysis.timeline import KINDS, ProbeTimeline, Snapshot, Timeline
from transformer.io.checkpoint import write_atomically
from transformer.io.header import CheckpointError, check_tensors, read_header
from transformer.model.kinds import AttentionKind
from transformer.text.files import FileRefused, read_regular

TIMELINE_FORMAT = "transformer-explorer-timeline"
TIMELINE_FORMAT_VERSION = "1"
MAX_FILE_BYTES = 64 * 1024 * 1024
# The description (every snapshot's output of every probe) and the tensors' names: a long run's is a small part of
# this (measured: docs/performance.md).
MAX_TIMELINE_HEADER_BYTES = 4 * 1024 * 1024
LIMITS = {"snapshots": 1000, "probes": 100, "pieces": 1024, "layers": 64, "heads": 64, "text": 2000, "steps": 10**12}


class TimelineError(ValueError):
    """A file that is not a readable timeline; the message, one line, names the problem."""


def timeline_path(checkpoint: Path) -> Path:
    """Where a checkpoint's timeline is kept: timelines/NAME.safetensors beside it (out of the checkpoint list)."""
    return checkpoint.parent / "timelines" / f"{checkpoint.stem}.safetensors"


def _tensors(timeline: Timeline) -> dict[str, torch.Tensor]:
    tensors = {}
    for p, probe in enumerate(timeline.probes):
        tensors |= {f"probe.{p}.{kind.value}": torch.from_numpy(probe.maps[kind].astype(np.float16)) for kind in KINDS}
        tensors[f"probe.{p}.token_probs"] = torch.from_numpy(probe.token_probs.astype(np.float32))
        tensors[f"probe.{p}.lens_rank"] = torch.from_numpy(probe.lens_rank.astype(np.float32))
    for kind in KINDS:
        tensors[f"{kind.value}.entropy"] = torch.from_numpy(timeline.entropy[kind].astype(np.float32))
        tensors[f"{kind.value}.distance"] = torch.from_numpy(timeline.distance[kind].astype(np.float32))
    if timeline.aer is not None:
        tensors["cross.aer"] = torch.from_numpy(timeline.aer.astype(np.float32))
    tensors["loss_curve"] = torch.from_numpy(timeline.loss_curve.astype(np.float32))
    return {name: tensor.contiguous() for name, tensor in tensors.items()}


def timeline_bytes(timeline: Timeline) -> bytes:
    layers = {kind.value: int(timeline.entropy[kind].shape[1]) for kind in KINDS}
    description = {
        "model": timeline.model,
        "snapshots": [vars(s) for s in timeline.snapshots],
        "probes": [
            {name: getattr(p, name) for name in ("source", "reference", "src_pieces", "tgt_pieces", "outputs")}
            for p in timeline.probes
        ],
        "encoder_layers": layers["encoder"],
        "decoder_layers": layers["cross"],
        "heads": int(timeline.entropy[AttentionKind.CROSS].shape[2]),
        "aer_method": timeline.aer_method if timeline.aer is not None else None,
        "loss_every": timeline.loss_every,
    }
    metadata = {
        "format": TIMELINE_FORMAT,
        "format_version": TIMELINE_FORMAT_VERSION,
        "timeline": json.dumps(description),
    }
    return save_safetensors(_tensors(timeline), metadata)


def save_timeline(path: str | Path, timeline: Timeline) -> None:
    """Writes the file whole or not at all (a stop midway leaves the old one)."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    write_atomically(Path(path), timeline_bytes(timeline))


def _count(value: Any, name: str, low: int = 1) -> int:
    if type(value) is not int or not low <= value <= LIMITS[name]:
        raise TimelineError(f"'{name}' is not a whole number from {low} to {LIMITS[name]:,}")
    return value


def _text(value: Any, what: str) -> str:
    if type(value) is not str or len(value) > LIMITS["text"]:
        raise TimelineError(f"{what} is not a text of at most {LIMITS['text']:,} characters")
    return value


def _texts(value: Any, what: str, length: int | None = None) -> list[str]:
    if not isinstance(value, list) or not 1 <= len(value) <= LIMITS["pieces"] or length not in (None, len(value)):
        count = length if length is not None else f"1 to {LIMITS['pieces']:,}"
        raise TimelineError(f"{what} is not a list of {count} texts")
    return [_text(v, what) for v in value]


def _snapshot(value: Any) -> Snapshot:
    if not isinstance(value, dict):
        raise TimelineError("a snapshot is not a JSON object")
    bleu, step = value.get("val_bleu"), value.get("step")
    if bleu is not None and not (type(bleu) in (int, float) and math.isfinite(bleu)):
        raise TimelineError("a snapshot's val_bleu is not a number")
    _count(step, "steps", 0)
    return Snapshot(
        _text(value.get("label"), "a snapshot's label"),
        _count(value.get("epoch"), "snapshots", 0),
        step,
        None if bleu is None else float(bleu),
        _text(value.get("file"), "a snapshot's file"),
    )


def _description(header: dict[str, Any]) -> dict[str, Any]:
    metadata = header["__metadata__"]
    if metadata.get("format") != TIMELINE_FORMAT:
        raise TimelineError(f"not a timeline file (its format is not {TIMELINE_FORMAT})")
    if metadata.get("format_version") != TIMELINE_FORMAT_VERSION:
        raise TimelineError(
            f"timeline format version {str(metadata.get('format_version'))[:20]!r}; this reads version {TIMELINE_FORMAT_VERSION}"
        )
    try:
        description = json.loads(metadata.get("timeline"))
    except (ValueError, RecursionError, TypeError):
        raise TimelineError("the timeline description is missing or not JSON") from None
    if not isinstance(description, dict):
        raise TimelineError("the timeline description is not a JSON object")
    return description


def _expected(description: dict[str, Any]) -> tuple[dict[str, tuple[int, ...]], list[Snapshot], list[dict]]:
    """Every tensor's shape from the description, the snapshots and the probes' texts: all checked."""
    raw_snapshots = description.get("snapshots")
    if not isinstance(raw_snapshots, list) or not 1 <= len(raw_snapshots) <= LIMITS["snapshots"]:
        raise TimelineError(f"'snapshots' is not a list of 1 to {LIMITS['snapshots']:,}")
    snapshots = [_snapshot(s) for s in raw_snapshots]
    raw_probes = description.get("probes")
    if not isinstance(raw_probes, list) or not 1 <= len(raw_probes) <= LIMITS["probes"]:
        raise TimelineError(f"'probes' is not a list of 1 to {LIMITS['probes']}")
    e, heads = len(snapshots), _count(description.get("heads"), "heads")
    encoder, decoder = (
        _count(description.get("encoder_layers"), "layers"),
        _count(description.get("decoder_layers"), "layers"),
    )
    expected: dict[str, tuple[int, ...]] = {}
    probes = []
    for p, raw in enumerate(raw_probes):
        if not isinstance(raw, dict):
            raise TimelineError(f"probe {p + 1} is not a JSON object")
        s, t = (
            len(_texts(raw.get("src_pieces"), f"probe {p + 1}'s source pieces")),
            len(_texts(raw.get("tgt_pieces"), f"probe {p + 1}'s reference pieces")),
        )
        probes.append(
            {
                "source": _text(raw.get("source"), f"probe {p + 1}'s source"),
                "reference": _text(raw.get("reference"), f"probe {p + 1}'s reference"),
                "src_pieces": raw["src_pieces"],
                "tgt_pieces": raw["tgt_pieces"],
                "outputs": _texts(raw.get("outputs"), f"probe {p + 1}'s outputs", e),
            }
        )
        expected |= {
            f"probe.{p}.encoder": (e, encoder, heads, s, s),
            f"probe.{p}.decoder": (e, decoder, heads, t, t),
            f"probe.{p}.cross": (e, decoder, heads, t, s),
            f"probe.{p}.token_probs": (e, t),
            f"probe.{p}.lens_rank": (e, decoder, t),
        }
    for kind, layers in (("encoder", encoder), ("decoder", decoder), ("cross", decoder)):
        expected |= {f"{kind}.entropy": (e, layers, heads), f"{kind}.distance": (e, layers, heads)}
    if description.get("aer_method") is not None:
        _text(description["aer_method"], "aer_method")
        expected["cross.aer"] = (e, decoder, heads + 1)
    return expected, snapshots, probes


def _loss_length(header: dict[str, Any]) -> int:
    shape = header.get("loss_curve", {}).get("shape") if isinstance(header.get("loss_curve"), dict) else None
    if not (isinstance(shape, list) and len(shape) == 1 and type(shape[0]) is int and 0 <= shape[0] <= 10**7):
        raise TimelineError("loss_curve is missing or not a list of numbers")
    return shape[0]


def _checked(tensors: dict[str, torch.Tensor]) -> dict[str, np.ndarray]:
    """The arrays, refused unless every value is in its range: weights and probabilities in [0, 1], ranks from 1,
    entropies and distances not negative, AER in [0, 1] or NaN (not measured), the loss finite."""
    arrays = {name: tensor.float().numpy() for name, tensor in tensors.items()}
    for name, values in arrays.items():
        low, high = (1.0, math.inf) if name.endswith("lens_rank") else (0.0, 1.0)
        if name.endswith(("entropy", "distance")):
            high = math.inf
        inside = (
            np.isfinite(values) if name == "loss_curve" else (values >= low) & (values <= high) & np.isfinite(values)
        )
        if not (inside | np.isnan(values) if name == "cross.aer" else inside).all():
            raise TimelineError(f"tensor {name} holds values out of its range (or not finite)")
    return arrays


def load_timeline_bytes(data: bytes) -> Timeline:
    try:
        # Bounded before it is parsed: a header's parse costs many times its size (measured: docs/performance.md).
        header = read_header(data, max_header_bytes=MAX_TIMELINE_HEADER_BYTES)
    except CheckpointError as error:
        raise TimelineError(str(error).replace("checkpoint", "timeline")) from None
    description = _description(header)
    expected, snapshots, probes = _expected(description)
    expected["loss_curve"] = (_loss_length(header),)
    payload = len(data) - 8 - int.from_bytes(data[:8], "little")
    try:
        check_tensors(header, expected, payload)
        arrays = _checked(load_safetensors(data))
    except CheckpointError as error:
        raise TimelineError(str(error).replace("the config", "the timeline's description")) from None
    every = description.get("loss_every")
    return Timeline(
        _text(description.get("model"), "model"),
        snapshots,
        [
            ProbeTimeline(
                p["source"],
                p["reference"],
                p["src_pieces"],
                p["tgt_pieces"],
                p["outputs"],
                {kind: arrays[f"probe.{i}.{kind.value}"].astype(np.float16) for kind in KINDS},
                arrays[f"probe.{i}.token_probs"],
                arrays[f"probe.{i}.lens_rank"],
            )
            for i, p in enumerate(probes)
        ],
        {kind: arrays[f"{kind.value}.entropy"] for kind in KINDS},
        {kind: arrays[f"{kind.value}.distance"] for kind in KINDS},
        arrays.get("cross.aer"),
        description.get("aer_method") or "",
        arrays["loss_curve"],
        every if type(every) is int and every > 0 else 1,
    )


def load_timeline(path: str | Path) -> Timeline:
    """Reads the file whole (bounded by MAX_FILE_BYTES) and checks it; TimelineError names what is wrong."""
    path = Path(path)
    if not path.exists() and not path.is_symlink():
        raise TimelineError(f"no timeline file at {path}")
    try:
        return load_timeline_bytes(read_regular(path, MAX_FILE_BYTES))
    except FileRefused as error:
        raise TimelineError(str(error)) from None
    except TimelineError as error:
        raise TimelineError(f"{path.name}: {error}") from None
