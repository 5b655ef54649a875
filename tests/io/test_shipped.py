"""The shipped checkpoints: the general default translates everyday sentences and news better than the caption
model, which keeps its captions; the synthetic model shows its predictable attention."""

import gzip
from pathlib import Path

import numpy as np
import pytest
import sacrebleu
from helpers import REPO

from transformer.decoding.forcing import teacher_force
from transformer.decoding.greedy import decode_with_chooser
from transformer.decoding.translate import translate_texts
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint
from transformer.io.timeline_file import load_timeline, timeline_path
from transformer.model.kinds import AttentionKind

DATA = REPO.parent / "shared" / "data"
VALIDATION = DATA / "multi30k"
# What newcomers and teachers type first, and what the default writes for it (checked by hand: right).
EVERYDAY = {
    "I love you.": "Je t'aime.",
    "Where is the train station?": "Où se trouve la gare ?",
    "I am a student.": "Je suis étudiant.",
}
CAPTIONS = DEFAULT_CHECKPOINT.with_name("en-fr-captions.safetensors")


@pytest.fixture(scope="module")
def default():
    return load_checkpoint(DEFAULT_CHECKPOINT)


@pytest.fixture(scope="module")
def captions():
    return load_checkpoint(CAPTIONS)


def _first_lines(stem: Path, count: int) -> tuple[list[str], list[str]]:
    if not stem.with_name(stem.name + ".en.gz").exists():
        pytest.fail(f"validation data missing at {stem}.en.gz")
    return tuple(
        gzip.open(stem.with_name(f"{stem.name}.{side}.gz"), "rt").read().splitlines()[:count] for side in ("en", "fr")
    )


def test_default_is_english_to_french_with_enough_layers_and_heads(default):
    assert default.metadata["languages"] == {"src": "en", "tgt": "fr"}
    assert default.config.n_encoder_layers >= 3 and default.config.n_decoder_layers >= 3 and default.config.n_heads == 8


def test_default_translates_everyday_sentences(default):
    out = translate_texts(default.model, default.tokenizer, list(EVERYDAY))
    assert out == list(EVERYDAY.values())


@pytest.mark.parametrize("stem", ["flores.dev", "newstest2013"])
def test_default_translates_general_text_better_than_the_caption_model(default, captions, stem):
    src, ref = _first_lines(DATA / "en-fr" / stem, 100)
    bleu = {
        name: sacrebleu.corpus_bleu(translate_texts(c.model, c.tokenizer, src), [ref]).score
        for name, c in (("default", default), ("captions", captions))
    }
    assert bleu["default"] > 2 * bleu["captions"] + 2, bleu


def test_caption_model_translates_captions(captions):
    out = translate_texts(
        captions.model, captions.tokenizer, ["A dog is running in the grass.", "Two men are playing soccer."]
    )
    assert "chien" in out[0] and "herbe" in out[0]
    assert "hommes" in out[1] and "football" in out[1]


def test_caption_model_bleu_floor_on_a_validation_sample(captions):
    src, ref = _first_lines(VALIDATION / "val", 150)
    hypotheses = translate_texts(captions.model, captions.tokenizer, src)
    assert sacrebleu.corpus_bleu(hypotheses, [ref]).score > 45


def test_reversal_model_cross_attention_is_anti_diagonal():
    checkpoint = load_checkpoint(DEFAULT_CHECKPOINT.with_name("reverse.safetensors"))
    result = decode_with_chooser(checkpoint.model, checkpoint.tokenizer, "one two three four five six seven")
    assert result.text == "seven six five four three two one"
    steps, src_len = result.cross.shape[2:]
    assert steps == src_len  # seven words and eos, in and out
    anti_diagonal = [src_len - 1 - t for t in range(steps)]
    heads = result.cross.argmax(dim=-1).flatten(0, 1).tolist()  # (L * H, T): where each row looks most
    assert anti_diagonal in heads


def test_the_defaults_timeline_ends_with_the_defaults_own_maps(default):
    """The shipped timeline's last epoch is the shipped model: its maps, probabilities and lens ranks on every probe
    (float16 in the file, as the checkpoint's weights), and its own translation of each probe."""
    timeline = load_timeline(timeline_path(DEFAULT_CHECKPOINT))
    assert timeline.snapshots[0].label == "before training" and len(timeline.snapshots) >= 3
    assert timeline_path(DEFAULT_CHECKPOINT).stat().st_size < 2_000_000
    for probe in timeline.probes:
        forced = teacher_force(default.model, default.tokenizer, probe.source, probe.reference)
        for kind in AttentionKind:
            np.testing.assert_allclose(probe.maps[kind][-1], forced.maps(kind).numpy(), atol=2e-3)
        np.testing.assert_allclose(probe.token_probs[-1], forced.token_probs.numpy(), atol=1e-4)
        assert probe.outputs[-1] == decode_with_chooser(default.model, default.tokenizer, probe.source).text
