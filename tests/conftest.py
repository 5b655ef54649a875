"""Tiny models and data made in the tests: fast, and no file outside the repository needed."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from transformer.io.checkpoint import save_checkpoint
from transformer.model.config import TransformerConfig
from transformer.model.encoder_decoder import Transformer
from transformer.text.tokenizer import Tokenizer, train_tokenizer

REPO = Path(__file__).resolve().parent.parent
WORDS = "the a dog cat man woman child runs jumps sits red blue green big small park street water ball".split()


def make_sentences(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 9))) for _ in range(count)]


@pytest.fixture(scope="session")
def tokenizer() -> Tokenizer:
    return train_tokenizer(make_sentences(400), vocab_size=60)


def tiny_config(tokenizer: Tokenizer, **overrides) -> TransformerConfig:
    values = dict(src_vocab_size=tokenizer.vocab_size, tgt_vocab_size=tokenizer.vocab_size, d_model=16, n_heads=2,
                  d_ff=32, n_encoder_layers=2, n_decoder_layers=3, dropout=0.1, max_len=64)  # fmt: skip
    values.update(overrides)
    return TransformerConfig(**values)


@pytest.fixture(scope="session")
def config(tokenizer) -> TransformerConfig:
    return tiny_config(tokenizer)


@pytest.fixture(scope="session")
def model(config) -> Transformer:
    torch.manual_seed(0)
    return Transformer(config).eval()


@pytest.fixture(scope="session")
def checkpoint_path(tmp_path_factory, model, tokenizer) -> Path:
    path = tmp_path_factory.mktemp("ckpt") / "tiny.safetensors"
    save_checkpoint(path, model, tokenizer, {"languages": {"src": "en", "tgt": "en"}})
    return path
