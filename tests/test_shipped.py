"""The shipped checkpoints: the default translates, the synthetic model shows its predictable attention."""

import gzip

import pytest
import sacrebleu
from helpers import REPO

from transformer.decoding.greedy import decode
from transformer.decoding.translate import translate_texts
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint

VALIDATION = REPO.parent / "shared" / "data" / "multi30k"


@pytest.fixture(scope="module")
def default():
    return load_checkpoint(DEFAULT_CHECKPOINT)


def test_default_is_english_to_french_with_enough_layers_and_heads(default):
    assert default.metadata["languages"] == {"src": "en", "tgt": "fr"}
    assert default.config.n_encoder_layers >= 3 and default.config.n_decoder_layers >= 3 and default.config.n_heads == 8


def test_default_translates_simple_sentences(default):
    out = translate_texts(
        default.model, default.tokenizer, ["A dog is running in the grass.", "Two men are playing soccer."]
    )
    assert "chien" in out[0] and "herbe" in out[0]
    assert "hommes" in out[1] and "football" in out[1]


def test_default_bleu_floor_on_a_validation_sample(default):
    path_en, path_fr = VALIDATION / "val.en.gz", VALIDATION / "val.fr.gz"
    if not path_en.exists():
        pytest.fail(f"validation data missing at {path_en}")
    src = gzip.open(path_en, "rt").read().splitlines()[:150]
    ref = gzip.open(path_fr, "rt").read().splitlines()[:150]
    hypotheses = translate_texts(default.model, default.tokenizer, src)
    assert sacrebleu.corpus_bleu(hypotheses, [ref]).score > 45


def test_reversal_model_cross_attention_is_anti_diagonal():
    checkpoint = load_checkpoint(DEFAULT_CHECKPOINT.with_name("reverse.safetensors"))
    result = decode(checkpoint.model, checkpoint.tokenizer, "one two three four five six seven")
    assert result.text == "seven six five four three two one"
    steps, src_len = result.cross.shape[2:]
    assert steps == src_len  # seven words and eos, in and out
    anti_diagonal = [src_len - 1 - t for t in range(steps)]
    heads = result.cross.argmax(dim=-1).flatten(0, 1).tolist()  # (L * H, T): where each row looks most
    assert anti_diagonal in heads
