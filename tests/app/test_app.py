"""The app's pages through Streamlit's AppTest, on the shipped checkpoints: what is shown follows what is done."""

from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import REPO, array, figure, markdown, start, step_action, step_view, translate
from streamlit.testing.v1 import AppTest

from transformer.analysis.contributions import contributions
from transformer.analysis.rollout import attention_flow
from transformer.analysis.views import attention_view, content_only
from transformer.analysis.walkthrough import attention_stages, sublayer_inputs
from transformer.decoding.candidate_words import candidate_words
from transformer.decoding.greedy import decode_with_chooser
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint
from transformer.model.kinds import AttentionKind
from transformer.text.pieces import readable_label
from transformer.viz.attention import head_row_labels
from ui.players.packing import unpacked

SENTENCE = "Two dogs are playing in the snow."
CAPTIONS = {"ckpt": "en-fr-captions"}  # the model of image captions, for what it does outside them


@pytest.fixture(scope="module")
def reference():
    checkpoint = load_checkpoint(DEFAULT_CHECKPOINT)
    return decode_with_chooser(checkpoint.model, checkpoint.tokenizer, SENTENCE)


@pytest.fixture
def explorer(reference) -> AppTest:
    at = translate(start(), SENTENCE)
    assert not at.exception
    return at


def test_explorer_sends_every_step_to_the_browser_once(explorer, reference):
    assert reference.text.replace(".", "\\.") in markdown(explorer)
    view = step_view(explorer)
    steps, (layers, heads, sources) = (
        reference.steps,
        (reference.cross.shape[0], reference.cross.shape[1], reference.cross.shape[3]),
    )
    assert (view["step"], view["steps"]) == (0, steps)
    assert view["topk_ids"] == reference.topk_ids.tolist()
    np.testing.assert_allclose(view["topk_probs"], reference.topk_probs.numpy(), atol=1e-4)
    cross = unpacked(view["cross"]).reshape(steps, layers, heads + 1, sources)
    np.testing.assert_allclose(cross[:, :, :heads], reference.cross.numpy().transpose(2, 0, 1, 3), atol=1e-5)
    np.testing.assert_allclose(cross[:, :, heads], reference.cross.numpy().mean(1).transpose(1, 0, 2), atol=1e-5)
    rows, offset = unpacked(view["self"]), 0
    for step in range(steps):  # step t's masked self-attention: every layer and head over t + 1 keys
        size = layers * (heads + 1) * (step + 1)
        block = rows[offset : offset + size].reshape(layers, heads + 1, step + 1)
        np.testing.assert_allclose(block[:, :heads], reference.decoder_self[:, :, step, : step + 1], atol=1e-5)
        offset += size
    assert offset == len(rows) and len(view["self_labels"][1]) == 2
    assert view["so_far"][1] == "Deux" and view["next"][0] == "Deux"  # no word-start marker
    assert len(view["rows"]) == layers * (heads + 1) and view["rows"][heads] == "layer 1 · mean"


def test_the_step_view_carries_each_layers_guesses_and_the_steps_entropy(explorer, reference):
    lens, view = reference.lens, step_view(explorer)["lens"]
    assert view["top_ids"] == lens.top_ids.transpose(0, 1).tolist()  # (steps, layers, 5)
    np.testing.assert_allclose(view["top_probs"], lens.top_probs.transpose(0, 1).numpy(), atol=1e-4)
    assert view["rank"] == lens.chosen_rank.T.tolist()
    np.testing.assert_allclose(view["chosen_prob"], lens.chosen_probs.T.numpy(), atol=1e-4)
    assert [view["labels"][str(row[-1][0])] for row in view["top_ids"]] == step_view(explorer)["next"]  # greedy
    np.testing.assert_allclose(step_view(explorer)["entropy"], reference.entropy_bits.numpy(), atol=1e-4)


def test_the_step_view_carries_the_word_each_candidate_would_make(explorer, reference):
    checkpoint = load_checkpoint(DEFAULT_CHECKPOINT)
    words = step_view(explorer)["topk_words"]
    assert len(words) == reference.steps and any(word for row in words for word in row)
    assert words == candidate_words(checkpoint.model, checkpoint.tokenizer, reference)


def test_the_step_view_carries_each_steps_alti_plus_shares_in_pieces_and_in_words(explorer, reference):
    checkpoint = load_checkpoint(DEFAULT_CHECKPOINT)
    found = contributions(checkpoint.model, reference.src_ids, reference.tgt_ids)
    view, sources = step_view(explorer)["contributions"], len(reference.src_ids)
    np.testing.assert_allclose(view["share"], found.source_share, atol=1e-4)
    source = unpacked(view["source"]).reshape(reference.steps, sources)
    np.testing.assert_allclose(source, found.alti_plus[:, :sources], atol=1e-5)
    prefix = unpacked(view["prefix"])  # step t: its shares of the decoder input up to t
    assert len(prefix) == reference.steps * (reference.steps + 1) // 2
    np.testing.assert_allclose(
        source.sum(1) + [prefix[t * (t + 1) // 2 :][: t + 1].sum() for t in range(len(source))], 1, atol=1e-3
    )
    explorer.toggle(key="widget_words").set_value(True).run()
    merged = step_view(explorer)
    words = unpacked(merged["contributions"]["source"]).reshape(reference.steps, len(merged["cross_labels"]))
    np.testing.assert_allclose(words.sum(1), source.sum(1), atol=1e-3)  # a word's share: its pieces' sum


def test_the_step_view_offers_the_tuned_lens_shipped_beside_the_default(explorer, reference):
    view = step_view(explorer)
    tuned, plain = view["tuned_lens"], view["lens"]
    layers = reference.cross.shape[0]
    assert tuned is not None and [len(kl) for kl in tuned["kl"]] == [layers - 1, layers - 1]
    assert all(after < before for before, after in zip(*tuned["kl"]))  # fitted: closer to the output, held out
    assert [row[-1] for row in tuned["rank"]] == [row[-1] for row in plain["rank"]]  # the last layer: the output
    assert [row[0] for row in tuned["rank"]] != [row[0] for row in plain["rank"]]  # the first: read otherwise
    assert view["lens_choice"] == "logit"
    linked = translate(start({"lens": "tuned"}), SENTENCE)  # a link that names the tuned lens opens with it
    assert step_view(linked)["lens_choice"] == "tuned" and linked.query_params["lens"] == "tuned"


def test_decoderlens_is_asked_for_by_its_switch_drawn_in_the_lens_and_kept_by_the_link(explorer, reference):
    """What each encoder layer already says: every layer's translation (the last the model's own, word for word) and
    each layer's guesses at every step, the lens opening on them; a link keeps the switch."""
    from transformer.analysis.decoder_lens import decoder_lens, encoder_layers_lens

    assert step_view(explorer)["encoder_lens"] is None  # a decode a layer: asked for, never at open
    at = explorer.toggle(key="encoder_lens").set_value(True).run()
    view = step_view(at)
    found, checkpoint = view["encoder_lens"], load_checkpoint(DEFAULT_CHECKPOINT)
    layers = checkpoint.model.config.n_encoder_layers
    translations = decoder_lens(checkpoint.model, checkpoint.tokenizer, list(reference.src_ids))
    assert [row["layer"] for row in found["translations"]] == list(range(1, layers + 1))
    assert [" ".join(row["words"]) for row in found["translations"]] == [t.text for t in translations]
    assert " ".join(found["translations"][-1]["words"]) == reference.text and not any(
        found["translations"][-1]["differs"]
    )
    lens = encoder_layers_lens(checkpoint.model, list(reference.src_ids), list(reference.tgt_ids))
    assert found["top_ids"] == lens.top_ids.transpose(0, 1).tolist() and found["rank"] == lens.chosen_rank.T.tolist()
    assert [row[-1] for row in found["rank"]] == [1] * reference.steps  # the last layer: the greedy output itself
    assert view["lens_choice"] == "encoder" and at.query_params["dlens"] == "1"
    linked = translate(start({"dlens": "1"}), SENTENCE)
    assert step_view(linked)["encoder_lens"] is not None and linked.toggle(key="encoder_lens").value


def test_a_tuned_lens_that_does_not_fit_its_checkpoint_is_said_and_not_used(monkeypatch):
    import ui.services.models
    from transformer.analysis.tuned_lens import TunedLensError

    def refused(name):
        raise TunedLensError("en-fr.safetensors was fitted to another checkpoint (its SHA-256 differs)")

    monkeypatch.setattr(ui.services.checkpoints, "tuned_lens", refused)
    at = translate(start(), SENTENCE)
    assert not at.exception and step_view(at)["tuned_lens"] is None
    assert any("tuned lens beside this checkpoint is not used" in c.value for c in at.caption)


def test_the_words_toggle_merges_the_step_views_keys_and_keeps_the_step(explorer, reference):
    explorer = step_action(explorer, name="nothing", step=3)  # an unknown action is ignored
    assert not explorer.exception and step_view(explorer)["step"] == 0
    explorer.toggle(key="widget_words").set_value(True).run()
    view = step_view(explorer)
    assert "playing" in view["cross_labels"] and len(view["cross_labels"]) < reference.cross.shape[-1]
    layers, heads = reference.cross.shape[:2]
    cross = unpacked(view["cross"]).reshape(reference.steps, layers, heads + 1, -1)
    np.testing.assert_allclose(cross.sum(-1), 1, atol=1e-3)  # a word's weight is the sum over its pieces


def test_what_if_branch_from_the_browsers_step_changes_the_output(explorer, reference):
    runner_up = int(reference.topk_ids[1, 1])
    explorer = step_action(explorer, name="what_if", step=1, token=runner_up)
    assert not explorer.exception
    branch = explorer.session_state["branch"]
    assert branch.tgt_ids[:2] == [reference.tgt_ids[0], runner_up] and branch.text != reference.text
    assert "what\\-if" in markdown(explorer)
    assert step_view(explorer)["step"] == 1 and explorer.query_params["step"] == "2"  # still at the branch's step
    explorer.radio(key="widget_show_branch").set_value(False).run()
    assert reference.text.replace(".", "\\.") in markdown(explorer)
    step_action(explorer, name="what_if", step=1, token=10**6)  # not a candidate of that step: ignored
    assert not explorer.exception and explorer.session_state["branch"] is branch


def test_a_what_if_branchs_link_opens_the_branch_and_its_branches(explorer, reference):
    runner_up = int(reference.topk_ids[1, 1])
    explorer = step_action(explorer, name="what_if", step=1, token=runner_up)
    first = explorer.session_state["branch"]
    assert explorer.query_params["what_if"] == f"2.{runner_up}"
    assert "'▁" not in markdown(explorer)  # the forced token reads as text, not as a raw piece
    later = int(first.topk_ids[3, 1])
    explorer = step_action(explorer, name="what_if", step=3, token=later)  # a branch of the branch
    second = explorer.session_state["branch"]
    assert second.tgt_ids[:4] == [*first.tgt_ids[:3], later] and second.tgt_ids[1] == runner_up
    link = dict(explorer.query_params)
    assert link["what_if"] == f"2.{runner_up},4.{later}"
    opened = start(link)
    assert not opened.exception and opened.session_state["show_branch"]
    assert opened.session_state["branch"].tgt_ids == second.tgt_ids
    assert opened.session_state["step"] == 3 and "what\\-if" in markdown(opened)
    explorer.radio(key="widget_show_branch").set_value(False).run()
    assert "what_if" not in explorer.query_params  # the original on screen: its link opens the original
    for hostile in (f"2.{10**6}", "0.5", "2.x", ",".join(["2.5"] * 21)):  # no candidate, no step, too deep
        opened = start({**link, "what_if": hostile})
        assert not opened.exception and opened.session_state.get("branch") is None, hostile


def test_malformed_step_view_actions_are_ignored(explorer, reference):
    from helpers import step_trigger

    candidate = int(reference.topk_ids[1, 1])
    for action in (
        dict(name="what_if", step=1, token=float(candidate)),  # 5.0 equals 5 but is no token id
        dict(name="what_if", step=True, token=candidate),  # True equals 1 but is no step
        dict(name="attention", step=1.0),
    ):
        explorer = step_action(explorer, **action)
        assert not explorer.exception and explorer.session_state.get("branch") is None, action
    deep = "[" * 200_000 + "]" * 200_000
    for raw in (
        f'[{{"event": "action", "value": {deep}}}]',
        f'[{{"event": "action", "value": {{"name": "attention", "step": {"9" * 5000}}}}}]',
        "[" * 200_000,
    ):
        explorer = step_trigger(explorer, raw)
        assert not explorer.exception and step_view(explorer)["step"] == 0


def test_attention_maps_open_at_the_browsers_step(explorer, reference, monkeypatch):
    import transformer.decoding.greedy

    def no_model(*args, **kwargs):
        raise AssertionError("opening a step must not run the model")

    monkeypatch.setattr(transformer.decoding.greedy, "generate", no_model)
    at = step_action(explorer, name="attention", step=2)
    assert not at.exception and at.session_state["step"] == 2
    at.radio(key="widget_kind").set_value("decoder").run()
    assert array(figure(at, 0)["data"][0]["z"]).shape == (3, 3) and at.query_params["step"] == "3"


def test_leaving_by_a_link_takes_the_browsers_step_to_the_linked_page(explorer):
    at = step_action(explorer, name="leave", step=3, page="/attribution")
    assert not at.exception and at.session_state["step"] == 3 and at.session_state["stepped"]
    assert at.title[0].value == "Attribution"  # the page the link named, opened by the server
    for page in ("/../../etc/passwd", "/nowhere", "/attribution\x00", ["/attribution"], "/" + "a" * 5000):
        at = step_action(at.switch_page("pages/explorer.py").run(), name="leave", step=2, page=page)
        assert not at.exception and at.session_state["step"] == 3 and at.title[0].value == "Decode explorer", page


def test_teacher_forcing_scores_the_given_target(explorer):
    explorer.text_input(key="target").input("Deux chats dorment sur le canapé.")
    explorer.button(key="FormSubmitter:teacher_forcing-Run on this target").click().run()
    assert not explorer.exception
    forced = figure(explorer, 2)  # after the free decoding's two figures
    assert "teacher forcing" in forced["layout"]["title"]["text"]
    assert " ".join(forced["data"][0]["x"]).replace(" ·", "") == "Deux chats dorment sur le canapé . &lt;/s&gt;"


def test_bad_sentences_get_a_message_never_a_traceback(explorer):
    translate(explorer, "   ")
    assert not explorer.exception and "empty" in explorer.warning[0].value
    translate(explorer, "<script>alert('x')</script> 世界")
    assert not explorer.exception
    assert "<script>" not in markdown(explorer) and "\\<script\\>" in markdown(explorer)
    assert any("unknown token" in w.value and "世" in w.value for w in explorer.warning)
    translate(explorer, "dog " * 400)
    assert not explorer.exception
    assert any("128 tokens" in w.value and "cut" in w.value for w in explorer.warning)


def test_another_checkpoint_gives_another_model(explorer):
    explorer.selectbox(key="widget_checkpoint").set_value("reverse").run()
    translate(explorer, "one two three")
    assert not explorer.exception
    assert "three two one" in markdown(explorer)


def test_attention_page_views(explorer, reference):
    at = explorer.switch_page("pages/attention.py").run()
    assert not at.exception
    heads = reference.cross.shape[1]
    layers = reference.cross.shape[0]
    z = array(figure(at, 0)["data"][0]["z"])
    assert np.allclose(z, reference.cross[0, 0].numpy(), atol=1e-6)  # nobody stepped yet: the whole decode
    expected_traces = {"head": 1, "layer": heads, "model": layers * heads, "mean": layers}
    for view, traces in expected_traces.items():
        at.radio(key="widget_view").set_value(view).run()
        assert not at.exception and len(figure(at, 0)["data"]) == traces, view
    at.radio(key="widget_kind").set_value("encoder").run()
    at.radio(key="widget_view").set_value("rollout").run()
    assert not at.exception
    rollout = array(figure(at, 0)["data"][0]["z"])
    assert np.allclose(rollout.sum(-1), 1, atol=1e-4)
    at.radio(key="widget_view").set_value("flow").run()
    assert not at.exception and "attention flow" in figure(at, 0)["layout"]["title"]["text"]
    flow = array(figure(at, 0)["data"][0]["z"])
    expected = attention_flow(reference.encoder_self.numpy())
    assert np.allclose(flow, expected, atol=1e-6) and not np.allclose(flow, rollout, atol=1e-3)


def test_attention_maps_content_only_drops_the_sinks_and_the_link_keeps_it(explorer):
    at = explorer.switch_page("pages/attention.py").run()
    full = figure(at, 0)
    at.toggle(key="widget_attention_content").set_value(True).run()
    assert not at.exception
    content = figure(at, 0)
    assert "content only" in content["layout"]["title"]["text"]
    assert "&lt;/s&gt;" in full["data"][0]["x"] and "&lt;/s&gt;" not in content["data"][0]["x"]
    assert len(content["data"][0]["x"]) < len(full["data"][0]["x"])
    weights = array(content["data"][0]["z"])
    rows = ~np.isnan(weights).all(axis=-1)
    np.testing.assert_allclose(np.nansum(weights[rows], axis=-1), 1, atol=1e-4)
    assert at.query_params.get("content") in ("1", ["1"])


def test_attention_page_follows_the_step_and_merges_words(explorer, reference):
    at = step_action(explorer, name="attention", step=2)
    at.radio(key="widget_kind").set_value("decoder").run()
    z = array(figure(at, 0)["data"][0]["z"])
    assert z.shape == (3, 3) and np.isnan(z[0, 1]) and not np.isnan(z[2, 2])  # masked cells are NaN (grey)
    at.radio(key="widget_kind").set_value("encoder").run()
    pieces = len(figure(at, 0)["data"][0]["x"])
    at.toggle(key="widget_words").set_value(True).run()
    words = figure(at, 0)["data"][0]["x"]
    assert len(words) < pieces and "playing" in words


def test_long_input_draws_a_cheaper_model_view_and_says_so(explorer):
    translate(explorer, " ".join(["the big dog and the small cat"] * 25))
    at = explorer.switch_page("pages/attention.py").run()
    at.radio(key="widget_kind").set_value("encoder").run()
    at.radio(key="widget_view").set_value("model").run()
    assert not at.exception
    assert any("too many" in info.value for info in at.info)
    layers = load_checkpoint(DEFAULT_CHECKPOINT).config.n_encoder_layers
    assert len(figure(at, 0)["data"]) == layers  # one mean map per layer, not a map per head


def test_the_url_holds_the_view_and_opens_it(reference):
    at = start({"text": SENTENCE, "step": "3", "kind": "cross", "layer": "2", "head": "4"})
    assert not at.exception
    assert step_view(at)["step"] == 2
    assert at.query_params["step"] == "3" and at.query_params["text"] == SENTENCE
    at = at.switch_page("pages/attention.py").run()
    assert at.selectbox(key="widget_layer").value == 1 and at.selectbox(key="widget_head").value == 3
    start({"step": "999", "ckpt": "no-such-file", "layer": "x"})  # out of range or malformed: ignored, no error


def test_a_link_naming_the_former_default_opens_it_under_its_new_name():
    at = start({"ckpt": "en-fr", "text": "A dog runs."})
    assert not at.exception and at.session_state["checkpoint"] == "en-fr-captions"
    assert at.query_params["ckpt"] == "en-fr-captions"  # the link rewritten: it names the file that is there


def test_report_and_exports_are_offered(explorer):
    at = explorer.switch_page("pages/attention.py").run()
    labels = [button.proto.label for button in at.get("download_button")]
    assert labels == ["This map as CSV", "Every map as .npz"]  # the report is built first, with its progress
    at.button(key="report_build").click().run()
    labels = [button.proto.label for button in at.get("download_button")]
    assert not at.exception and labels == ["This map as CSV", "Every map as .npz", "HTML report (offline)"]
    at = translate(at.switch_page("pages/explorer.py").run(), "A dog runs.").switch_page("pages/attention.py").run()
    assert len(at.get("download_button")) == 2  # another sentence: its own report to build


def test_positional_page_draws_the_models_own_encoding(explorer):
    from transformer.model.embeddings import sinusoidal_table

    at = explorer.switch_page("pages/positional.py").run()
    assert not at.exception
    matrix = next(
        f
        for f in map(lambda i: figure(at, i), range(len(at.get("plotly_chart"))))
        if f["layout"]["title"]["text"].startswith("the positional encoding matrix")
    )
    assert np.allclose(array(matrix["data"][0]["z"]), sinusoidal_table(128, 256).numpy(), atol=1e-6)
    at.multiselect(key="pe_dims").set_value([2, 3]).run()
    assert [trace["name"] for trace in figure(at, 0)["data"]] == ["dimension 2", "dimension 3"]


def test_masks_page_shows_padding_in_a_batch_and_zero_weight_where_masked(explorer):
    at = explorer.switch_page("pages/masks.py").run()
    assert not at.exception
    padding = array(figure(at, 0)["data"][0]["z"])  # your sentence's source padding row: nothing padded
    assert padding.min() == 1
    second_padding = array(figure(at, 5)["data"][0]["z"])  # "A dog runs." is shorter: padded
    assert second_padding.min() == 0 and second_padding.max() == 1
    # the per-head demo opens on the decoder's masked self-attention, the kind whose mask a single sentence shows
    assert at.radio(key="widget_kind").value == "decoder"
    assert "largest weight any of them got after the softmax: 0.0" in at.success[0].value
    elsewhere = at.switch_page("pages/attention.py").run()  # a visit to Masks chose nothing for the other pages
    assert elsewhere.radio(key="widget_kind").value == "cross"
    at = elsewhere.switch_page("pages/masks.py").run()
    assert at.radio(key="widget_kind").value == "decoder"
    at.radio(key="widget_kind").set_value("cross").run()  # a kind the visitor chose is kept, here and elsewhere
    assert "Nothing is masked here" in at.info[0].value
    at = at.switch_page("pages/masks.py").run()
    assert at.radio(key="widget_kind").value == "cross"


def test_computation_page_matches_the_model_for_every_layer_and_head(explorer):
    """The page's arithmetic (attention_stages on the sublayer's inputs) equals the model's sublayer output and the
    maps the other pages show, on every kind, layer and head of the shipped model; the page itself, driven through
    each kind's first and last layer and head, says so."""
    model, result = load_checkpoint(DEFAULT_CHECKPOINT).model, explorer.session_state["result"]
    corners = {}
    for kind in AttentionKind:
        maps = attention_view(result, kind).maps
        corners[kind] = [(0, 0), (maps.shape[0] - 1, maps.shape[1] - 1)]
        for layer in range(maps.shape[0]):
            inputs = sublayer_inputs(model, result.src_ids, result.tgt_ids, kind, layer)
            for head in range(maps.shape[1]):
                stages = attention_stages(inputs, head)
                assert float((stages.output - inputs.output).abs().max()) < 1e-4, (kind, layer, head)
                assert np.abs(stages.p_attn.numpy() - maps[layer, head]).max() < 1e-4, (kind, layer, head)
    at = explorer.switch_page("pages/computation.py").run()
    for kind, layers_and_heads in corners.items():
        at.radio(key="widget_kind").set_value(kind.value).run()
        for layer, head in layers_and_heads:
            at.selectbox(key="widget_layer").set_value(layer).run()
            at.selectbox(key="widget_head").set_value(head).run()
            assert not at.exception
            assert at.success and at.success[0].value.startswith("The numbers match"), (kind, layer, head)


def test_the_weight_matrices_show_a_readable_slice_and_the_whole_on_demand(explorer):
    """Each d_model × d_k weight was drawn whole (256 rows, 900 px, several projector screens): a slice of 32 rows
    by default, every row with the toggle, which the link carries."""
    at = explorer.switch_page("pages/computation.py").run()
    titles = {index: figure(at, index)["layout"]["title"]["text"] for index in range(len(at.get("plotly_chart")))}
    weights = [index for index, title in titles.items() if title.startswith("W_")]
    assert len(weights) == 3
    for index in weights:
        assert figure(at, index)["data"][0]["z"]["shape"] == "32, 32" and "rows 0–31" in titles[index]
    at.toggle(key="walk_whole_weights").set_value(True).run()
    for index in weights:
        assert figure(at, index)["data"][0]["z"]["shape"] == "256, 32", titles[index]
    assert at.query_params["weights"] == "whole"


def test_presentation_mode_enlarges_figures(explorer):
    explorer.toggle(key="widget_presentation").set_value(True).run()
    assert step_view(explorer)["presentation"]
    at = explorer.switch_page("pages/attention.py").run()
    assert figure(at, 0)["layout"]["font"]["size"] == 18  # kept across pages


def test_quotes_in_a_sentence_show_as_quotes_in_every_figure():
    at = translate(start(), 'An old man says "hello" to the dog\'s owner.')
    labels = []
    for index in range(len(at.get("plotly_chart"))):
        for trace in figure(at, index)["data"]:
            for axis in ("x", "y"):
                values = trace.get(axis)
                labels += [str(v) for v in values] if isinstance(values, list) else []
    view = step_view(at)  # the step view, drawn as text in the browser, has no HTML to decode either
    labels += view["cross_labels"] + [label for labels in view["topk_labels"] for label in labels]
    assert any('"' in label for label in labels)  # the quote piece is there, as a quote
    assert not any("&quot;" in label or "&#x27;" in label for label in labels)


def test_attention_maps_open_on_the_whole_decode_until_the_visitor_steps():
    at = start({"text": "Two dogs are playing in the snow."})
    steps = at.session_state["result"].steps
    at = at.switch_page("pages/attention.py").run()  # opened directly, nobody stepped yet
    at.radio(key="widget_kind").set_value("decoder").run()
    assert array(figure(at, 0)["data"][0]["z"]).shape == (steps, steps)  # every row, not the first step's one
    assert at.select_slider(key="widget_step").value == steps - 1  # and the slider says so: rows up to the last
    assert "step" not in at.query_params  # a link made now opens on the whole decode too
    at.select_slider(key="widget_step").set_value(2).run()
    assert array(figure(at, 0)["data"][0]["z"]).shape == (3, 3) and at.query_params["step"] == "3"
    at = step_action(at.switch_page("pages/explorer.py").run(), name="attention", step=1)
    assert array(figure(at, 0)["data"][0]["z"]).shape == (2, 2)  # rows up to the step taken
    assert at.query_params["step"] == "2"


def test_a_link_holds_the_decoding_settings_view_and_modes():
    link = {
        "text": "Two dogs are playing in the snow.",
        "strategy": "beam",
        "beam_width": "3",
        "length_penalty": "0.3",
        "view": "model",
        "words": "1",
        "presentation": "1",
        "kind": "decoder",
    }
    at = start(link)
    assert not at.exception
    settings = at.session_state["applied_settings"]
    assert (settings.strategy, settings.beam_width, settings.length_penalty) == ("beam", 3, 0.3)
    assert at.session_state["result"].strategy.startswith("beam")
    assert step_view(at)["presentation"]
    at = at.switch_page("pages/attention.py").run()
    assert at.radio(key="widget_view").value == "model" and at.toggle(key="widget_words").value
    assert {name: at.query_params[name] for name in link if name != "text"} == {
        k: v for k, v in link.items() if k != "text"
    }
    odd = start(
        {
            "text": "A dog.",
            "beam_width": "999",
            "temperature": "nan",
            "strategy": "magic",
            "view": "x",
            "words": "yes",
            "seed": "-1",
            "top_k": "1e3",
        }
    )
    assert not odd.exception and odd.session_state["applied_settings"] == type(settings)()  # all ignored


def test_a_sentence_outside_what_the_model_knows_gets_notes_not_a_refusal():
    at = translate(start(CAPTIONS), "Zwei junge Männer spielen Fußball im Park, während ihre Freunde zuschauen.")
    assert not at.exception and step_view(at)["step"] == 0
    notes = " ".join(element.value for element in [*at.warning, *at.info]).replace("\\", "")
    assert "This does not read like English: its words fall into" in notes  # where "falls apart" was
    assert "repeats itself" in notes and "length limit" in notes
    assert "Trained to translate en→fr, 29,000 sentence pairs (train.en.gz)." in " ".join(
        c.value for c in at.sidebar.caption
    ).replace("\\", "")
    at = translate(at, "Two dogs are playing in the snow.")
    notes = " ".join(element.value for element in [*at.warning, *at.info])
    assert "falls apart" not in notes and "repeats" not in notes and "length limit" not in notes
    assert "unsure" not in notes and "does not read like" not in notes


def test_nonsense_from_an_everyday_sentence_is_noted_and_english_is_not_called_foreign():
    at = translate(start(CAPTIONS), "I love you.")  # "Je vous vous Je." from a model of image captions
    notes = " ".join(element.value for element in at.warning).replace("\\", "")
    assert "The model is unsure of this output" in notes
    at = translate(at, "The agreement on the European Economic Area was signed in August 1992.")
    notes = " ".join(element.value for element in at.warning).replace("\\", "")
    assert "unsure" in notes and "language" not in notes  # the pieces show a vocabulary, not a language
    assert "this model's own were not measured" not in notes  # the threshold was measured on this very model


def test_the_unsure_note_says_when_its_threshold_was_not_measured_on_the_model_in_use():
    """The note cited the default's dev-set calibration for every model, imported ones too."""
    at = start()
    at.selectbox(key="widget_checkpoint").set_value("en-fr-general-epoch1").run()
    at = translate(at, "The agreement on the European Economic Area was signed in August 1992.")
    notes = " ".join(element.value for element in at.warning).replace("\\", "")
    assert "The model is unsure of this output" in notes and "this model's own were not measured" in notes


def test_the_positional_page_says_what_its_own_norms_show(explorer):
    at = explorer.switch_page("pages/positional.py").run()
    text = markdown(at)
    assert "dominates the sum" not in text
    norms = next(
        f
        for f in map(lambda i: figure(at, i), range(len(at.get("plotly_chart"))))
        if f["layout"]["title"]["text"].startswith("vector norms")
    )
    word, place = (float(np.median(array(trace["y"]))) for trace in norms["data"][:2])
    assert f"median norm is {word:.1f} against {place:.1f}" in text
    expected = "word and position weigh about the same" if 1 / 1.5 <= word / place <= 1.5 else "outweighs"
    assert expected in text


def test_the_step_by_step_page_follows_and_sets_the_shared_step():
    at = translate(start(), "Two dogs are playing in the snow.")
    at = step_action(at, name="attention", step=1).switch_page("pages/computation.py").run()
    at.radio(key="widget_kind").set_value("cross").run()
    assert at.selectbox(key="widget_step").value == 1  # the explorer's step 2
    at.selectbox(key="widget_step").set_value(3).run()
    assert not at.exception and at.query_params["step"] == "4"  # the link names the row followed
    at = at.switch_page("pages/explorer.py").run()
    assert step_view(at)["step"] == 3


@pytest.mark.parametrize(
    "page",
    ["explorer", "attention", "attribution", "positional", "masks", "computation", "learned", "compare", "heads"],
)
def test_no_page_shows_the_word_start_marker(page):
    at = start({"text": 'Two dogs play in the "snow".'})
    at.switch_page(f"pages/{page}.py").run()
    assert not at.exception
    drawn = [json.dumps(json.loads(element.proto.spec), ensure_ascii=False) for element in at.get("plotly_chart")]
    drawn += [json.dumps(json.loads(element.proto.json), ensure_ascii=False) for element in at.get("bidi_component")]
    assert drawn, "the page drew no figure"
    shown = [*drawn, markdown(at), *(header.value for header in at.subheader)]
    assert not [text for text in shown if "\u2581" in text]  # SentencePiece's ▁, shown as the reader reads it


def _titled(at: AppTest, words: str) -> dict:
    drawn = [json.loads(element.proto.spec) for element in at.get("plotly_chart")]
    return next(spec for spec in drawn if words in spec["layout"]["title"]["text"])


@pytest.mark.parametrize("page", ["compare", "attribution"])  # the explorer's step view: its own test
def test_the_words_toggle_merges_pieces_on_every_page_with_maps(page):
    at = start({"text": "Sunbathers relax on the beach."})
    at.switch_page(f"pages/{page}.py").run()
    title = {"compare": f"{DEFAULT_CHECKPOINT.stem}: layer", "attribution": "five measures"}[page]
    pieces = _titled(at, title)["data"][0]["x"]
    at.toggle(key="widget_words").set_value(True).run()
    assert not at.exception
    words = _titled(at, title)["data"][0]["x"]
    assert len(words) < len(pieces) and "Sunbathers" in words  # "▁Sun" "bath" "ers" read as one word
    assert at.session_state["words"]


def test_each_page_is_headed_with_its_name_in_the_sidebar():
    import ast

    from helpers import REPO

    def calls(path, name):
        tree = ast.parse((REPO / path).read_text())
        return [node for node in ast.walk(tree) if isinstance(node, ast.Call) and ast.unparse(node.func) == name]

    from ui.widgets.frame import PAGES

    pages = {script: title for section in PAGES.values() for script, title in section}
    assert set(pages) == {str(path.relative_to(REPO)) for path in (REPO / "pages").glob("*.py")}  # each in the menu
    for path in pages:  # the frame heads each page with its title in the menu: no page heads itself
        assert [ast.unparse(call.args[0]) for call in calls(path, "frame.draw")] == ["__file__"], path
        assert not calls(path, "st.title") and not calls(path, "st.set_page_config"), path
    for path in ("pages/masks.py", "pages/corpus.py"):
        at = start().switch_page(path).run()
        assert [title.value for title in at.title] == [pages[path]], path


def test_a_lone_word_start_is_explained_where_it_shows():
    tokenizer = load_checkpoint(DEFAULT_CHECKPOINT).tokenizer
    seen = []
    for text in ("Xylophone zebra.", "Two dogs play."):  # no piece starts a word with "X" in this vocabulary
        at = start({"text": text})
        result = at.session_state["result"]
        candidates = [tokenizer.id_to_piece(i) for i in result.topk_ids.flatten().tolist()]
        shown = "▁" in [*result.src_pieces, *result.tgt_pieces, *candidates]
        explained = any(c.value.startswith("␣: the start of a word alone") for c in at.caption)
        assert explained == shown, text
        seen.append(shown)
    assert seen[0]


def test_the_csv_button_of_a_view_of_many_maps_names_the_map_it_exports():
    at = start({"text": "Two dogs play.", "view": "model", "layer": "2", "head": "3"})
    at = at.switch_page("pages/attention.py").run()
    button = next(b for b in at.get("download_button") if "CSV" in b.proto.label)
    assert button.proto.label == "CSV of layer 2, head 3"
    at.radio(key="widget_view").set_value("head").run()
    assert any(b.proto.label == "This map as CSV" for b in at.get("download_button"))  # one map drawn: that one


def test_a_newcomer_is_told_what_to_do_can_try_an_example_and_learns_what_the_model_knows():
    """The landing page said nothing about what to do, offered nothing to click, and the model's domain showed only
    as a file name at the bottom of the sidebar."""
    from ui.widgets.welcome import EXAMPLES

    at = start()
    guide = at.expander[0]
    assert guide.label == "How to use this page" and guide.proto.expanded
    text = " ".join(m.value for m in at.markdown).replace("\\", "")  # the page escapes markdown
    assert "press **Translate**" in text and "What en-fr-general knows.** Knows everyday English best" in text
    at.button(key="example_0").click().run()
    assert not at.exception and at.session_state["applied_text"] == EXAMPLES[0]
    assert f"**Source** · {EXAMPLES[0]}" in markdown(at).replace("\\", "")
    assert not at.expander[0].proto.expanded  # a sentence of their own now: the guide folds
    assert not start({"presentation": "1"}).expander[0].proto.expanded  # a class sees the step view first


def test_the_textbook_sentences_lead_to_what_this_model_shows_of_them():
    """Bahdanau's sentence lost "Economic Area" with no word of where its crossing shows, and the tired animal's
    famous encoder figure is not in this model (tried as a new user would): the landing page says what this model
    shows of each, and one click teacher-forces the reference at the head that shows the crossing."""
    at = start()
    guides = " ".join(c.value for c in at.caption)
    assert "it drops Economic Area" in guides and "not in this model" in guides
    at.button(key="textbook_0").click().run()
    assert not at.exception and at.session_state["target"].startswith("L'accord sur la zone économique européenne")
    forced = next(
        f
        for f in (figure(at, i) for i in range(len(at.get("plotly_chart"))))
        if f["layout"]["title"]["text"].startswith("teacher forcing: cross-attention")
    )
    assert "layer 3, mean over heads" in forced["layout"]["title"]["text"]
    rows, columns, weights = forced["data"][0]["y"], forced["data"][0]["x"], array(forced["data"][0]["z"])
    # Read by the word each row writes, as Bahdanau's figure and a teacher read it (tried as a new user would: the
    # example's head showed the crossing by the word each row was fed, the other way round to a teacher)
    looked_at = {
        row.split(" → ")[-1].strip("·▁ "): columns[int(np.argmax(w))].strip("·▁ ") for row, w in zip(rows, weights)
    }
    assert looked_at["économique"] == "Economic" and looked_at["européenne"] == "European"  # the crossing
    assert forced["layout"]["yaxis"]["title"]["text"] == "query: token fed → token written"
    captions = start().selectbox(key="widget_checkpoint").set_value("en-fr-captions").run()
    assert "it drops Economic Area" not in " ".join(c.value for c in captions.caption)  # measured on the default


def test_a_lens_left_unread_at_decode_is_read_when_the_visitor_asks(monkeypatch):
    """A large vocabulary's lens waits to be asked for (decoding.lens.read_at_decode): the step view says where to
    ask, and the switch reads every layer's guesses, as an eager decode would have."""
    import transformer.decoding.lens as lens_module

    sentence = "A lens of its own is asked for by the visitor."  # decoded by no other test: the results are shared
    monkeypatch.setattr(lens_module, "EAGER_LENS_PRODUCTS", 0)
    at = translate(start(), sentence)
    assert not at.exception
    assert step_view(at)["lens"] is None and step_view(at)["tuned_lens"] is not None  # the tuned lens still reads
    at.toggle(key="read_lens").set_value(True).run()
    assert not at.exception
    monkeypatch.undo()
    checkpoint = load_checkpoint(DEFAULT_CHECKPOINT)
    eager = decode_with_chooser(checkpoint.model, checkpoint.tokenizer, sentence).lens
    view = step_view(at)["lens"]
    assert view["top_ids"] == eager.top_ids.transpose(0, 1).tolist() and view["rank"] == eager.chosen_rank.T.tolist()
    np.testing.assert_allclose(view["chosen_prob"], eager.chosen_probs.T.numpy(), atol=1e-4)


def test_a_large_vocabularys_candidate_words_are_worked_out_when_the_visitor_asks(monkeypatch):
    """At a large vocabulary continuing every candidate costs more than the decode (decoding.candidate_words
    .worked_out_at_open): the step view shows the pieces alone until the switch asks for the words."""
    import transformer.decoding.candidate_words as words_module

    sentence = "The candidates wait for the visitor to ask."  # decoded by no other test: the results are shared
    monkeypatch.setattr(words_module, "EAGER_WORD_PRODUCTS", 0)
    at = translate(start(), sentence)
    assert not at.exception and step_view(at)["topk_words"] is None
    at.toggle(key="candidate_words").set_value(True).run()
    assert not at.exception
    checkpoint = load_checkpoint(DEFAULT_CHECKPOINT)
    result = decode_with_chooser(checkpoint.model, checkpoint.tokenizer, sentence)
    assert step_view(at)["topk_words"] == candidate_words(checkpoint.model, checkpoint.tokenizer, result)
    assert any(word for row in step_view(at)["topk_words"] for word in row)


def test_a_deep_models_step_view_is_sent_a_window_of_layers_and_a_link_keeps_it(monkeypatch, reference):
    """A model with more rows of heads than the step view draws at once (NLLB-600M's 12 layers x 17) is sent one
    window of layers, the output's end first; the visitor's choice sends another, and a link opens on it."""
    import ui.players.step_player as player_module

    monkeypatch.setattr(player_module, "MAX_STEP_ROWS", 9)  # one layer of the default's 8 heads and their mean
    explorer = translate(start(), SENTENCE)
    assert not explorer.exception
    layers, heads = reference.cross.shape[:2]

    def assert_sends(at: AppTest, layer: int) -> None:
        view = step_view(at)
        assert view["rows"] == head_row_labels(1, heads, [f"layer {layer + 1}"])
        cross = unpacked(view["cross"]).reshape(reference.steps, 1, heads + 1, len(reference.src_ids))
        np.testing.assert_allclose(cross[:, 0, :heads].transpose(1, 0, 2), reference.cross[layer].numpy(), atol=1e-4)
        last = reference.steps - 1  # the masked self-attention of the last step reads every key
        rows = unpacked(view["self"])[-(heads + 1) * reference.steps :].reshape(heads + 1, reference.steps)
        np.testing.assert_allclose(rows[:heads], reference.decoder_self[layer, :, last].numpy(), atol=1e-4)

    assert explorer.radio(key="step_layers").value == str(layers) and "layers" not in explorer.query_params
    assert_sends(explorer, layers - 1)
    explorer.radio(key="step_layers").set_value("1").run()
    assert not explorer.exception and explorer.query_params["layers"] == "1"
    assert_sends(explorer, 0)
    linked = start({"text": SENTENCE, "layers": "2"})
    assert not linked.exception and linked.radio(key="step_layers").value == "2"
    assert_sends(linked, 1)


def test_a_long_inputs_step_view_is_sent_windows_of_layers_that_keep_a_click_within_its_cells():
    """A step click redraws every cell of both maps: opus-mt's shape with an input of 85 pieces drew 4,715 cells and
    took 60 ms at p95. A long input is sent windows of layers whose cells at the last step fit MAX_STEP_CELLS;
    a short one, every layer."""
    from ui.players.step_player import MAX_STEP_CELLS, layer_windows

    assert layer_windows(6, 8, 85 + 40) == [range(0, 3), range(3, 6)]  # opus-mt's shape: 27 rows of 125 cells
    assert layer_windows(12, 16, 20 + 40) == [range(0, 4), range(4, 8), range(8, 12)]  # NLLB-600M's: rows bind
    assert layer_windows(3, 8, 1000) == [range(0, 1), range(1, 2), range(2, 3)]  # one layer at least
    long = " ".join([SENTENCE] * 12)
    at = start({"text": long, "max_new_tokens": "60"})
    assert not at.exception
    view = step_view(at)
    cells = len(view["rows"]) * (len(view["cross_labels"]) + view["steps"])
    assert len(at.radio(key="step_layers").options) > 1 and cells <= MAX_STEP_CELLS, cells
    short = translate(at, SENTENCE)
    assert not short.exception and all(radio.key != "step_layers" for radio in short.radio)
    assert len(step_view(short)["rows"]) == 3 * 9  # every layer's 8 heads and their mean


def test_the_step_views_maps_go_content_only_with_the_attention_pages_switch(explorer, reference):
    """Every map view gets content only: the step view's two maps drop </s>, <s> and punctuation as keys and
    renormalise each row, as the Attention maps page does (the switch is the same one, and the link carries it)."""
    explorer.toggle(key="widget_attention_content").set_value(True).run()
    assert not explorer.exception
    view = step_view(explorer)
    assert view["content_only"] and explorer.query_params["content"] == "1"
    expected = content_only(attention_view(reference, "cross"))
    assert view["cross_labels"] == [readable_label(k) for k in expected.key_pieces] and "." not in view["cross_labels"]
    layers, heads = reference.cross.shape[:2]
    cross = unpacked(view["cross"]).reshape(reference.steps, layers, heads + 1, len(expected.key_pieces))
    np.testing.assert_allclose(cross[:, :, :heads].transpose(1, 2, 0, 3), expected.maps, atol=1e-4)
    assert view["self_labels"][0] == [] and "<s>" not in view["self_labels"][3]  # the first step reads only <s>
    at = explorer.switch_page("pages/attention.py").run()
    assert at.toggle(key="widget_attention_content").value  # one choice for every map view


def test_the_work_after_translate_runs_under_a_spinner(monkeypatch):
    """Tried as a new user would: after Translate the spinner ended with the decode, and the old page stood faded for
    up to 12 s while each step's candidates and the contributions were worked out, with nothing saying so."""
    import contextlib

    import streamlit

    import ui.services.models

    spinning, seen = [], {}
    spinner = streamlit.spinner

    @contextlib.contextmanager
    def recorded(*args, **kwargs):
        spinning.append(True)
        try:
            with spinner(*args, **kwargs):
                yield
        finally:
            spinning.pop()

    def watched(name):
        computed = getattr(ui.services.models, name)

        def run(*args, **kwargs):
            seen[name] = bool(spinning)
            return computed(*args, **kwargs)

        return run

    monkeypatch.setattr(streamlit, "spinner", recorded)
    for name in ("contributions_cached", "candidate_words_cached"):
        monkeypatch.setattr(ui.services.models, name, watched(name))
    at = translate(start(), "A spinner stays up until the new page is drawn.")
    assert not at.exception
    assert seen == {"contributions_cached": True, "candidate_words_cached": True}


def test_no_widget_is_given_a_default_beside_a_value_the_session_sets(monkeypatch):
    """Tried as a new user would (issue 83, item 12): the Bahdanau button logged Streamlit's "The widget with key
    "tf_layer" was created with a default value but also had its value set via the Session State API"; the Pair
    sets page's link sets its widgets too."""
    from streamlit.elements.lib import policies

    said: list[str] = []
    monkeypatch.setattr(policies, "_shown_default_value_warning", False)  # Streamlit says it once a process
    monkeypatch.setattr(policies._LOGGER, "warning", lambda message, *args: said.append(message % args))
    at = start()
    at.button(key="textbook_0").click().run()
    assert not at.exception and at.slider(key="tf_layer").value == 3
    linked = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    linked.query_params.update({"set": "noun-gender", "pairs": "4", "method": "both", "ablation": "0"})
    linked = linked.switch_page("pages/sets.py").run()
    assert not linked.exception and linked.number_input(key="sets_pairs").value == 4
    assert not [message for message in said if "created with a default value" in message], said


def test_why_this_token_opens_cause_from_the_step_view_with_the_token_and_its_likeliest_rival():
    """Tried as a new user would (issue 83, item 3): in presentation mode Cause was four clicks away (the sidebar,
    "View 3 more", Cause, the example); the step view asks it in one, at the step it shows."""
    from transformer.analysis.interventions.patching import CLEAN_EXAMPLE
    from transformer.decoding.strategies import decode_text

    shipped = load_checkpoint(DEFAULT_CHECKPOINT)
    decoded = decode_text(shipped.model, shipped.tokenizer, CLEAN_EXAMPLE)
    step = decoded.tgt_pieces.index("il")
    rival = next(int(i) for i in decoded.topk_ids[step] if int(i) != int(decoded.tgt_ids[step]))
    at = translate(start({"presentation": "1"}), CLEAN_EXAMPLE)
    at = step_action(at, name="why", step=step)
    assert not at.exception and at.title[0].value == "Cause" and at.session_state["step"] == step
    assert at.text_input(key="cause_target").value == "il"
    assert at.text_input(key="cause_foil").value == shipped.tokenizer.id_to_piece(rival).removeprefix("▁")
    assert any("Give a corrupted sentence" in info.value for info in at.info)  # the one field left to the visitor
