"""Activation patching of the heads and of the decoder's stream, checked against nnsight patching the same modules'
inputs and outputs, and against what must hold exactly."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from fixtures.patching_pair import CLEAN, CORRUPT, in_float64, nnsight_shares

from transformer.analysis.interventions.patching import SITES_PER_BATCH, contrast_of_texts, patch_encoder_stream
from transformer.analysis.interventions.sites import PatchingStopped, batches, pass_costs, patch_every_site
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint


@pytest.fixture(scope="module")
def shipped():
    return load_checkpoint(DEFAULT_CHECKPOINT)


@pytest.fixture(scope="module")
def pronoun(shipped):
    return contrast_of_texts(shipped.model, shipped.tokenizer, CLEAN, CORRUPT, "il", "elle")[0]


@pytest.fixture(scope="module")
def denoised(shipped, pronoun):
    return patch_every_site(in_float64(shipped), pronoun)


def test_every_head_and_decoder_site_restores_what_nnsight_patching_the_same_module_restores(
    shipped, pronoun, denoised
):
    config = shipped.config
    tired = pronoun.clean_src.index(shipped.tokenizer.encode("tired")[0])
    positions = [0, tired - 3, tired]  # the first word, "it", the word that differs
    sites = [
        *(["encoder_heads", layer, head, p] for layer in (1, 3) for head in range(config.n_heads) for p in positions),
        *(["cross_heads", layer, head] for layer in range(config.n_decoder_layers) for head in range(config.n_heads)),
        *(["decoder_self_heads", layer, 0] for layer in range(config.n_decoder_layers)),
        *(["decoder_residual", boundary] for boundary in range(config.n_decoder_layers + 1)),
    ]
    ours = np.array([getattr(denoised, site[0])[tuple(site[1:])] for site in sites])
    assert shipped.tokenizer.id_to_piece(pronoun.clean_src[tired - 3]) == "▁it"
    np.testing.assert_allclose(ours, nnsight_shares(DEFAULT_CHECKPOINT, pronoun, sites=sites), atol=1e-5)
    assert np.abs(denoised.cross_heads).max() > 0.3  # some cross head carries a share worth showing


def test_what_must_hold_exactly_holds(shipped, pronoun, denoised):
    """The decoder's stream at the step after its last layer is all the output reads (restores 1; noising -1); at
    its input, and in the first decoder layer's self-attention, both runs see the same output so far (0)."""
    noised = patch_every_site(in_float64(shipped), pronoun, noising=True)
    assert denoised.decoder_residual[-1] == pytest.approx(1.0, abs=1e-9)
    assert noised.decoder_residual[-1] == pytest.approx(-1.0, abs=1e-9)
    for found in (denoised, noised):
        assert found.decoder_residual[0] == pytest.approx(0.0, abs=1e-9)
        np.testing.assert_allclose(found.decoder_self_heads[0], 0.0, atol=1e-9)
    layers, heads = shipped.config.n_encoder_layers, shipped.config.n_heads
    assert denoised.encoder_heads.shape == (layers, heads, len(pronoun.clean_src))
    # The same grid: its unpatched runs computed apart (here reading every head), so rounded apart in float64
    stream = patch_encoder_stream(in_float64(shipped), pronoun).shares
    np.testing.assert_allclose(denoised.encoder_residual, stream, rtol=0, atol=1e-12)
    assert (denoised.metric_clean, denoised.metric_corrupt) == pytest.approx((0.133, -0.174), abs=2e-3)


def test_head_sites_in_a_batch_give_what_each_gives_alone(shipped, pronoun, denoised):
    alone = patch_every_site(in_float64(shipped), pronoun, sites_per_batch=1)
    for family in ("encoder_residual", "encoder_heads"):  # the families batched by sites_per_batch
        np.testing.assert_allclose(getattr(denoised, family), getattr(alone, family), atol=1e-9, err_msg=family)


def test_progress_counts_every_pass_and_a_stop_ends_the_work(shipped, pronoun):
    heard = []
    patch_every_site(shipped.model, pronoun, progress=lambda done, total: heard.append((done, total)))
    total = batches(shipped.model, len(pronoun.clean_src), SITES_PER_BATCH, stream_sites=61)  # 14 sites equal
    assert heard == [(done, total) for done in range(1, total + 1)]
    assert total < batches(shipped.model, len(pronoun.clean_src), SITES_PER_BATCH)  # what the page expects at most
    asked = []
    with pytest.raises(PatchingStopped):
        patch_every_site(shipped.model, pronoun, should_stop=lambda: len(asked.append(0) or asked) >= 3)
    assert len(asked) == 3  # stopped at the third pass's end, not run to the last


@pytest.mark.parametrize(
    ("positions", "per_batch", "stream_sites"), [(15, 64, 61), (15, 64, None), (4, 3, 18), (40, 8, None)]
)
def test_each_pass_has_a_weight_and_the_heavy_passes_weigh_most(shipped, positions, per_batch, stream_sites):
    costs = pass_costs(shipped.model, positions, per_batch, positions, 10, stream_sites)
    assert len(costs) == batches(shipped.model, positions, per_batch, stream_sites)
    layers = shipped.model.config.n_decoder_layers
    step_passes = costs[-(2 * layers + 1) :]  # one position each, at the step
    assert min(costs[: -(2 * layers + 1)]) > max(step_passes)


def test_the_passes_weighed_give_the_time_left_within_a_factor_of_2(shipped, pronoun):
    """Counted alike, the it pair's passes said 2-18x the time left: the stream's and the encoder heads' passes run
    whole layers over every position, the step's compute one position. Weighed, from the first pass on. Each pass
    timed as the fastest of three runs, on one thread: a pass takes 3-60 ms, and under load two threads made them
    erratic (160-660 ms for passes of 50; a run of the suite failed so)."""
    import time
    from itertools import accumulate

    costs = pass_costs(shipped.model, len(pronoun.clean_src), SITES_PER_BATCH, len(pronoun.clean_src), pronoun.step, 61)
    done_share = [done / sum(costs) for done in accumulate(costs)]
    runs, threads = [], torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        for _ in range(3):
            heard, started = [], time.perf_counter()
            patch_every_site(shipped.model, pronoun, progress=lambda done, total: heard.append(time.perf_counter()))
            runs.append([end - start for start, end in zip([started, *heard], heard)])  # the first: its two runs too
    finally:
        torch.set_num_threads(threads)
    passes = [min(times) for times in zip(*runs)]
    at = list(accumulate(passes))
    said = [elapsed / share * (1 - share) for elapsed, share in zip(at[:8], done_share)]  # the bar's estimate
    assert all(0.5 <= left / (at[-1] - elapsed) <= 2 for left, elapsed in zip(said, at)), (said, at)


def test_a_words_pieces_are_patched_together_where_words_are_asked(shipped, pronoun, denoised):
    from transformer.analysis.interventions.patching import encoder_streams, step_metric
    from transformer.analysis.words import word_spans

    model = in_float64(shipped)
    pieces = [shipped.tokenizer.id_to_piece(i) for i in pronoun.clean_src]
    spans = word_spans(pieces)
    by_word = patch_every_site(model, pronoun, spans=spans)
    assert by_word.encoder_residual.shape == (shipped.config.n_encoder_layers + 1, len(spans)) and len(spans) < len(
        pieces
    )
    assert by_word.encoder_heads.shape[2] == len(spans)
    for column, (start, end) in enumerate(spans):
        if end - start == 1:  # a word of one piece: the same site as that piece
            np.testing.assert_allclose(
                by_word.encoder_residual[:, column], denoised.encoder_residual[:, start], atol=1e-9
            )
            np.testing.assert_allclose(
                by_word.encoder_heads[:, :, column], denoised.encoder_heads[:, :, start], atol=1e-9
            )
    start, end = next(span for span in spans if span[1] - span[0] > 1)  # "didn't": its pieces patched at once
    (clean, metric_clean), (_, metric_corrupt) = encoder_streams(
        model, [pronoun.clean_src, pronoun.corrupt_src], pronoun
    )

    def whole_word(layer: int, x):
        if layer == 2:
            x = x.clone()
            x[:, start:end] = clean[2][start:end]
        return x

    with torch.inference_mode():
        patched = float(step_metric(model, torch.tensor([pronoun.corrupt_src]), pronoun, whole_word)[0])
    column = spans.index((start, end))
    expected = (patched - metric_corrupt) / (metric_clean - metric_corrupt)
    assert by_word.encoder_residual[2, column] == pytest.approx(expected, abs=1e-9)
    assert abs(expected - denoised.encoder_residual[2, start]) > 1e-3  # not its first piece's share alone


@pytest.mark.parametrize(("kind", "shape"), [("cross", "shipped"), ("decoder", "shipped"), ("decoder", "t5")])
def test_a_decoder_heads_runs_at_the_step_alone_give_what_the_whole_decoder_gives(
    shipped, pronoun, tokenizer, kind, shape
):
    """A head patched at the step changes nothing before it (causal attention): its runs compute the step alone
    over the run's cache, and give what running every position of the decoder gives (also with T5's relative
    positions, a pre-norm and RMS norms, in a small model of random weights)."""
    from helpers import tiny_config

    from transformer.analysis.interventions.patching import Contrast, step_metric
    from transformer.analysis.interventions.sites import at_the_step, recorded_runs, replacing
    from transformer.model.encoder_decoder import Transformer
    from transformer.model.kinds import AttentionKind
    from transformer.model.probes import Probe

    if shape == "t5":
        torch.manual_seed(0)
        overrides = dict(positional="relative", norm="rms", bias=False, feed_forward="gated", norm_first=True)
        model = Transformer(tiny_config(tokenizer, **overrides)).eval().double()
        pronoun = Contrast([5, 9, 14, 3], [5, 9, 15, 3], [21, 8, 30, 12, 3], 3, 12, 8)
    else:
        model = in_float64(shipped)
    with torch.inference_mode():  # as patch_every_site runs them
        heads, step = list(range(model.config.n_heads)), pronoun.step
        clean, corrupt = recorded_runs(model, [pronoun.clean_src, pronoun.corrupt_src], pronoun)
        site = (AttentionKind(kind), model.config.n_decoder_layers - 2)
        alone = replacing(clean.heads[site][:, step : step + 1], heads, [(0, 1)] * len(heads))
        at_step = at_the_step(model, pronoun, pronoun.corrupt_src, corrupt, len(heads), Probe(head_edits={site: alone}))
        whole = replacing(clean.heads[site], heads, [(step, step + 1)] * len(heads))
        start = (len(corrupt.encoder_streams) - 1, corrupt.encoder_streams[-1][None].expand(len(heads), -1, -1))
        src = torch.tensor([pronoun.corrupt_src]).expand(len(heads), -1)
        everywhere = step_metric(model, src, pronoun, start=start, probe=Probe(head_edits={site: whole})).numpy()
    np.testing.assert_allclose(at_step, everywhere, rtol=0, atol=1e-12)
    assert np.ptp(at_step) > 1e-3  # the heads differ: each row is its own head's run
