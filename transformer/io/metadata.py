"""What training wrote into a checkpoint, read from untrusted JSON: a value of the wrong type reads as unknown.

A checkpoint's metadata is free-form (anyone can write a file), so every reader goes through these
records instead of indexing the raw dict: a string where a number belongs is shown as unknown, never raised.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

MAX_TEXT = 200  # characters kept of any string shown on a page


def _object(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _number(value: Any) -> float | None:
    return (
        float(value)
        if isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
        else None
    )


def _integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _text(value: Any) -> str | None:
    return value[:MAX_TEXT] if isinstance(value, str) else None


def _numbers(value: Any) -> list[float]:
    """A curve: a list of numbers, or nothing if any entry is not one."""
    if not isinstance(value, list):
        return []
    numbers = [_number(v) for v in value]
    return [] if None in numbers else numbers  # type: ignore[return-value]


@dataclass(frozen=True)
class Score:
    """One evaluation: sacreBLEU's BLEU and chrF on a named set."""

    bleu: float | None
    chrf: float | None
    beam: int | None
    sentences: int | None


@dataclass(frozen=True)
class EpochRecord:
    epoch: int
    val_bleu: float | None
    val_loss: float | None


@dataclass(frozen=True)
class TrainingRecord:
    steps: int | None = None
    epochs_done: int | None = None
    seconds: float | None = None
    hardware: str | None = None
    loss_curve: list[float] = field(default_factory=list)
    loss_curve_every: int = 1  # the stored loss curve keeps every n-th step
    lr_curve: list[float] = field(default_factory=list)
    validation: list[EpochRecord] = field(default_factory=list)

    def steps_of(self, curve: list[float]) -> list[int]:
        """The optimizer step of each stored point of a curve."""
        return [self.loss_curve_every * (i + 1) for i in range(len(curve))]


@dataclass(frozen=True)
class CheckpointMetadata:
    src_lang: str | None = None
    tgt_lang: str | None = None
    data: dict[str, dict[str, Any]] = field(default_factory=dict)  # corpus name -> path and lines
    training: TrainingRecord | None = None
    scores: dict[str, Score] = field(default_factory=dict)
    imported_from: str | None = None  # "Hugging Face Marian" for a model converted by import-hf

    @property
    def language_pair(self) -> str:
        return f"{self.src_lang or '?'}→{self.tgt_lang or '?'}"

    @property
    def trained_on(self) -> str | None:
        """What the model was trained on, in a line for the visitor typing a sentence; None if nothing is known."""
        if not (self.src_lang or self.tgt_lang or self.data):
            return None
        if self.imported_from and not self.data:
            return (
                f"Imported from {self.imported_from}, translating {self.language_pair}; what it was trained on "
                "is not recorded in its files."
            )
        # "train_src" in files of a single corpus, "train 1", "train 2", ... since training takes several
        corpora = [entry for name, entry in self.data.items() if name == "train_src" or name.startswith("train ")]
        lines = sum(entry.get("lines") or 0 for entry in corpora)
        pairs = f", {lines:,} sentence pairs" if lines else ""
        files = [entry["path"].rsplit("/", 1)[-1] for entry in corpora if entry.get("path")]
        source = f" ({', '.join(files)})" if files else ""
        return f"Trained to translate {self.language_pair}{pairs}{source}."


def read_metadata(raw: Any) -> CheckpointMetadata:
    """The typed reading of a checkpoint's `metadata` JSON; anything malformed reads as unknown."""
    raw = _object(raw)
    languages = _object(raw.get("languages"))
    data = {
        str(name)[:MAX_TEXT]: {
            "path": _text(_object(entry).get("path")),
            "lines": _integer(_object(entry).get("lines")),
        }
        for name, entry in _object(raw.get("data")).items()
    }
    scores = {
        str(name)[:MAX_TEXT]: Score(
            _number(s.get("bleu")), _number(s.get("chrf")), _integer(s.get("beam")), _integer(s.get("sentences"))
        )
        for name, s in _object(raw.get("scores")).items()
        if isinstance(s, dict)  # bare numbers (a training run's validation BLEU) are not a full score
    }
    return CheckpointMetadata(
        _text(languages.get("src")),
        _text(languages.get("tgt")),
        data,
        _training(raw["training"]) if isinstance(raw.get("training"), dict) else None,
        scores,
        _text(_object(raw.get("imported")).get("from")),
    )


def _training(raw: dict[str, Any]) -> TrainingRecord:
    every = _integer(raw.get("loss_curve_every"))
    epochs = raw.get("validation") if isinstance(raw.get("validation"), list) else []
    validation = [
        EpochRecord(v["epoch"], _number(v.get("val_bleu")), _number(v.get("val_loss")))
        for v in epochs
        if isinstance(v, dict) and _integer(v.get("epoch")) is not None
    ]
    return TrainingRecord(
        steps=_integer(raw.get("steps")),
        epochs_done=_integer(raw.get("epochs_done")),
        seconds=_number(raw.get("seconds")),
        hardware=_text(raw.get("hardware")),
        loss_curve=_numbers(raw.get("loss_curve")),
        loss_curve_every=every if every and every > 0 else 1,
        lr_curve=_numbers(raw.get("lr_curve")),
        validation=validation,
    )
