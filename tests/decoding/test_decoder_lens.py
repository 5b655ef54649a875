"""DecoderLens (issue 85, first step): the decoder writing from each encoder layer's output. At the last layer it is
the model's own translation; at every layer what transformers generates from that layer's output, through the
encoder's final norm (left out, the test fails)."""

from __future__ import annotations

import json

import pytest
import torch
from fixtures.hf_models import save_m2m100
from helpers import make_sentences, run_cli
from transformers import M2M100ForConditionalGeneration, M2M100Tokenizer
from transformers.modeling_outputs import BaseModelOutput

from transformer.analysis.decoder_lens import CANDIDATES, candidates_at_step, decoder_lens
from transformer.analysis.interventions.patching import CLEAN_EXAMPLE
from transformer.decoding.strategies import decode_text
from transformer.hugging_face.m2m100 import import_m2m100
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint


def test_at_the_last_layer_it_is_the_models_own_translation_and_its_candidates():
    shipped = load_checkpoint(DEFAULT_CHECKPOINT)
    own = decode_text(shipped.model, shipped.tokenizer, CLEAN_EXAMPLE)
    layers = decoder_lens(shipped.model, shipped.tokenizer, own.src_ids)
    assert [layer.layer for layer in layers] == [1, 2, 3, 4]
    assert layers[-1].ids == own.tgt_ids and layers[-1].text == own.text
    assert layers[-1].probabilities == pytest.approx(own.token_probs.tolist(), abs=1e-5)
    assert layers[0].text != own.text  # the first layer's memory says something else: the lens shows a difference
    step = own.tgt_pieces.index("il")
    candidates = candidates_at_step(shipped.model, own.src_ids, own.tgt_ids, step)
    assert candidates.ids[-1] == own.topk_ids[step][:CANDIDATES].tolist()
    assert candidates.probabilities[-1] == pytest.approx(own.topk_probs[step][:CANDIDATES].tolist(), abs=1e-5)
    with pytest.raises(ValueError, match="past the output"):
        candidates_at_step(shipped.model, own.src_ids, own.tgt_ids, len(own.tgt_ids))


def test_each_layer_writes_what_transformers_generates_from_that_layers_normed_output(tmp_path):
    directory = save_m2m100(tmp_path, [" ".join(s.split()) for s in make_sentences(300, seed=1)])
    hf_model = M2M100ForConditionalGeneration.from_pretrained(directory, attn_implementation="eager").eval()
    hf_tokenizer = M2M100Tokenizer.from_pretrained(directory)
    ours = import_m2m100(directory)
    sentence = "the red dog runs in the blue park"
    src_ids = hf_tokenizer(sentence)["input_ids"]
    layers = decoder_lens(ours.model, ours.tokenizer, src_ids, max_new_tokens=12)
    source = torch.tensor([src_ids])
    with torch.no_grad():
        states = hf_model.model.encoder(source, output_hidden_states=True).hidden_states  # inputs of each layer, then
        # the last layer's output through the final norm

        def generated(memory: torch.Tensor) -> list[int]:
            out = hf_model.generate(
                encoder_outputs=BaseModelOutput(last_hidden_state=memory),
                attention_mask=torch.ones_like(source),
                num_beams=1,
                do_sample=False,
                max_new_tokens=12,
                forced_bos_token_id=hf_tokenizer.get_lang_id("fr"),
            )
            return out[0].tolist()[1:]  # after the start token

        norm = hf_model.model.encoder.layer_norm
        normed = [generated(norm(states[layer])) for layer in range(1, len(states) - 1)] + [generated(states[-1])]
        unnormed = [generated(states[layer]) for layer in range(1, len(states) - 1)]
    assert len(layers) == len(normed) == 2
    assert [layer.ids for layer in layers] == normed
    assert unnormed != normed[:-1]  # the final norm left out, the first layer's output writes something else


def test_the_command_line_writes_each_layers_translation_and_the_steps_candidates(tmp_path):
    out = tmp_path / "lens.json"
    done = run_cli("decoderlens", "--text", CLEAN_EXAMPLE, "--step", "17", "--out", out)
    assert done.returncode == 0, done.stderr
    found = json.loads(out.read_text())
    assert [layer["layer"] for layer in found["layers"]] == [1, 2, 3, 4]
    assert found["layers"][-1]["pieces"][-1] == "</s>" and found["translation"] in done.stdout
    assert found["step"]["token"] == "il" and found["step"]["candidates"][-1]["pieces"][0] == "il"
    assert len(found["step"]["candidates"]) == 4
    bad = run_cli("decoderlens", "--text", CLEAN_EXAMPLE, "--step", "0", "--out", out)
    assert bad.returncode == 2 and "steps count from 1" in bad.stderr
