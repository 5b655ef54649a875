import numpy as np
import pytest
import torch

from transformer.analysis.rollout import rollout
from transformer.analysis.views import attention_view
from transformer.analysis.words import merge_words, over_words, punctuation_cores, word_labels, word_spans
from transformer.decoding.greedy import decode_with_chooser
from transformer.model.kinds import AttentionKind
from transformer.text.pieces import readable


def test_rollout_of_identity_attention_is_identity():
    maps = np.tile(np.eye(4, dtype=np.float32), (3, 2, 1, 1))
    assert np.allclose(rollout(maps), np.eye(4))


def test_rollout_rows_sum_to_one_and_mix_layers():
    rng = np.random.default_rng(0)
    maps = rng.random((3, 2, 5, 5)).astype(np.float32)
    maps /= maps.sum(-1, keepdims=True)
    flow = rollout(maps)
    assert np.allclose(flow.sum(-1), 1, atol=1e-5)
    one_layer = 0.5 * maps[0].mean(0) + 0.5 * np.eye(5)
    assert np.allclose(rollout(maps[:1]), one_layer / one_layer.sum(-1, keepdims=True), atol=1e-6)


def test_a_words_core_leaves_out_the_punctuation_at_its_ends_and_only_there():
    pieces = ["▁The", "▁animal", "▁didn", "'", "t", "▁tired", ".", "▁(", "word", ")", "▁...", "▁«", "»", "</s>"]
    cores = punctuation_cores(pieces, word_spans(pieces))
    assert [(word, "".join(pieces[slice(*span)])) for word, span in cores] == [(3, "▁tired"), (4, "word")]


def test_word_spans_follow_the_word_start_marker_and_special_tokens():
    pieces = ["<s>", "▁Un", "e", "▁chat", "▁noir", "s", "</s>"]
    spans = word_spans(pieces)
    assert spans == [(0, 1), (1, 3), (3, 4), (4, 6), (6, 7)]
    assert [readable(word) for word in word_labels(pieces, spans)] == ["<s>", "Une", "chat", "noirs", "</s>"]


def test_merge_words_sums_keys_and_averages_queries():
    weights = np.array([[0.5, 0.25, 0.25], [0.0, 1.0, 0.0], [0.2, 0.2, 0.6]], dtype=np.float32)
    merged = merge_words(weights, [(0, 2), (2, 3)], [(0, 1), (1, 3)])
    assert np.allclose(merged, [[0.25, 0.75], [0.2, 0.8]])
    assert np.allclose(merged.sum(-1), 1)


def test_attention_view_cuts_decoder_rows_at_the_step(model, tokenizer):
    result = decode_with_chooser(model, tokenizer, "the dog runs in the park")
    view = attention_view(result, "cross", step=2)
    assert view.maps.shape == (3, 2, 3, len(result.src_pieces))
    # each row labelled by its input and the token it produces
    assert view.query_pieces == [f"{i} → {o}" for i, o in zip(result.decoder_input_pieces[:3], result.tgt_pieces[:3])]
    assert attention_view(result, "encoder").query_pieces == result.src_pieces
    decoder = attention_view(result, "decoder", step=2)
    assert decoder.mask.tolist() == [[False, True, True], [False, False, True], [False, False, False]]
    assert np.array_equal(decoder.maps, result.decoder_self[:, :, :3, :3].numpy())


def test_word_view_keeps_rows_summing_to_one(model, tokenizer):
    result = decode_with_chooser(model, tokenizer, "the children jumps in the water")
    view = attention_view(result, "encoder", words=True)
    assert view.key_pieces[-1] == "</s>" and len(view.key_pieces) == len(word_spans(result.src_pieces))
    assert np.allclose(view.maps.sum(-1), 1, atol=1e-5)
    decoder = attention_view(result, "decoder", words=True)
    assert decoder.mask is not None and decoder.mask.shape == decoder.maps.shape[-2:]


def test_unknown_kind_is_refused(model, tokenizer):
    with pytest.raises(ValueError, match="unknown attention kind"):
        attention_view(decode_with_chooser(model, tokenizer, "a dog"), "sideways")


def test_views_read_the_result_without_changing_it(model, tokenizer):
    result = decode_with_chooser(model, tokenizer, "a red ball")
    before = result.cross.clone()
    attention_view(result, "cross", words=True).maps[...] = 7
    with pytest.raises(ValueError, match="read-only"):
        attention_view(result, "cross").maps[...] = 7
    assert torch.equal(result.cross, before)


def test_each_attention_kind_names_its_maps_pieces_and_module(model, tokenizer):
    result = decode_with_chooser(model, tokenizer, "a big dog runs in the park")
    S, T = len(result.src_ids), result.steps
    expected = {
        AttentionKind.ENCODER: (result.encoder_self, (S, S), model.encoder_layers[1].self_attn),
        AttentionKind.DECODER: (result.decoder_self, (T, T), model.decoder_layers[1].self_attn),
        AttentionKind.CROSS: (result.cross, (T, S), model.decoder_layers[1].cross_attn),
    }
    for kind, (maps, shape, module) in expected.items():
        assert result.maps(kind) is maps and result.maps(kind.value) is maps
        assert (len(result.query_pieces(kind)), len(result.key_pieces(kind))) == shape == maps.shape[-2:]
        assert kind.module(model, 1) is module
        assert AttentionKind(kind.value) is kind and kind.title.endswith("attention")
        view = attention_view(result, kind.value, step=1)
        assert view.kind is kind and (view.mask is not None) == kind.masked
        assert view.maps.shape[-2] == (S if kind.queries_from_source else 2)  # decoder rows up to step 2


def test_over_words_sums_a_words_pieces_and_leaves_pieces_alone_when_not_asked():
    pieces = ["▁Sun", "bath", "ers", "▁relax", "."]
    values = np.array([[0.1, 0.2, 0.3, 0.25, 0.15]])
    merged, labels = over_words(values, pieces, words=True)
    assert labels == ["▁Sunbathers", "▁relax."] and np.allclose(merged, [[0.6, 0.4]])
    same, names = over_words(values, pieces, words=False)
    assert same is values and names == pieces


def test_the_unsure_notes_calibration_counts_poor_and_good_outputs_noted():
    from transformer.decoding.degenerate import calibrated, noted

    rows = np.array([[10, -2.0], [15, -0.6], [18, -0.2], [70, -0.1], [80, -0.3], [90, -0.05], [65, -0.9]])
    assert noted(rows, -0.5) == (2 / 3, 1 / 4)  # two of three poor outputs noted, one of four good ones
    assert calibrated(rows) == -0.9  # four good outputs: none may be noted
    good = np.array([[70, -0.1 * i] for i in range(1, 21)])
    assert calibrated(good) == pytest.approx(-1.8) and noted(good, calibrated(good))[1] == 0.10  # 2 of 20 noted


def test_merged_decoder_rows_are_the_words_produced_each_read_from_its_first_input():
    from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint
    from transformer.text.pieces import readable_label

    shipped = load_checkpoint(DEFAULT_CHECKPOINT)
    result = decode_with_chooser(shipped.model, shipped.tokenizer, "A man in a red T-shirt is walking down the street.")
    for kind in ("cross", "decoder"):
        view = attention_view(result, kind, words=True)
        labels = [readable_label(label) for label in view.query_pieces]
        assert "en → T-shirt" in labels and "la → rue." in labels and "rue. → </s>" in labels, labels
        produced = "".join(label.split(" → ")[1] for label in view.query_pieces)
        assert produced == "".join(result.tgt_pieces)  # every output piece in exactly one row, in order
        assert np.allclose(view.maps.sum(-1), 1, atol=1e-5)


def test_a_merged_row_is_labelled_by_the_whole_words_it_reads_and_writes():
    """With words merged, a row read "·t → 1992." and "·Europe → est": the last piece of the word before it."""
    from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint
    from transformer.text.pieces import readable_label

    shipped = load_checkpoint(DEFAULT_CHECKPOINT)
    sentence = "The agreement on the European Economic Area was signed in August 1992."
    result = decode_with_chooser(shipped.model, shipped.tokenizer, sentence)
    labels = [readable_label(label) for label in attention_view(result, "cross", words=True).query_pieces]
    assert "août → 1992." in labels and "l'Europe → est" in labels, labels
    assert not [label for label in labels if label.startswith("·")], labels  # no row named by a piece


def test_content_only_drops_the_sink_keys_and_renormalises_each_row():
    from transformer.analysis.views import AttentionView, content_only

    keys = ["\u2581Le", "\u2581chat", "\u2581.", "</s>"]
    maps = np.array([[[[0.1, 0.1, 0.2, 0.6], [0.0, 0.0, 0.5, 0.5], [0.3, 0.1, 0.0, 0.6]]]], dtype=np.float32)
    mask = np.array([[False, False, False, False], [False, False, False, False], [False, True, False, False]])
    found = content_only(AttentionView(AttentionKind.DECODER, maps, ["a", "b", "c"], keys, mask))
    assert found.key_pieces == ["\u2581Le", "\u2581chat"] and found.mask.shape == (3, 2)
    np.testing.assert_allclose(found.maps[0, 0, 0], [0.5, 0.5])  # the content's shares, renormalised
    assert np.isnan(found.maps[0, 0, 1]).all()  # a row that looked only at sinks has nothing left to show
    np.testing.assert_allclose(found.maps[0, 0, 2], [1.0, 0.0])  # a masked key stays at 0
    plain = AttentionView(AttentionKind.ENCODER, maps[..., :2], ["a", "b", "c"], keys[:2], None)
    assert content_only(plain) is plain  # nothing to drop


def test_matching_rows_pairs_the_rows_that_read_the_same_word_over_the_same_keys():
    from transformer.analysis.views import AttentionView, matching_rows

    maps = np.full((1, 1, 3, 2), 0.5, dtype=np.float32)

    def view(queries, keys):
        return AttentionView(AttentionKind.CROSS, maps, queries, keys, None)

    first = view(["<s>→▁Le", "▁Le→▁chat", "▁chat→</s>"], ["▁The", "▁cat"])
    assert matching_rows(first, view(["<s>→▁Le", "▁Le→▁chien", "▁chien→</s>"], ["▁The", "▁cat"])) == [0]
    assert matching_rows(first, first) == [0, 1, 2]
    assert matching_rows(first, view(first.query_pieces, ["▁The", "▁dog"])) is None  # other keys: no row compares
    assert matching_rows(first, view(first.query_pieces[:2], first.key_pieces)) is None
