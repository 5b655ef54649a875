"""Tiny models and data made in the tests: fast, and no file outside the repository needed."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from helpers import make_sentences, tiny_config

from transformer.io.checkpoint import save_checkpoint
from transformer.model.config import TransformerConfig
from transformer.model.encoder_decoder import Transformer
from transformer.text.tokenizer import Tokenizer, train_tokenizer


@pytest.fixture(scope="session")
def tokenizer() -> Tokenizer:
    return train_tokenizer(make_sentences(400), vocab_size=60)


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
