"""A task whose attention can be predicted: reversing a sequence of number words.

Reading the source backwards, output token t must look at source token S-2-t (the last
source token is eos), so a model that has learned the task shows an anti-diagonal
encoder-decoder attention.
"""

from __future__ import annotations

import random
import tempfile
from pathlib import Path

from transformer.model.config import TransformerConfig
from transformer.training.settings import TrainSettings
from transformer.training.train import train

WORDS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"]


def reversal_pairs(count: int, seed: int, min_len: int = 3, max_len: int = 12) -> list[tuple[str, str]]:
    rng = random.Random(seed)
    pairs = []
    for _ in range(count):
        words = [rng.choice(WORDS) for _ in range(rng.randint(min_len, max_len))]
        pairs.append((" ".join(words), " ".join(reversed(words))))
    return pairs


def _write(directory: Path, name: str, pairs: list[tuple[str, str]]) -> tuple[str, str]:
    src, tgt = directory / f"{name}.src", directory / f"{name}.tgt"
    src.write_text("\n".join(p[0] for p in pairs) + "\n", encoding="utf-8")
    tgt.write_text("\n".join(p[1] for p in pairs) + "\n", encoding="utf-8")
    return str(src), str(tgt)


VOCAB = len(WORDS) + 4  # the words and the four special pieces
MODEL = TransformerConfig(
    VOCAB, VOCAB, d_model=64, n_heads=4, d_ff=256, n_encoder_layers=2, n_decoder_layers=2, dropout=0.0, max_len=32
)


def train_reversal(out: str | Path, seed: int = 1, epochs: int = 30, quiet: bool = False) -> float:
    """Trains the tiny reversal model (about a minute on two CPU cores); returns validation BLEU."""
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        train_src, train_tgt = _write(directory, "train", reversal_pairs(6000, seed))
        val_src, val_tgt = _write(directory, "val", reversal_pairs(200, seed + 1))
        settings = TrainSettings(
            train_src=train_src,
            train_tgt=train_tgt,
            val_src=val_src,
            val_tgt=val_tgt,
            out=str(out),
            src_lang="digits",
            tgt_lang="digits reversed",
            tokenizer_type="word",
            model=MODEL,
            epochs=epochs,
            max_tokens=1500,
            lr_factor=0.4,
            warmup=300,
            label_smoothing=0.0,
            patience=6,
            seed=seed,
            save_dtype="float32",
        )
        progress = train(settings, quiet=quiet)
        settings.state_path.unlink(missing_ok=True)
    return progress.best_bleu
