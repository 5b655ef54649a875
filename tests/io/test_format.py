"""FORMAT.md is complete: a NumPy implementation written from it alone matches the package on real files."""

from __future__ import annotations

import ast

import numpy as np
import pytest
import torch
from helpers import REPO, make_sentences, tiny_config
from numpy_reference import ReferenceModel

from transformer.decoding.greedy import decode_with_chooser
from transformer.io.checkpoint import load_checkpoint, save_checkpoint
from transformer.model.encoder_decoder import Transformer

SHIPPED = {
    "en-fr-captions": [
        "Two dogs are playing in the snow.",
        "A man in a blue shirt is riding a bicycle down the street.",
    ],
    "reverse": ["one two three four five", "seven nine two"],
}


def _assert_same(path, sentence: str) -> None:
    reference = ReferenceModel(str(path)).greedy(sentence)
    checkpoint = load_checkpoint(path)
    result = decode_with_chooser(checkpoint.model, checkpoint.tokenizer, sentence)
    assert reference["src_ids"] == result.src_ids and reference["tgt_ids"] == result.tgt_ids
    for kind in ("encoder_self", "decoder_self", "cross"):
        np.testing.assert_allclose(reference[kind], getattr(result, kind).numpy(), atol=1e-5, err_msg=kind)


@pytest.mark.parametrize(("name", "sentence"), [(n, s) for n, sentences in SHIPPED.items() for s in sentences])
def test_the_numpy_reference_gives_the_shipped_checkpoints_tokens_and_maps(name, sentence):
    _assert_same(REPO / "checkpoints" / f"{name}.safetensors", sentence)


VARIANTS = {
    "pre-norm, untied, learned positions, GELU": dict(norm_first=True, tie_embeddings=False, positional="learned",
                                                       activation="gelu"),
    "Marian's conventions": dict(activation="swish", scale_embedding=False, sinusoid_layout="halves",
                                 decoder_start_id=0, layer_norm_eps=1e-6),
}  # fmt: skip


@pytest.mark.parametrize("name", VARIANTS)
def test_the_numpy_reference_follows_every_variant_of_the_config(tmp_path, tokenizer, name):
    torch.manual_seed(3)
    model = Transformer(tiny_config(tokenizer, **VARIANTS[name])).eval()
    with torch.no_grad():
        for parameter in model.parameters():  # random norms and biases too: nothing left at its initial value
            parameter.add_(torch.randn_like(parameter) * 0.3)
    save_checkpoint(tmp_path / "variant.safetensors", model, tokenizer)
    for sentence in make_sentences(3, seed=11):
        _assert_same(tmp_path / "variant.safetensors", sentence)


def test_the_reference_imports_nothing_of_the_package():
    tree = ast.parse((REPO / "tests" / "numpy_reference.py").read_text())
    imported = {alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names}
    imported |= {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)}
    assert not any(name.split(".")[0] in ("transformer", "ui", "helpers") for name in imported), imported
