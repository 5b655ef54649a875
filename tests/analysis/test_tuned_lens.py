"""The tuned lens: fitted maps that leave the model alone, stored beside the checkpoint, refused for another."""

from __future__ import annotations

import pytest
import torch
from helpers import make_sentences, run_cli
from safetensors import safe_open
from safetensors.torch import save_file

from transformer.analysis.tuned_lens import TunedLens, TunedLensError, fit_tuned_lens, read_with
from transformer.decoding.greedy import decode_with_chooser
from transformer.io.tuned_lens_file import file_sha256, load_tuned_lens, save_tuned_lens, tuned_lens_path


def zero_lens(model) -> TunedLens:
    layers, width = model.config.n_decoder_layers - 1, model.config.d_model
    return TunedLens(torch.zeros(layers, width, width), torch.zeros(layers, width))


def test_maps_at_zero_read_as_the_logit_lens(model, tokenizer):
    result = decode_with_chooser(model, tokenizer, "the red ball")
    read = read_with(model, zero_lens(model), result.lens, result.tgt_ids)
    assert torch.equal(read.top_ids, result.lens.top_ids)
    assert torch.allclose(read.top_probs, result.lens.top_probs, atol=1e-6)
    assert torch.equal(read.chosen_rank, result.lens.chosen_rank)


def test_fitting_brings_early_layers_closer_to_the_output_and_leaves_the_model_alone(model, tokenizer):
    before = {name: value.clone() for name, value in model.state_dict().items()}
    sentences = make_sentences(300, seed=3)
    lens = fit_tuned_lens(model, tokenizer, sentences, sentences[::-1], steps=40, batch_tokens=300, learning_rate=3e-3)
    assert len(lens.kl_logit) == len(lens.kl_tuned) == model.config.n_decoder_layers - 1
    assert all(tuned < plain for plain, tuned in zip(lens.kl_logit, lens.kl_tuned)), (lens.kl_logit, lens.kl_tuned)
    assert all(torch.equal(before[name], value) for name, value in model.state_dict().items())
    assert all(parameter.requires_grad for parameter in model.parameters())  # as it was
    assert not lens.weights.requires_grad


def test_a_lens_is_read_back_only_for_the_checkpoint_it_was_fitted_to(model, checkpoint_path, tmp_path):
    lens = TunedLens(torch.randn(2, 16, 16), torch.randn(2, 16), (1.0, 2.0), (0.5, 0.25))
    path = tuned_lens_path(checkpoint_path)
    assert path == checkpoint_path.parent / "lenses" / "tiny.safetensors"
    save_tuned_lens(path, lens, file_sha256(checkpoint_path), "a / b")
    read = load_tuned_lens(path, model, file_sha256(checkpoint_path))
    assert torch.equal(read.weights, lens.weights) and read.kl_tuned == (0.5, 0.25)
    with pytest.raises(TunedLensError, match="another checkpoint"):
        load_tuned_lens(path, model, "0" * 64)
    with pytest.raises(TunedLensError, match="not a tuned lens"):
        load_tuned_lens(checkpoint_path, model, file_sha256(checkpoint_path))  # a checkpoint is no lens
    garbage = tmp_path / "garbage.safetensors"
    garbage.write_bytes(b"\xff" * 100)
    with pytest.raises(TunedLensError, match="not a readable tuned lens"):
        load_tuned_lens(garbage, model, file_sha256(checkpoint_path))
    wrong = tmp_path / "wrong.safetensors"
    save_tuned_lens(wrong, TunedLens(torch.zeros(1, 16, 16), torch.zeros(1, 16)), file_sha256(checkpoint_path), "")
    with pytest.raises(TunedLensError, match="does not fit"):
        load_tuned_lens(wrong, model, file_sha256(checkpoint_path))
    broken = tmp_path / "broken.safetensors"
    save_tuned_lens(
        broken, TunedLens(torch.full((2, 16, 16), float("nan")), torch.zeros(2, 16)), file_sha256(checkpoint_path), ""
    )
    with pytest.raises(TunedLensError, match="not finite"):
        load_tuned_lens(broken, model, file_sha256(checkpoint_path))


@pytest.mark.parametrize(
    "kl",
    [
        "not json",
        '[[1.0, 2.0], {"a": 1}]',
        '["a", "b"]',
        "[1.0, NaN]",
        "[1.0]",
        "[" + "1.0, " * 5_000_000 + "1.0]",
        "[" * 100_000,
        "9" * 5000,
    ],
    ids=["not JSON", "nested", "strings", "NaN", "too few", "five million", "deep", "5,000 digits"],
)
def test_a_lens_file_whose_measured_kl_is_not_numbers_per_layer_is_refused_in_one_line(
    model, checkpoint_path, tmp_path, kl
):
    """Strings loaded and then broke the explorer for every visitor; 5M values went to every browser."""
    path = tmp_path / "hostile.safetensors"
    lens = TunedLens(torch.zeros(2, 16, 16), torch.zeros(2, 16))
    save_tuned_lens(path, lens, file_sha256(checkpoint_path), "")
    save_file(
        {"weights": lens.weights, "biases": lens.biases},
        str(path),
        {**safe_open(str(path), "pt").metadata(), "kl_tuned": kl},
    )
    with pytest.raises(TunedLensError, match="kl_tuned") as error:
        load_tuned_lens(path, model, file_sha256(checkpoint_path))
    assert "\n" not in str(error.value) and len(str(error.value)) < 200


def test_the_command_line_fits_and_stores_a_lens_beside_the_checkpoint(checkpoint_path, model, tmp_path):
    sentences = make_sentences(200, seed=5)
    src, tgt = tmp_path / "src.txt", tmp_path / "tgt.txt"
    src.write_text("\n".join(sentences) + "\n")
    tgt.write_text("\n".join(reversed(sentences)) + "\n")
    out = tmp_path / "lens.safetensors"
    done = run_cli(
        "train-lens", "--checkpoint", checkpoint_path, "--src", src, "--tgt", tgt, "--steps", 3, "--out", out
    )
    assert done.returncode == 0, done.stderr
    assert "decoder layer 2: mean KL from the output" in done.stdout and f"wrote {out}" in done.stdout
    assert load_tuned_lens(out, model, file_sha256(checkpoint_path)).weights.shape == (2, 16, 16)
    done = run_cli("train-lens", "--checkpoint", tmp_path, "--src", src, "--tgt", tgt)
    assert done.returncode == 2 and "is not a checkpoint file" in done.stderr
