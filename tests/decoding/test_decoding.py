import json
import threading

import pytest
import torch
from fixtures.baselines import recompute_greedy
from helpers import make_sentences

from transformer.decoding.beam import beam_search, beam_search_batch, beam_search_ids
from transformer.decoding.forcing import branch, teacher_force_ids
from transformer.decoding.greedy import decode_ids, decode_with_chooser, sampling_chooser
from transformer.decoding.result import DecodeInputError, source_ids, truncation_note
from transformer.decoding.strategies import DecodeSettings, decode_text
from transformer.decoding.translate import translate_texts
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint

SENTENCE = "the big dog runs in the park"


def test_cached_decode_equals_full_recompute(model, tokenizer):
    result = decode_with_chooser(model, tokenizer, SENTENCE, max_new_tokens=12)
    tokens, maps = recompute_greedy(model, result.src_ids, 12)
    assert result.tgt_ids == tokens
    for t, step_maps in enumerate(maps):  # the row the full pass computes for its last position
        for layer in range(model.config.n_decoder_layers):
            torch.testing.assert_close(
                result.cross[layer, :, t], step_maps.cross[layer][0, :, -1], atol=1e-5, rtol=1e-4
            )
            torch.testing.assert_close(
                result.decoder_self[layer, :, t, : t + 1], step_maps.decoder_self[layer][0, :, -1], atol=1e-5, rtol=1e-4
            )


def test_recorded_step_equals_teacher_forced_row(model, tokenizer):
    result = decode_with_chooser(model, tokenizer, SENTENCE, max_new_tokens=12)
    forced = teacher_force_ids(model, tokenizer, result.src_ids, result.tgt_ids)
    torch.testing.assert_close(result.cross, forced.cross, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(result.decoder_self, forced.decoder_self, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(result.encoder_self, forced.encoder_self, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(result.token_probs, forced.token_probs, atol=1e-5, rtol=1e-4)


def test_result_shapes_and_candidates(model, tokenizer, config):
    result = decode_with_chooser(model, tokenizer, SENTENCE, max_new_tokens=8)
    steps, src_len = result.steps, len(result.src_ids)
    assert result.src_ids[-1] == config.eos_id
    assert result.encoder_self.shape == (config.n_encoder_layers, config.n_heads, src_len, src_len)
    assert result.decoder_self.shape == (config.n_decoder_layers, config.n_heads, steps, steps)
    assert result.cross.shape == (config.n_decoder_layers, config.n_heads, steps, src_len)
    assert result.topk_probs.shape == result.topk_ids.shape == (steps, 10)
    assert (result.topk_probs[:, :-1] >= result.topk_probs[:, 1:]).all()  # best first
    assert result.topk_ids[:, 0].tolist() == result.tgt_ids  # greedy takes the top candidate
    assert len(result.decoder_input_pieces) == steps and result.decoder_input_pieces[0] == "<s>"


def test_beam_width_one_is_greedy_and_its_record_matches_a_forward_pass(model, tokenizer):
    greedy = decode_with_chooser(model, tokenizer, SENTENCE)
    assert beam_search(model, tokenizer, SENTENCE, width=1).tgt_ids == greedy.tgt_ids
    beam = beam_search(model, tokenizer, SENTENCE, width=4)
    forced = teacher_force_ids(model, tokenizer, beam.src_ids, beam.tgt_ids)
    torch.testing.assert_close(beam.cross, forced.cross, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(beam.decoder_self, forced.decoder_self, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(beam.token_probs, forced.token_probs, atol=1e-5, rtol=1e-4)


def test_beam_finds_a_sequence_at_least_as_probable_as_greedy(model, tokenizer):
    greedy = decode_with_chooser(model, tokenizer, SENTENCE)
    beam = beam_search(model, tokenizer, SENTENCE, width=5, alpha=0.0)
    if beam.tgt_ids[-1] == greedy.tgt_ids[-1] == model.config.eos_id:
        assert beam.token_probs.log().sum() >= greedy.token_probs.log().sum() - 1e-4


def test_sampling_is_reproducible_and_respects_top_k(model, tokenizer):
    first = decode_with_chooser(model, tokenizer, SENTENCE, sampling_chooser(1.0, 3, seed=7), "sample")
    again = decode_with_chooser(model, tokenizer, SENTENCE, sampling_chooser(1.0, 3, seed=7), "sample")
    assert first.tgt_ids == again.tgt_ids
    for t, token in enumerate(first.tgt_ids):
        assert token in first.topk_ids[t, :3].tolist()
    with pytest.raises(ValueError):
        sampling_chooser(0.0)


def test_branch_forces_the_chosen_token_and_keeps_the_prefix(model, tokenizer):
    result = decode_with_chooser(model, tokenizer, SENTENCE)
    alternative = result.topk_ids[1, 1].item()
    branched = branch(model, tokenizer, result, 1, alternative)
    assert branched.tgt_ids[:2] == [result.tgt_ids[0], alternative]
    assert result.tgt_ids[1] != alternative  # the original result is untouched
    torch.testing.assert_close(branched.cross[:, :, :2], result.cross[:, :, :2])


@pytest.mark.parametrize("text", ["", "   \n\t"])
def test_empty_sentences_are_refused(tokenizer, text):
    with pytest.raises(DecodeInputError, match="empty"):
        source_ids(tokenizer, text, 64)


def test_long_sentences_are_cut_to_max_len_and_say_so(model, tokenizer, config):
    ids, truncated = source_ids(tokenizer, " ".join(["dog"] * 500), config.max_len)
    assert truncated and len(ids) == config.max_len and ids[-1] == config.eos_id
    result = decode_ids(model, tokenizer, ids, truncated=truncated, max_new_tokens=3)
    assert result.truncated and result.steps <= 3


def test_a_source_without_its_end_token_is_cut_to_its_first_max_len_pieces_and_the_note_says_so(tokenizer):
    """A model trained on sources without </s> (eole's) reads none: nothing is appended, and a long source keeps its
    first pieces only (before, the cut kept its last id in place of the end it does not have)."""
    text = " ".join(f"dog{i} cat" for i in range(200))
    pieces = tokenizer.encode(text)
    ids, truncated = source_ids(tokenizer.without_source_eos(), text, 32)
    assert truncated and ids == pieces[:32]
    assert source_ids(tokenizer.without_source_eos(), "the dog", 32)[0] == tokenizer.encode("the dog")
    assert source_ids(tokenizer, text, 32)[0] == [*pieces[:31], tokenizer.eos_id]
    assert "32 tokens);" in truncation_note(tokenizer.without_source_eos(), 32)
    assert "with the end token" in truncation_note(tokenizer, 32)
    assert not tokenizer.same_as(tokenizer.without_source_eos())


def test_batched_translation_equals_one_at_a_time(model, tokenizer):
    texts = ["the dog", "", "a small cat sits on the red ball in the water", "man"]
    batched = translate_texts(model, tokenizer, texts, batch_size=3)
    single = [decode_with_chooser(model, tokenizer, t).text if t else "" for t in texts]
    assert batched == single


@pytest.fixture(scope="module")
def shipped():
    return load_checkpoint(DEFAULT_CHECKPOINT)


@pytest.mark.parametrize("width", [1, 3, 5])
def test_batched_beam_finds_what_one_sentence_at_a_time_finds(model, tokenizer, width):
    # The random tiny model rarely ends a sentence: limits, hypotheses alive at the limit and early ends all occur.
    sources = [source_ids(tokenizer, text, model.config.max_len)[0] for text in make_sentences(24, seed=3)]
    limits = [3 + i % 11 for i in range(len(sources))]
    batched = beam_search_batch(model, sources, width, 0.6, limits)
    alone = [beam_search_ids(model, ids, width, 0.6, limit).tokens for ids, limit in zip(sources, limits)]
    assert batched == alone


def test_batched_beam_on_the_shipped_model_matches_and_translate_uses_it(shipped):
    texts = [
        "Two dogs are playing in the snow.",
        "",
        "A man in a red shirt is riding a bicycle down the street.",
        "A little girl climbs the stairs.",
        "Three people sit on a bench near the water while a dog sleeps.",
    ]
    settings = DecodeSettings(strategy="beam", beam_width=5)
    batched = translate_texts(shipped.model, shipped.tokenizer, texts, settings, batch_size=2)
    alone = [beam_search(shipped.model, shipped.tokenizer, t, width=5).text if t else "" for t in texts]
    assert batched == alone


def test_threads_sharing_one_model_get_their_sequential_results(model, tokenizer):
    sentences = [" ".join(["the", "dog", "cat", "red", "park"][i % 5 :] + ["ball"] * (i % 4)) for i in range(32)]
    expected = [decode_with_chooser(model, tokenizer, s, max_new_tokens=6) for s in sentences]
    results: dict[int, object] = {}
    barrier = threading.Barrier(32)

    def work(i: int) -> None:
        barrier.wait()
        results[i] = decode_with_chooser(model, tokenizer, sentences[i], max_new_tokens=6)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(32)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i, want in enumerate(expected):
        assert results[i].tgt_ids == want.tgt_ids
        torch.testing.assert_close(results[i].cross, want.cross)
        torch.testing.assert_close(results[i].encoder_self, want.encoder_self)


def test_one_decode_entry_applies_each_strategy(model, tokenizer):
    greedy = decode_text(model, tokenizer, SENTENCE)
    assert greedy.tgt_ids == decode_with_chooser(model, tokenizer, SENTENCE).tgt_ids and greedy.strategy == "greedy"
    beam = decode_text(model, tokenizer, SENTENCE, DecodeSettings(strategy="beam", beam_width=3, length_penalty=0.0))
    assert beam.tgt_ids == beam_search(model, tokenizer, SENTENCE, width=3, alpha=0.0).tgt_ids
    assert beam.strategy == "beam 3"
    sampled = DecodeSettings(strategy="sampling", temperature=1.5, top_k=5, seed=11)
    first, again = decode_text(model, tokenizer, SENTENCE, sampled), decode_text(model, tokenizer, SENTENCE, sampled)
    assert first.tgt_ids == again.tgt_ids
    assert first.tgt_ids == decode_with_chooser(model, tokenizer, SENTENCE, sampling_chooser(1.5, 5, seed=11)).tgt_ids
    assert first.strategy == "sampling (temperature 1.5, top-k 5, seed 11)"
    short = decode_text(model, tokenizer, SENTENCE, DecodeSettings(strategy="beam", max_new_tokens=2))
    assert short.steps <= 2


@pytest.mark.parametrize(
    ("bad", "message"),
    [
        (dict(strategy="nucleus"), "unknown strategy"),
        (dict(beam_width=0), "beam width"),
        (dict(temperature=0.0), "temperature"),
        (dict(top_k=-1), "negative"),
    ],
)
def test_decode_settings_refuse_what_cannot_decode(bad, message):
    with pytest.raises(ValueError, match=message):
        DecodeSettings(**bad)


def test_the_command_line_samples_and_batched_translation_follows_the_settings(checkpoint_path, tmp_path, capsys):
    from transformer.cli import main

    out = tmp_path / "maps.json"
    args = ["inspect", "--checkpoint", str(checkpoint_path), "--text", SENTENCE, "--format", "json", "--out", str(out)]
    assert main([*args, "--strategy", "sampling", "--seed", "5", "--top-k", "4"]) == 0
    written = json.loads(out.read_text())
    assert written["strategy"] == "sampling (temperature 1, top-k 4, seed 5)"
    assert main([*args, "--beam", "3"]) == 0 and json.loads(out.read_text())["strategy"] == "beam 3"
    assert main([*args, "--temperature", "0"]) == 2 and "temperature must be positive" in capsys.readouterr().err
    loaded = load_checkpoint(checkpoint_path)
    sampled = DecodeSettings(strategy="sampling", seed=3)
    texts = ["a dog runs", "the red ball", ""]
    batch = translate_texts(loaded.model, loaded.tokenizer, texts, sampled)
    assert batch == translate_texts(loaded.model, loaded.tokenizer, texts, sampled) and batch[2] == ""
    one_token = DecodeSettings(max_new_tokens=1)
    alone = [decode_text(loaded.model, loaded.tokenizer, text, one_token) for text in texts[:2]]
    assert all(result.steps == 1 for result in alone)
    assert translate_texts(loaded.model, loaded.tokenizer, texts[:2], one_token) == [r.text for r in alone]


def test_a_model_that_emits_padding_attends_alike_step_by_step_and_in_one_pass(model, tokenizer):
    import copy

    padding = copy.deepcopy(model)
    with torch.no_grad():
        padding.generator.bias[padding.config.pad_id] += 30.0  # the pad token wins every step
    for result in (
        decode_with_chooser(padding, tokenizer, SENTENCE, max_new_tokens=6),
        beam_search(padding, tokenizer, SENTENCE, width=3),
    ):
        assert padding.config.pad_id in result.tgt_ids[:-1]  # pad mid-output, fed back as decoder input
        forced = teacher_force_ids(padding, tokenizer, result.src_ids, result.tgt_ids)  # FORMAT.md 5.3's mask
        torch.testing.assert_close(result.decoder_self, forced.decoder_self, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(result.token_probs, forced.token_probs, atol=1e-5, rtol=1e-4)
        pad_keys = torch.tensor(result.tgt_ids[:-1]) == padding.config.pad_id  # decoder input positions 1 on
        assert torch.all(result.decoder_self[..., 1:][..., pad_keys] == 0)  # a pad key gets exactly 0


def test_a_deep_model_translates_in_batches_its_decoding_state_allows(tokenizer, monkeypatch):
    """A 128+128-layer model translated 64 sentences a batch whatever its keys and values took: a batch is now as
    many sentences as BATCH_STATE_BYTES holds, with the same translations."""
    from helpers import tiny_config

    import transformer.decoding.translate as translate
    from transformer.model.encoder_decoder import Transformer

    torch.manual_seed(0)
    model = Transformer(tiny_config(tokenizer, n_encoder_layers=8, n_decoder_layers=8, max_len=32)).eval()
    per_sentence = 8 * 4 * 32 * model.config.d_model * 4
    texts = make_sentences(5)
    whole = translate_texts(model, tokenizer, texts)
    monkeypatch.setattr(translate, "BATCH_STATE_BYTES", 2 * per_sentence)
    sizes = []
    generate = translate.generate
    monkeypatch.setattr(
        translate, "generate", lambda m, src, *a, **k: sizes.append(len(src)) or generate(m, src, *a, **k)
    )
    assert translate_texts(model, tokenizer, texts) == whole and sizes == [2, 2, 1]
    assert translate.batch_rows(model, DecodeSettings(strategy="beam", beam_width=4), 64) == 1  # each beam counts


def test_a_batch_decodes_its_long_rows_alone_once_a_quarter_have_ended_and_gives_the_same_tokens():
    """One row that never ends kept a whole batch of 256 decoding to the length limit; now the rows still going are
    decoded alone once a quarter have ended, with the tokens they had."""
    from unittest import mock

    from transformer.decoding.greedy import generate
    from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint

    checkpoint = load_checkpoint(DEFAULT_CHECKPOINT)
    model, pad = checkpoint.model, checkpoint.config.pad_id
    texts = ["Hi.", "I love you.", "Where is the train station?", "The black cat is sleeping on the red chair.",
             "Two dogs play in the snow.", "A man in a blue shirt is riding a bicycle down the street."]  # fmt: skip
    rows = [checkpoint.tokenizer.encode(text) + [checkpoint.config.eos_id] for text in texts]
    src = torch.full((len(rows), max(map(len, rows))), pad)
    for row, ids in enumerate(rows):
        src[row, : len(ids)] = torch.tensor(ids)
    whole = generate(model, src, 40).tokens
    with mock.patch.object(model, "decode", wraps=model.decode) as decode_calls:
        compacted = generate(model, src, 40, tokens_only=True).tokens
    assert torch.equal(compacted, whole)
    sizes = [call.args[0].size(0) for call in decode_calls.call_args_list]
    assert sizes[0] == len(texts) and sizes[-1] < len(texts), sizes  # the last steps ran on the long rows alone
