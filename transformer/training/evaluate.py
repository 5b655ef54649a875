"""BLEU and chrF of a checkpoint's translations, with sacreBLEU's signature."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import sacrebleu
from tqdm import tqdm

from transformer.decoding.settings import DecodeSettings
from transformer.decoding.translate import translate_texts
from transformer.io.checkpoint import Checkpoint, update_metadata
from transformer.text.files import read_parallel


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
