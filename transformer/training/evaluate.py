"""BLEU and chrF of a checkpoint's translations, with sacreBLEU's signature; and validation during training (teacher-forced
loss and greedy BLEU on each set, their mean choosing the best checkpoint)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import sacrebleu
import torch
from torch import nn
from tqdm import tqdm

from transformer.decoding.strategies import DecodeSettings
from transformer.decoding.translate import translate_texts
from transformer.io.checkpoint import Checkpoint, update_metadata
from transformer.model.encoder_decoder import Transformer
from transformer.text.files import read_parallel
from transformer.text.tokenizer import PAD_ID
from transformer.training.batches import iterate_batches, token_batches
from transformer.training.settings import TrainSettings


@dataclass(frozen=True)
class Scores:
    """Corpus scores of one evaluation and how to reproduce their computation."""

    bleu: float
    chrf: float
    bleu_signature: str
    chrf_signature: str
    sentences: int
    beam: int


def score(hypotheses: list[str], references: list[str], beam: int = 1) -> Scores:
    """sacreBLEU's defaults: 13a tokenization, cased."""
    bleu = sacrebleu.metrics.BLEU()
    chrf = sacrebleu.metrics.CHRF()
    bleu_score = bleu.corpus_score(hypotheses, [references])
    chrf_score = chrf.corpus_score(hypotheses, [references])
    return Scores(
        bleu_score.score, chrf_score.score, str(bleu.get_signature()), str(chrf.get_signature()), len(hypotheses), beam
    )


def evaluate_files(
    checkpoint: Checkpoint, src_path: str | Path, ref_path: str | Path, beam: int = 1, show_progress: bool = True
) -> tuple[Scores, list[str]]:
    """Translates src_path and scores it against ref_path."""
    sources, references = read_parallel(src_path, ref_path)
    with tqdm(total=len(sources), desc="translating", unit="sent", disable=not show_progress) as bar:
        hypotheses = translate_texts(
            checkpoint.model, checkpoint.tokenizer, sources, DecodeSettings.greedy_or_beam(beam), progress=bar.update
        )
    return score(hypotheses, references, beam), hypotheses


def save_scores(path: str | Path, scores: Scores, name: str) -> None:
    """Stores the scores under metadata['scores'][name] in the checkpoint file."""
    entry = {
        "bleu": round(scores.bleu, 2),
        "chrf": round(scores.chrf, 2),
        "beam": scores.beam,
        "sentences": scores.sentences,
        "bleu_signature": scores.bleu_signature,
    }
    update_metadata(Path(path), lambda metadata: metadata.setdefault("scores", {}).update({name: entry}))


@dataclass(frozen=True)
class ValidationSet:
    name: str
    src: list[str]
    ref: list[str]
    pairs: list[tuple[list[int], list[int]]]


def validate(model: Transformer, tokenizer, sets: list[ValidationSet], settings: TrainSettings) -> dict[str, float]:
    """Teacher-forced loss per token over every set, greedy sacreBLEU of each, and their mean BLEU (`val_bleu`,
    which chooses the best checkpoint: one set alone would pick the model that fits its own domain)."""
    device = next(model.parameters()).device
    model.eval()
    loss_sum, tokens = 0.0, 0
    pairs = [pair for validation in sets for pair in validation.pairs]
    with torch.inference_mode():
        for _, (s, t_in, t_out) in iterate_batches(
            pairs, token_batches(pairs, settings.max_tokens, 0, 0), PAD_ID, model.config.start_id
        ):
            logits = model.logits(s.to(device), t_in.to(device)).float()
            loss_sum += nn.functional.cross_entropy(
                logits.transpose(1, 2), t_out.to(device), ignore_index=PAD_ID, reduction="sum"
            ).item()
            tokens += int((t_out != PAD_ID).sum())
    bleus = {
        f"val_bleu {validation.name}": sacrebleu.corpus_bleu(
            translate_texts(model, tokenizer, validation.src, batch_size=128), [validation.ref]
        ).score
        for validation in sets
    }
    model.train()
    mean = sum(bleus.values()) / len(bleus)
    return {"val_loss": loss_sum / max(tokens, 1), "val_bleu": mean, **(bleus if len(bleus) > 1 else {})}
