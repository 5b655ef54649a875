"""On a GPU the package gives what it gives on the CPU: the same tokens, the same maps, contributions, gradients
and imported models (float32 on both; the kernels differ, so equal to a tolerance). The app and the command line
take the GPU whenever there is one, so each path the app uses is run on both here.

These run where a GPU is (a researcher's machine, or the lent one: docs/development.md says how); on a machine with
none they are skipped, for want of the hardware, not of an install step.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import torch

from transformer.analysis.attribution.measures import attribute
from transformer.analysis.contributions import contributions
from transformer.decoding.forcing import teacher_force
from transformer.decoding.strategies import DecodeSettings, decode_text
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint
from transformer.model.heads import Head
from transformer.model.kinds import AttentionKind
from transformer.model.probes import Probe
from transformer.toolkits.opening import load_any_checkpoint

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="no GPU on this machine")

SENTENCES = ["The black cat is sleeping on the red chair near the window.", "I love you."]
MAPS = ("encoder_self", "decoder_self", "cross")


@pytest.fixture(scope="module")
def both():
    """The shipped default on the CPU and on the GPU."""
    return load_checkpoint(DEFAULT_CHECKPOINT), load_checkpoint(DEFAULT_CHECKPOINT, "cuda")


def assert_same_result(on_cpu, on_gpu) -> None:
    assert on_gpu.tgt_ids == on_cpu.tgt_ids and on_gpu.text == on_cpu.text
    for name in MAPS:
        found, expected = getattr(on_gpu, name), getattr(on_cpu, name)
        assert found.device.type == "cpu", f"{name} came back on {found.device}: the views read it with NumPy"
        torch.testing.assert_close(found, expected, atol=2e-4, rtol=1e-3)
    torch.testing.assert_close(on_gpu.token_probs.cpu(), on_cpu.token_probs.cpu(), atol=2e-4, rtol=1e-3)


@pytest.mark.parametrize("strategy", ["greedy", "beam"])
def test_a_decode_on_the_gpu_gives_the_cpus_tokens_and_maps(both, strategy):
    (cpu, gpu), settings = both, DecodeSettings(strategy=strategy, beam_width=4)
    assert next(gpu.model.parameters()).device.type == "cuda"
    for sentence in SENTENCES:
        assert_same_result(
            decode_text(cpu.model, cpu.tokenizer, sentence, settings),
            decode_text(gpu.model, gpu.tokenizer, sentence, settings),
        )


def test_teacher_forcing_and_a_switched_off_head_on_the_gpu(both):
    cpu, gpu = both
    forced = "L'accord sur l'Espace économique européen a été signé en août 1992."
    source = "The agreement on the European Economic Area was signed in August 1992."
    assert_same_result(
        teacher_force(cpu.model, cpu.tokenizer, source, forced), teacher_force(gpu.model, gpu.tokenizer, source, forced)
    )
    ids = torch.tensor([[5, 9, 14, 22, 7, 3]])
    outputs = []
    for checkpoint in (cpu, gpu):
        probe = Probe.ablating([Head(AttentionKind.CROSS, 0, 1), Head(AttentionKind.ENCODER, 1, 2)])
        device = next(checkpoint.model.parameters()).device
        with torch.no_grad():
            outputs.append(checkpoint.model(ids.to(device), ids[:, :4].to(device), probe=probe).log_probs.cpu())
    torch.testing.assert_close(outputs[1], outputs[0], atol=2e-4, rtol=1e-3)


def test_contributions_and_attribution_on_the_gpu(both):
    cpu, gpu = both
    result = decode_text(cpu.model, cpu.tokenizer, SENTENCES[0])
    on_cpu = contributions(cpu.model, result.src_ids, result.tgt_ids)
    on_gpu = contributions(gpu.model, result.src_ids, result.tgt_ids)
    np.testing.assert_allclose(on_gpu.alti_plus, on_cpu.alti_plus, atol=1e-4)
    np.testing.assert_allclose(on_gpu.encoder, on_cpu.encoder, atol=1e-4)
    short = decode_text(cpu.model, cpu.tokenizer, SENTENCES[1])
    found, expected = attribute(gpu.model, short, n_steps=8), attribute(cpu.model, short, n_steps=8)
    for name, values in expected.arrays().items():
        if values.dtype.kind == "U":  # the pieces
            assert (found.arrays()[name] == values).all()
            continue
        np.testing.assert_allclose(found.arrays()[name], values, atol=1e-3, rtol=1e-2, err_msg=name)


@pytest.mark.parametrize("family", ["marian", "t5"])
def test_an_imported_hugging_face_model_on_the_gpu(tmp_path: Path, family):
    from fixtures.hf_models import save_marian, save_t5

    sentences = [f"the dog {w} runs in the park" for w in ("red", "blue", "small", "big")] * 10
    if family == "marian":
        directory = save_marian(tmp_path, sentences, sentences)
    else:
        directory = save_t5(tmp_path, sentences)
    cpu, gpu = load_any_checkpoint(directory), load_any_checkpoint(directory, "cuda")
    assert next(gpu.model.parameters()).device.type == "cuda"
    assert_same_result(
        decode_text(cpu.model, cpu.tokenizer, sentences[0], DecodeSettings(max_new_tokens=12)),
        decode_text(gpu.model, gpu.tokenizer, sentences[0], DecodeSettings(max_new_tokens=12)),
    )


def test_a_batch_translation_and_head_importance_on_the_gpu(both):
    """translate_texts' batches (rows still going decoded alone once a quarter have ended) and the gates of head
    importance move with the batch on the GPU as on the CPU."""
    from transformer.analysis.heads.importance import corpus_of, gradient_importance
    from transformer.decoding.translate import translate_texts

    cpu, gpu = both
    texts = [*SENTENCES, "Where is the train station?", "Two dogs play in the snow.", "Hi."]
    assert translate_texts(gpu.model, gpu.tokenizer, texts) == translate_texts(cpu.model, cpu.tokenizer, texts)
    references = translate_texts(cpu.model, cpu.tokenizer, texts)
    found = gradient_importance(gpu.model, corpus_of(gpu.model, gpu.tokenizer, texts, references))
    expected = gradient_importance(cpu.model, corpus_of(cpu.model, cpu.tokenizer, texts, references))
    for kind, values in expected.items():
        np.testing.assert_allclose(found[kind], values, atol=1e-3, rtol=1e-2, err_msg=kind.value)
