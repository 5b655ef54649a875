"""Attribution beside attention: integrated gradients' completeness, value-weighted attention, gradient x input
against finite differences, contrastive attribution, Spearman agreement, and the CLI's file."""

from __future__ import annotations

import copy

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import REPO

from transformer.analysis.attribution.gradients import embedded_inputs, scorer
from transformer.analysis.attribution.measures import agreement, attribute, contrastive
from transformer.analysis.contributions import contributions
from transformer.decoding.greedy import decode_with_chooser
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint
from transformer.model.kinds import AttentionKind


@pytest.fixture(scope="module")
def shipped():
    return load_checkpoint(REPO / "checkpoints" / "en-fr-captions.safetensors")


@pytest.mark.parametrize("sentence", ["Two dogs play.", "A little girl in a pink dress climbs the stairs."])
def test_integrated_gradients_are_complete_within_a_tenth_of_the_difference(shipped, sentence):
    result = decode_with_chooser(shipped.model, shipped.tokenizer, sentence)
    found = attribute(shipped.model, result)
    np.testing.assert_allclose(found.log_probs, result.token_probs.log().numpy(), atol=1e-4)  # the decode's own
    total = found.integrated_gradients.sum(1) + found.integrated_gradients_target.sum(1)
    difference = found.log_probs - found.baseline_log_probs
    np.testing.assert_allclose(found.convergence_delta, total - difference, atol=1e-3)  # captum's delta is this
    # Completeness: attributions sum to f(input) - f(baseline). With 32 midpoint steps the error measured on
    # the shipped model stays under 5% of the difference; a tenth is the tolerance held here.
    assert np.all(np.abs(found.convergence_delta) <= 0.1 * np.abs(difference)), found.convergence_delta / difference
    assert np.allclose(np.triu(found.integrated_gradients_target, k=1), 0)  # the prefix after step t plays no part
    assert found.agreement.shape == (3, 8) and np.all(np.abs(found.agreement) <= 1)
    assert np.all((found.source_share >= 0) & (found.source_share <= 1))


@pytest.mark.parametrize("rows_per_pass", [4096, 20])  # every interpolation point in one pass; a few a pass
@pytest.mark.parametrize("contrasted", [False, True])
def test_integrated_gradients_equal_captums_whose_forward_passes_are_each_steps_own(
    model, tokenizer, monkeypatch, rows_per_pass, contrasted
):
    """One forward pass serves every output step here; captum's IntegratedGradients, given each step as a row of
    its own (its own forward and backward passes) and the same midpoint rule, must find the same numbers."""
    from captum.attr import IntegratedGradients

    import transformer.analysis.attribution.gradients as gradients

    monkeypatch.setattr(gradients, "ROWS_PER_PASS", rows_per_pass)
    result = decode_with_chooser(model, tokenizer, "the red dog runs in the blue park")
    src, decoder_input, embedded = embedded_inputs(model, result.src_ids, result.tgt_ids, result.steps)
    steps, tokens = torch.arange(result.steps), torch.tensor(result.tgt_ids)
    foils = torch.tensor([int(result.topk_ids[step, 1]) for step in range(result.steps)])
    with torch.enable_grad():
        expected, expected_delta = IntegratedGradients(
            scorer(model, src, decoder_input, contrastive=contrasted)
        ).attribute(
            embedded,
            baselines=tuple(torch.zeros_like(e) for e in embedded),
            additional_forward_args=(steps, tokens, *((foils,) if contrasted else ())),
            n_steps=8,
            method="riemann_middle",
            return_convergence_delta=True,
        )
    expected = [e.sum(-1).detach().numpy() for e in expected]
    if contrasted:
        for step in (0, result.steps - 1):
            source, prefix, delta = contrastive(model, result, step, int(foils[step]), n_steps=8)
            np.testing.assert_allclose(source, expected[0][step], atol=1e-5)
            np.testing.assert_allclose(prefix, expected[1][step], atol=1e-5)
            assert delta == pytest.approx(float(expected_delta[step]), abs=1e-5)
        return
    found = attribute(model, result, n_steps=8)
    np.testing.assert_allclose(found.integrated_gradients, expected[0], atol=1e-5)
    np.testing.assert_allclose(found.integrated_gradients_target, np.tril(expected[1]), atol=1e-5)
    np.testing.assert_allclose(found.convergence_delta, expected_delta.detach().numpy(), atol=1e-5)
    assert np.abs(found.integrated_gradients).max() > 1e-3  # not trivially zero


def test_value_weighted_attention_equals_the_weights_when_values_have_equal_norms(model, tokenizer):
    from transformer.model.encoder_decoder import Transformer

    equal = Transformer(model.config).eval()
    equal.load_state_dict(model.state_dict())
    with torch.no_grad():
        for kind in AttentionKind:
            for layer in range(len(equal.encoder_layers if kind.queries_from_source else equal.decoder_layers)):
                kind.module(equal, layer).v_proj.weight.zero_()  # every value is the bias: one norm per head
    result = decode_with_chooser(equal, tokenizer, "the dog runs in the park")
    found = attribute(equal, result, n_steps=4)
    for kind in AttentionKind:
        np.testing.assert_allclose(found.value_weighted[kind], result.maps(kind).numpy(), atol=1e-5, err_msg=kind)
    ordinary = attribute(model, decode_with_chooser(model, tokenizer, "the dog runs in the park"), n_steps=4)
    assert not np.allclose(
        ordinary.value_weighted[AttentionKind.CROSS],
        decode_with_chooser(model, tokenizer, "the dog runs in the park").cross.numpy(),
        atol=1e-3,
    )


def test_gradient_x_input_equals_finite_differences(model, tokenizer):
    result = decode_with_chooser(model, tokenizer, "a red ball in the water")
    exact = copy.deepcopy(model).double()  # in float32, the differences would be mostly rounding noise
    found = attribute(exact, result, n_steps=4)
    src, decoder_input, (src_embedded, tgt_embedded) = embedded_inputs(exact, result.src_ids, result.tgt_ids, 1)
    score = scorer(exact, src, decoder_input)
    step, epsilon = 2, 1e-4  # central differences: error of order epsilon squared
    token = torch.tensor([result.tgt_ids[step]])
    for j in range(len(result.src_ids)):  # d/de f(x with x_j scaled by 1 + e) at 0 is sum_d x_jd df/dx_jd
        values = []
        for sign in (1, -1):
            scaled = src_embedded.clone()
            scaled[0, j] *= 1 + sign * epsilon
            with torch.no_grad():
                values.append(score(scaled, tgt_embedded, torch.tensor([step]), token).item())
        assert found.gradient_x_input[step, j] == pytest.approx((values[0] - values[1]) / (2 * epsilon), abs=1e-6)
    assert np.abs(found.gradient_x_input[step]).max() > 1e-2  # not trivially zero


def test_contrastive_attribution_of_a_token_against_itself_is_zero(model, tokenizer):
    result = decode_with_chooser(model, tokenizer, "the cat sits")
    source, prefix, delta = contrastive(model, result, 1, result.tgt_ids[1])
    assert np.all(source == 0) and np.all(prefix == 0) and delta == 0
    other = int(result.topk_ids[1, 1])
    source, prefix, delta = contrastive(model, result, 1, other)
    assert np.abs(source).sum() > 0 and abs(source.sum() + prefix.sum() + 0) > 0


def test_agreement_is_spearmans_rank_correlation():
    rng = np.random.default_rng(0)
    cross = rng.integers(0, 4, size=(2, 3, 5, 7)).astype(float)  # ties included
    attribution = rng.normal(size=(5, 7))
    found = agreement(cross, attribution)
    for layer, head, step in [(0, 0, 0), (1, 2, 4), (0, 1, 3)]:
        ranks = pd.Series(cross[layer, head, step]).rank(), pd.Series(np.abs(attribution[step])).rank()
        expected = ranks[0].corr(ranks[1])  # Spearman's coefficient: Pearson's of the (average) ranks
        assert found[layer, head, step] == pytest.approx(expected)
    assert np.isnan(agreement(np.ones((1, 1, 1, 3)), attribution[:1, :3])).all()  # a flat row ranks nothing


def test_the_cli_writes_every_array_with_its_shape(tmp_path):
    from transformer.cli import main

    out = tmp_path / "attribution.npz"
    checkpoint = str(REPO / "checkpoints" / "reverse.safetensors")
    assert (
        main(["attribute", "--checkpoint", checkpoint, "--text", "one two three", "--out", str(out), "--steps", "8"])
        == 0
    )
    arrays = np.load(out)
    t, s = len(arrays["target_pieces"]), len(arrays["source_pieces"])
    layers, heads = arrays["agreement"].shape
    expected = {
        "integrated_gradients": (t, s),
        "integrated_gradients_target": (t, t),
        "gradient_x_input": (t, s),
        "value_weighted_cross": (layers, heads, t, s),
        "convergence_delta": (t,),
    }
    assert {name: arrays[name].shape for name in expected} == expected
    np.testing.assert_allclose(arrays["value_weighted_cross"].sum(-1), 1, atol=1e-5)
    assert (
        main(
            [
                "attribute",
                "--checkpoint",
                checkpoint,
                "--text",
                "one two",
                "--out",
                str(tmp_path / "a.json"),
                "--format",
                "json",
                "--beam",
                "2",
            ]
        )
        == 0
    )
    import json

    assert set(expected) <= set(json.loads((tmp_path / "a.json").read_text()))


def test_the_source_share_per_step_draws_each_measure_in_its_maps_colour():
    """Its lines took Plotly's colours, the first blue, which on this page means "lowered": integrated gradients is
    drawn in the red its signed maps raise in, ALTI+ in its shares' green."""
    from helpers import figure, start

    from transformer.viz.attribution import MEASURE_COLOURS

    at = start().switch_page("pages/attribution.py").run()
    assert not at.exception
    shares = next(
        f
        for f in (figure(at, i) for i in range(len(at.get("plotly_chart"))))
        if f["layout"]["title"]["text"] == "share on the source, per step"
    )
    colours = {trace["name"]: trace["line"]["color"] for trace in shares["data"]}
    assert colours == MEASURE_COLOURS == {"integrated gradients": "rgb(203,24,29)", "ALTI+": "rgb(35,139,69)"}


def test_the_attribution_page_draws_the_five_measures_of_the_explorers_step():
    from helpers import array, figure, markdown, start, step_action, translate

    at = translate(start(), "Two dogs are playing in the snow.")
    at = step_action(at, name="attention", step=1).switch_page("pages/attribution.py").run()  # step 2
    assert not at.exception
    assert "Step 2: " in markdown(at) or any("Step 2" in h.value for h in at.subheader)
    step_figure = figure(at, 0)
    rows = step_figure["data"][0]["y"]
    assert [name.split(" (")[0] for name in rows] == [
        "cross-attention",
        "value-weighted",
        "gradient × input",
        "integrated gradients",
        "ALTI+",
    ]
    attention, gradients = (array(trace["z"]) for trace in step_figure["data"])
    result = at.session_state["result"]
    unsigned, signed = [0, 1, 4], [2, 3]
    assert attention.shape == gradients.shape == (5, len(result.src_ids))
    assert np.isnan(attention[signed]).all() and np.isnan(gradients[unsigned]).all()  # each row drawn by one trace
    shares = np.where(np.isnan(attention), gradients, attention)
    np.testing.assert_allclose(np.abs(shares).sum(1), 1, atol=1e-5)  # each measure as shares of its row's |value|
    assert (attention[unsigned] >= 0).all()
    values = array(step_figure["data"][1]["customdata"])
    np.testing.assert_array_equal(np.sign(gradients[signed]), np.sign(values[signed]))  # a gradient keeps its sign
    assert step_figure["data"][1]["zmid"] == 0 and step_figure["data"][1]["zmin"] == -step_figure["data"][1]["zmax"]
    alti = contributions(load_checkpoint(DEFAULT_CHECKPOINT).model, result.src_ids, result.tgt_ids).alti_plus
    np.testing.assert_allclose(
        shares[4], alti[1, : len(result.src_ids)] / alti[1, : len(result.src_ids)].sum(), atol=1e-5
    )
    assert "ALTI+ puts" in markdown(at) and "Spearman" in markdown(at)
    np.testing.assert_allclose(shares[0], result.cross[0, 0, 1].numpy() / result.cross[0, 0, 1].sum().item(), atol=1e-5)
    table = at.dataframe[0].value
    assert len(table) == 24 and list(table.columns)[0] == "mean over steps"
    at.toggle(key="attribution_mean").set_value(True).run()
    np.testing.assert_allclose(
        array(figure(at, 0)["data"][0]["z"])[0], result.cross[0, :, 1].mean(0).numpy(), atol=1e-5
    )
    foil = at.selectbox(key="attribution_foil_1")
    assert foil.value is not None and not at.exception


def test_corpus_mode_ranks_the_heads_by_their_agreement_over_the_file(model, tokenizer):
    from helpers import start

    from transformer.analysis.attribution.measures import corpus_agreement

    sentences = ["the dog runs", "", "a red ball in the water"]
    values, used = corpus_agreement(model, tokenizer, sentences, n_steps=4)
    assert used == 2 and values.shape == (3, 2)
    first = attribute(model, decode_with_chooser(model, tokenizer, "the dog runs"), n_steps=4).agreement
    second = attribute(model, decode_with_chooser(model, tokenizer, "a red ball in the water"), n_steps=4).agreement
    np.testing.assert_allclose(values, np.nanmean(np.stack([first, second]), axis=0), atol=1e-6)

    at = start().switch_page("pages/corpus.py").run()
    at.file_uploader(key="corpus_src").set_value(("src.txt", b"Two dogs play.\\nA man runs.\\n", "text/plain"))
    at.button(key="FormSubmitter:corpus-Translate the file").click().run()
    at.button(key="agreement_run").click().run()
    assert not at.exception
    ranked = at.dataframe[1].value
    assert len(ranked) == 24 and ranked.iloc[:, 0].is_monotonic_decreasing


def test_the_work_of_a_request_is_capped_by_fewer_steps_then_by_refusal():
    from transformer.analysis.attribution.gradients import DEFAULT_STEPS, interpolation_steps

    assert interpolation_steps(20, 45, 100_000) == DEFAULT_STEPS  # a 20-token output of a 25-token sentence
    assert interpolation_steps(40, 80, 100_000) == 31  # fewer steps, within the budget
    assert interpolation_steps(128, 256, 100_000) is None  # the longest input: 508 s in the CLI, refused here


def test_an_attribution_stops_between_output_steps_when_asked(shipped):
    from transformer.analysis.attribution.gradients import AttributionStopped

    result = decode_with_chooser(shipped.model, shipped.tokenizer, "A little girl in a pink dress climbs the stairs.")
    asked = []

    def stop_after_first_step() -> bool:
        asked.append(1)
        return len(asked) > 1

    with pytest.raises(AttributionStopped):
        attribute(shipped.model, result, n_steps=4, should_stop=stop_after_first_step)
    assert len(asked) == 2 and result.steps > 2  # one step's backward pass computed, then stopped


def _hold_the_slot(slots) -> None:
    """A first visitor's job takes the only slot."""
    assert slots.take(slots.ask(), timeout=1)


def test_heavy_jobs_wait_for_a_slot_and_stop_when_their_visitor_leaves(monkeypatch):
    import threading
    import types

    from streamlit.runtime.scriptrunner_utils.exceptions import StopException
    from streamlit.runtime.scriptrunner_utils.script_requests import ScriptRequestType

    import ui.services.work
    import ui.widgets.progress
    from transformer.analysis.attribution.gradients import AttributionStopped

    monkeypatch.setattr(ui.services.work, "SLOTS", ui.services.work.Slots(1))
    order = []

    def other_visitor():
        with ui.services.work.heavy_job("attributions"):
            order.append("second")

    _hold_the_slot(ui.services.work.SLOTS)
    waiting = threading.Thread(target=other_visitor)
    waiting.start()
    waiting.join(timeout=1.0)
    assert waiting.is_alive() and not order  # queued, not computing beside the first
    order.append("first done")
    ui.services.work.SLOTS.release()
    waiting.join(timeout=10)
    assert order == ["first done", "second"]

    requests = types.SimpleNamespace(_state=ScriptRequestType.STOP)  # Streamlit asked this run to stop: a closed tab
    monkeypatch.setattr(ui.services.work, "get_script_run_ctx", lambda: types.SimpleNamespace(script_requests=requests))
    _hold_the_slot(ui.services.work.SLOTS)
    with pytest.raises(StopException):  # waiting, the visitor leaves: the wait ends, and its place in line with it
        with ui.services.work.heavy_job("attributions"):
            pytest.fail("ran although its visitor had left")
    assert ui.services.work.SLOTS.waiting() == 0
    ui.services.work.SLOTS.release()
    with pytest.raises(StopException):  # computing, the visitor leaves: the work stops, quietly for Streamlit
        with ui.services.work.heavy_job("attributions") as should_stop:
            assert should_stop()
            raise AttributionStopped()
    _hold_the_slot(ui.services.work.SLOTS)  # and the slot is free again


def test_a_visitor_who_leaves_while_the_page_is_written_gives_the_slot_back(monkeypatch):
    """Once a visitor has left, Streamlit raises StopException from any call that writes to the page. Clearing the
    "waiting" notice is such a call: made before the slot went back, it kept the slot forever, and every later
    attribution on the server waited "number 1 in line" (found by a browser test visiting the page twice)."""
    import types

    from streamlit.runtime.scriptrunner_utils.exceptions import StopException

    import ui.services.work

    class LeftPage:
        """A placeholder on the page of a visitor who has left: writing to it raises, as Streamlit's does."""

        def empty(self, *_):
            raise StopException()

        info = empty

    monkeypatch.setattr(ui.services.work, "SLOTS", ui.services.work.Slots(1))
    monkeypatch.setattr(ui.services.work, "st", types.SimpleNamespace(empty=LeftPage))
    for leaves in ("on taking the slot", "while computing"):
        with pytest.raises(StopException):
            with ui.services.work.heavy_job("attributions"):
                if leaves == "while computing":
                    raise StopException()
        assert ui.services.work.SLOTS.take(ui.services.work.SLOTS.ask(), timeout=1), (
            leaves
        )  # the slot is free for the next visitor
        ui.services.work.SLOTS.release()
    _hold_the_slot(ui.services.work.SLOTS)
    with pytest.raises(StopException):  # in line, the notice of the place in line raises: the line is left
        with ui.services.work.heavy_job("attributions"):
            pytest.fail("ran although its visitor had left")
    assert ui.services.work.SLOTS.waiting() == 0


def test_a_long_job_takes_turns_with_those_who_wait_in_the_order_they_came(monkeypatch):
    """An alignment of hours kept another visitor's attribution waiting throughout: after its turn, a job gives
    the slot to the first in line and goes on when its turn comes again."""
    import threading
    import time

    import ui.services.work

    monkeypatch.setattr(ui.services.work, "SLOTS", ui.services.work.Slots(1))
    monkeypatch.setattr(ui.services.work, "TURN_SECONDS", 0.0)
    order, started = [], threading.Event()

    def long_job():
        with ui.services.work.heavy_job("alignments") as should_stop:
            started.set()
            order.append("long: part 1")
            while ui.services.work.SLOTS.waiting() < 2:  # the others queue meanwhile
                time.sleep(0.01)
            assert not should_stop()  # gives its turn to both, in order, and resumes
            order.append("long: part 2")

    def short_job(name):
        with ui.services.work.heavy_job("attributions"):
            order.append(name)

    threads = [threading.Thread(target=long_job)]
    threads[0].start()
    assert started.wait(5)
    for name in ("first waiting", "second waiting"):
        threads.append(threading.Thread(target=short_job, args=(name,)))
        threads[-1].start()
        deadline = time.monotonic() + 10
        # each in line before the next comes (or already served: the long job may yield before this loop looks,
        # and the line empty out; waiting for a count that never comes again hung the suite)
        while ui.services.work.SLOTS.waiting() < len(threads) - 1 and name not in order and time.monotonic() < deadline:
            time.sleep(0.01)
    for thread in threads:
        thread.join(timeout=10)
    assert order == ["long: part 1", "first waiting", "second waiting", "long: part 2"]


def test_model_calls_on_an_uploaded_model_wait_for_a_heavy_slot_and_shipped_ones_never(checkpoint_path, monkeypatch):
    """An upload is a stranger's model: its decodes take turns with the other heavy work; a shipped model's do not
    wait, and a decode inside an attribution's slot (one thread) takes no second slot."""
    import threading

    import ui.services.models
    import ui.services.work
    from transformer.decoding.strategies import DecodeSettings
    from transformer.io.checkpoint import load_checkpoint
    from ui.server.wiring import wire

    wire()  # as the server does at start: calls on uploads go through the slots
    checkpoint = load_checkpoint(checkpoint_path)
    monkeypatch.setattr(ui.services.work, "SLOTS", ui.services.work.Slots(1))
    _hold_the_slot(ui.services.work.SLOTS)  # another visitor's attribution
    done = []
    upload = threading.Thread(
        target=lambda: done.append(
            ui.services.models.decode_cached(checkpoint, "upload:0123", "the dog runs", DecodeSettings())
        )
    )
    upload.start()
    upload.join(timeout=1.0)
    assert upload.is_alive() and not done  # waits its turn
    shipped = ui.services.models.decode_cached(checkpoint, "tiny.safetensors@1", "the dog runs", DecodeSettings())
    ui.services.work.SLOTS.release()
    upload.join(timeout=30)
    assert done and done[0].tgt_ids == shipped.tgt_ids
    with ui.services.work.heavy_job("attributions"):  # work inside work: no deadlock on the only slot
        ui.services.models.decode_cached(checkpoint, "upload:0123", "a red ball", DecodeSettings())


def test_a_waiting_job_is_told_its_place_in_line():
    import ui.services.work

    slots = ui.services.work.Slots(1)
    _hold_the_slot(slots)
    first, second = slots.ask(), slots.ask()
    assert (slots.position(first), slots.position(second), slots.waiting()) == (1, 2, 2)
    assert not slots.take(second, timeout=0.05)  # a freed slot goes to the first in line only
    slots.release()
    assert not slots.take(second, timeout=0.05) and slots.take(first, timeout=1)
    slots.leave(second)
    assert slots.waiting() == 0


def test_the_page_names_the_cap_when_a_decode_is_too_long_to_attribute(monkeypatch):
    from helpers import start, translate

    import ui.services.work

    monkeypatch.setattr(ui.services.work, "ATTRIBUTION_BUDGET", 500)
    at = translate(start(), "A little girl in a pink dress climbs the stairs.")
    at = at.switch_page("pages/attribution.py").run()
    assert not at.exception
    warning = " ".join(w.value for w in at.warning)
    assert "too long for attribution on this server" in warning and "500 token-steps" in warning


def test_the_contrastive_caption_shows_token_pieces_as_text():
    from helpers import start, translate

    from ui.widgets.text import literal

    at = translate(start(), "Two dogs play.")
    at.session_state["step"] = len(at.session_state["result"].tgt_ids) - 1  # the step that produces </s>
    at = at.switch_page("pages/attribution.py").run()
    assert not at.exception
    caption = next(c.value for c in at.caption if c.value.startswith("Red: a token that favoured"))
    assert f"'{literal('</s>')}'" in caption and "'</s>'" not in caption  # raw, Markdown took it for an HTML tag


def test_long_work_reports_progress_with_the_time_left_weighted_by_cost(shipped, monkeypatch):
    import types

    import ui.services.work
    import ui.widgets.progress

    result = decode_with_chooser(shipped.model, shipped.tokenizer, "A little girl in a pink dress climbs the stairs.")
    import transformer.analysis.attribution.measures as measures

    heard, when_weighted = [], []
    weighted = measures.value_weighted_attention
    monkeypatch.setattr(
        measures, "value_weighted_attention", lambda *args: when_weighted.append(heard[-1]) or weighted(*args)
    )
    attribute(shipped.model, result, n_steps=4, progress=lambda done, total: heard.append((done, total)))
    assert heard[-1] == (result.steps + 1, result.steps + 1) and [d for d, _ in heard] == sorted({d for d, _ in heard})
    # Tried as a new user would: the bar stood full for 7 s while the measures after the integrated gradients ran
    assert when_weighted == [(result.steps, result.steps + 1)]

    shown = []
    monkeypatch.setattr(
        ui.services.work.st,
        "progress",
        lambda value, text: types.SimpleNamespace(
            progress=lambda value, text: shown.append((value, text)), empty=lambda: None
        ),
    )
    clock = iter([100.0, 110.0])  # started at 100 s; 10 s later, one item of three is done
    monkeypatch.setattr(ui.services.work.time, "monotonic", lambda: next(clock))
    ui.widgets.progress.ProgressBar("Translating", 3, "sentences", costs=[1, 1, 2])(1)
    assert shown == [(0.25, "Translating: 1 of 3 sentences · about 30 s left")]  # a quarter of the work in 10 s
    assert ui.widgets.progress.duration(200) == "about 3 min"


def test_the_time_left_counts_computing_not_the_turns_given_to_other_visitors(monkeypatch):
    """Alignment with integrated gradients, tried as a new user would: "about 21 s left", then after another
    visitor's attribution took its turn, "about 2 min": the pace counted the turn as computing time."""
    import threading
    import types

    import ui.services.work
    import ui.widgets.progress

    now = [0.0]
    monkeypatch.setattr(ui.services.work, "time", types.SimpleNamespace(monotonic=lambda: now[0]))
    monkeypatch.setattr(ui.services.work, "SLOTS", ui.services.work.Slots(1))
    monkeypatch.setattr(ui.services.work, "TURN_SECONDS", 0.0)
    shown = []
    monkeypatch.setattr(
        ui.services.work.st,
        "progress",
        lambda value, text: types.SimpleNamespace(progress=lambda value, text: shown.append(text), empty=lambda: None),
    )

    def other_visitors_turn(ticket):
        assert ui.services.work.SLOTS.take(ticket, timeout=10)
        now[0] += 100.0  # their attribution computes for 100 s
        ui.services.work.SLOTS.release()

    progress = ui.widgets.progress.ProgressBar("Aligning", 4, "pairs")
    with ui.services.work.heavy_job("alignments") as should_stop:
        now[0] = 10.0
        progress(1)  # a pair in 10 s: 30 s for the other three
        other = threading.Thread(target=other_visitors_turn, args=(ui.services.work.SLOTS.ask(),))
        other.start()
        assert not should_stop()  # gives the slot to the visitor in line, and waits for it back
        other.join(timeout=10)
        now[0] += 10.0
        progress(2)
    assert shown == ["Aligning: 1 of 4 pairs · about 30 s left", "Aligning: 2 of 4 pairs · about 20 s left"]


def test_attribution_can_be_stopped_and_started_again(monkeypatch):
    from helpers import start, step_action, translate

    import ui.widgets.progress  # each run of the page imports stop_button from it afresh

    at = translate(start(), "Two dogs are playing in the snow.")
    at = step_action(at, name="attention", step=1)
    with monkeypatch.context() as pressed:  # Stop pressed while computing: the rerun finds it pressed
        pressed.setattr(ui.widgets.progress, "stop_button", lambda key, container=None: True)
        at = at.switch_page("pages/attribution.py").run()
    assert not at.exception and any("Attribution stopped" in i.value for i in at.info)
    assert len(at.get("plotly_chart")) == 0
    at.run()
    assert any("Attribution stopped" in i.value for i in at.info)  # stays stopped: the page does not start again
    at.button(key="attribution_resume").click().run()
    assert not at.exception and len(at.get("plotly_chart")) >= 3 and not at.info


def test_the_contrastive_section_runs_under_a_bar_that_says_what_to_expect(monkeypatch):
    """Tried as a new user would: Attribution said "expect about 18 s" and took 51 s, its last 10 s under the
    contrastive section's spinner, which no estimate covered. The section has a bar of its own now, timed like the
    others: from its second run on it says what to expect."""
    from helpers import start, translate

    import ui.widgets.progress
    from ui.services.work import TIMINGS

    bars = []

    class Recorded(ui.widgets.progress.ProgressBar):
        def __init__(self, what, total, unit, **kwargs):
            bars.append((what, kwargs.get("timed")))
            super().__init__(what, total, unit, **kwargs)

    monkeypatch.setattr(ui.widgets.progress, "ProgressBar", Recorded)
    at = translate(start(), "Two dogs play in the snow.")
    at = at.switch_page("pages/attribution.py").run()
    assert not at.exception
    contrastive_bars = [timed for what, timed in bars if what == "Integrated gradients of the difference"]
    assert len(contrastive_bars) == 1 and contrastive_bars[0][0] == "contrastive"
    assert TIMINGS.expected(*contrastive_bars[0]) > 0  # timed: the next one says what to expect


def test_contrastive_attribution_reports_its_backward_passes(model, tokenizer):
    result = decode_with_chooser(model, tokenizer, "the cat sits on the mat")
    heard = []
    contrastive(
        model, result, 2, int(result.topk_ids[2, 1]), 8, progress=lambda done, total: heard.append((done, total))
    )
    assert heard and heard[-1][0] == heard[-1][1] and [done for done, _ in heard] == list(range(1, len(heard) + 1))
