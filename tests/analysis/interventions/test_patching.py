"""Activation patching of the encoder's stream, checked against nnsight patching the same module's outputs."""

from __future__ import annotations

import sys

import numpy as np
import pytest
import torch
from fixtures.hf_models import save_marian
from fixtures.patching_pair import CLEAN, CORRUPT, in_float64, nnsight_shares
from helpers import make_sentences

from transformer.analysis.interventions.patching import (
    Contrast,
    NotWritten,
    contrast_of_texts,
    encoder_streams,
    patch_encoder_stream,
    step_metric,
    stream_metrics,
    stream_sites,
    target_step,
)
from transformer.analysis.interventions.sites import patch_every_site
from transformer.decoding.result import source_ids
from transformer.decoding.strategies import decode_text
from transformer.hugging_face.marian import import_marian
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint


@pytest.fixture(scope="module")
def shipped():
    return load_checkpoint(DEFAULT_CHECKPOINT)


@pytest.fixture(scope="module")
def pronoun(shipped) -> Contrast:
    return contrast_of_texts(shipped.model, shipped.tokenizer, CLEAN, CORRUPT, "il", "elle")[0]


def test_every_site_restores_what_nnsight_patching_the_same_module_restores(shipped, pronoun):
    model = in_float64(shipped)
    found = patch_encoder_stream(model, pronoun)
    assert shipped.tokenizer.id_to_piece(pronoun.target) == "il"  # "parce qu'il était trop fatigué"
    wide = decode_text(shipped.model, shipped.tokenizer, CORRUPT).tgt_ids
    assert (
        wide[: pronoun.step] == pronoun.output[: pronoun.step] and wide[pronoun.step] != pronoun.target
    )  # it differs first there
    assert found.metric_clean > 0 > found.metric_corrupt  # il over elle for the tired animal, not for the wide street
    np.testing.assert_allclose(found.shares.ravel(), nnsight_shares(DEFAULT_CHECKPOINT, pronoun), atol=1e-5)
    assert "nnsight" not in sys.modules  # it gives every object a `save`: never in this process
    tired = shipped.tokenizer.encode("tired")[0]
    assert found.shares[0].argmax() == pronoun.clean_src.index(tired)  # at the input, the one word that differs


def test_a_tiny_hugging_face_model_agrees_with_nnsight_too(tmp_path):
    """A random Marian model (scaled embeddings, a final logits bias): its first output token against its second most
    likely, the source's one different word patched from "red" to "blue"; every site of every family."""
    sentences = [" ".join(s.split()) for s in make_sentences(300, seed=1)]
    directory = save_marian(tmp_path, sentences, sentences)
    marian = import_marian(directory)
    model, tokenizer, limit = marian.model, marian.tokenizer, marian.model.config.max_len
    clean, corrupt = (
        source_ids(tokenizer, "the red dog runs", limit)[0],
        source_ids(tokenizer, "the blue dog runs", limit)[0],
    )
    output = decode_text(model, tokenizer, "the red dog runs")
    contrast = Contrast(clean, corrupt, output.tgt_ids, 0, output.tgt_ids[0], int(output.topk_ids[0][1]))
    found = patch_every_site(in_float64(marian), contrast)
    assert found.metric_clean != found.metric_corrupt
    families = ("encoder_residual", "encoder_heads", "cross_heads", "decoder_self_heads", "decoder_residual")
    sites = [[family, *map(int, at)] for family in families for at in np.ndindex(getattr(found, family).shape)]
    ours = np.array([getattr(found, site[0])[tuple(site[1:])] for site in sites])
    np.testing.assert_allclose(ours, nnsight_shares(directory, contrast, marian=True, sites=sites), atol=1e-5)


@pytest.mark.parametrize("noising", [False, True])
def test_a_whole_layer_patched_restores_all_and_nothing_patched_restores_nothing(shipped, pronoun, noising):
    (clean_streams, metric_clean), (corrupt_streams, metric_corrupt) = encoder_streams(
        shipped.model, [pronoun.clean_src, pronoun.corrupt_src], pronoun
    )
    run, patched_from = (pronoun.clean_src, corrupt_streams) if noising else (pronoun.corrupt_src, clean_streams)
    [(_, base)] = encoder_streams(shipped.model, [run], pronoun)  # one row, as the runs below: rounded alike
    src = torch.tensor([run])
    for layer in range(len(clean_streams)):

        def whole(at: int, x: torch.Tensor, layer: int = layer) -> torch.Tensor:
            return patched_from[layer][None].clone() if at == layer else x

        with torch.inference_mode():
            patched = float(step_metric(shipped.model, src, pronoun, whole)[0])
            untouched = float(step_metric(shipped.model, src, pronoun, lambda at, x: x)[0])
        share = (patched - base) / (metric_clean - metric_corrupt)
        assert share == pytest.approx(-1.0 if noising else 1.0, abs=1e-5), layer
        assert (untouched - base) / (metric_clean - metric_corrupt) == pytest.approx(0.0, abs=1e-6)


def test_sites_in_a_batch_give_what_each_gives_alone(shipped, pronoun):
    double = in_float64(shipped)  # in float32 the batch's other shapes round differently, a few 1e-5 of a share
    batched = patch_encoder_stream(double, pronoun, noising=True)
    alone = patch_encoder_stream(double, pronoun, noising=True, sites_per_batch=1)
    np.testing.assert_allclose(batched.shares, alone.shares, atol=1e-5)
    assert batched.noising and batched.shares.min() < -0.5  # corrupting "tired" alone takes most of il away


def test_sites_of_several_boundaries_share_a_pass_each_joining_at_its_own_boundary(shipped, pronoun):
    """The stream grid's sites run 32 a pass across boundaries (2 passes for the 61 sites of 5 boundaries of 15
    positions where the runs differ, where one pass a boundary took 5), and give what each boundary's sites give in
    passes of their own."""
    double = in_float64(shipped)
    (clean, _), (corrupt, metric_corrupt) = encoder_streams(double, [pronoun.clean_src, pronoun.corrupt_src], pronoun)
    passes = []
    run = (double, pronoun, pronoun.corrupt_src, corrupt, clean, metric_corrupt)
    with torch.inference_mode():
        shared = stream_metrics(*run, 32, lambda: passes.append(1))
        by_boundary = stream_metrics(*run, len(pronoun.corrupt_src))
    assert shared.shape == (len(clean), len(pronoun.corrupt_src)) == (5, 15)
    assert len(stream_sites(corrupt, clean, [(p, p + 1) for p in range(15)])) == 61 and len(passes) == 2
    np.testing.assert_allclose(shared, by_boundary, atol=1e-9)


def test_a_site_where_both_runs_are_equal_is_the_run_itself_and_is_not_run(shipped, pronoun):
    """At the first boundary (the embeddings with positions) the two sources differ at "tired"/"wide" only: the
    other 14 sites there are not run, and their metric is the corrupted run's own, which is what running one gives."""
    (clean, _), (corrupt, metric_corrupt) = encoder_streams(
        shipped.model, [pronoun.clean_src, pronoun.corrupt_src], pronoun
    )
    tired = pronoun.clean_src.index(shipped.tokenizer.encode("tired")[0])
    singles = [(p, p + 1) for p in range(len(clean[0]))]
    assert [site for site in stream_sites(corrupt, clean, singles) if site[0] == 0] == [(0, (tired, tired + 1))]

    def first_word_patched(layer: int, x: torch.Tensor) -> torch.Tensor:
        if layer == 0:
            x = x.clone()
            x[:, 0] = clean[0][0]
        return x

    with torch.inference_mode():
        found = stream_metrics(shipped.model, pronoun, pronoun.corrupt_src, corrupt, clean, metric_corrupt, 128)
        src = torch.tensor([pronoun.corrupt_src])
        ran = float(step_metric(shipped.model, src, pronoun, first_word_patched)[0])
    assert (found[0] == metric_corrupt).sum() == 14 and found[0, tired] != metric_corrupt
    assert ran == pytest.approx(metric_corrupt, abs=1e-6)


def test_sources_of_different_piece_counts_are_refused_naming_both():
    with pytest.raises(ValueError, match="the clean source has 3 pieces and the corrupted one 4"):
        Contrast([5, 6, 2], [5, 6, 7, 2], [9, 2], 0, 9, None)


def test_the_metric_is_the_logit_difference_or_without_a_foil_the_targets_log_probability(shipped, pronoun):
    """Read against the model's whole teacher-forced output: the difference reads two rows of the output layer
    alone, the log-probability all of them."""
    alone = Contrast(pronoun.clean_src, pronoun.corrupt_src, pronoun.output, pronoun.step, pronoun.target)
    src = torch.tensor([pronoun.clean_src])
    with torch.inference_mode():
        log_probs = shipped.model(src, torch.tensor([[shipped.config.start_id, *pronoun.output]])).log_probs
        expected = log_probs[0, pronoun.step]
        difference, log_prob = (float(step_metric(shipped.model, src, c)[0]) for c in (pronoun, alone))
    assert log_prob == pytest.approx(float(expected[pronoun.target]), abs=1e-5) and log_prob < 0
    assert difference == pytest.approx(float(expected[pronoun.target] - expected[pronoun.foil]), abs=1e-5)
    assert difference > 0  # the clean run writes il over elle


def test_the_command_line_writes_the_grid_and_says_what_it_cannot_read(tmp_path, capsys):
    from transformer.cli import main

    out = tmp_path / "patch.npz"
    assert (
        main(["patch", "--clean", CLEAN, "--corrupt", CORRUPT, "--target", "il", "--foil", "elle", "--out", str(out)])
        == 0
    )
    found = np.load(out)
    layers = load_checkpoint(DEFAULT_CHECKPOINT).config.n_encoder_layers
    config = load_checkpoint(DEFAULT_CHECKPOINT).config
    assert found["encoder_residual"].shape == (layers + 1, len(found["src_ids"]))
    assert found["encoder_heads"].shape == (layers, config.n_heads, len(found["src_ids"]))
    assert found["cross_heads"].shape == found["decoder_self_heads"].shape == (config.n_decoder_layers, config.n_heads)
    assert found["decoder_residual"].shape == (config.n_decoder_layers + 1,) and found["decoder_residual"][
        -1
    ] == pytest.approx(1, abs=1e-4)
    assert found["tgt_pieces"][int(found["step"])] == "il" and float(found["metric_clean"]) > 0
    said = capsys.readouterr().err
    by_word = tmp_path / "words.npz"
    clean_and_corrupt = ["--clean", CLEAN, "--corrupt", CORRUPT, "--target", "il", "--foil", "elle"]
    assert main(["patch", *clean_and_corrupt, "--words", "--out", str(by_word)]) == 0
    words = np.load(by_word)
    assert list(words["src_words"])[2] == "▁didn't" and words["encoder_residual"].shape == (layers + 1, 12)
    assert "strongest site: tired. at layer boundary 0" in capsys.readouterr().err
    assert "strongest site: tired at layer boundary 0" in said and "the strongest head at the step: cross." in said
    refusals = {
        "--target": (["--target", "elle"], "no output token is 'elle': the output's pieces are"),
        "--step": (["--target", "il", "--step", "2"], "the output's token 2 is not 'il'"),
        "--foil": (["--target", "il", "--foil", "fatiguées"], "the foil 'fatiguées' is no one piece"),
        "--corrupt": (["--target", "il", "--corrupt", "The animal was tired."], "the clean source has 15 pieces"),
    }
    for flag, (extra, said) in refusals.items():
        command = ["patch", "--clean", CLEAN, "--corrupt", CORRUPT, "--out", str(out), *extra]
        assert main(command) == 2, flag
        error = capsys.readouterr().err
        assert said in error and error.count("\n") == 1, (flag, error)


def test_a_target_never_written_is_said_with_the_outputs_pieces_as_the_pages_show_them():
    """Tried as a new user would (issue 83, item 14): the message listed raw pieces ("▁Mon ▁frère ▁est …")."""
    with pytest.raises(NotWritten) as raised:
        target_step(["▁Mon", "▁frère", "▁est", "▁méde", "cin", "."], "Ma")
    assert str(raised.value) == "no output token is 'Ma': the output's pieces are Mon frère est méde ·cin ."
