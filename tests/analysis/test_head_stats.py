import copy
import math

import numpy as np
import torch

from transformer.analysis.heads.statistics import (
    corpus_statistics,
    head_statistics,
    js_divergence,
    parameter_counts,
    statistics_frame,
)
from transformer.decoding.greedy import decode_with_chooser
from transformer.model.heads import Head
from transformer.model.kinds import AttentionKind
from transformer.model.probes import Probe


def test_uniform_attention_has_maximal_entropy_and_identity_zero_distance():
    uniform = np.full((1, 1, 4, 4), 0.25)
    identity = np.eye(4)[None, None]
    assert math.isclose(head_statistics(uniform, list("abcd"))["entropy"][0, 0], math.log(4))
    stats = head_statistics(identity, list("abcd"))
    assert stats["entropy"][0, 0] == 0 and stats["distance"][0, 0] == 0 and stats["same"][0, 0] == 1


def test_previous_token_head_and_special_token_share():
    previous = np.zeros((1, 1, 4, 4))
    previous[0, 0, 0, 0] = 1
    for q in range(1, 4):
        previous[0, 0, q, q - 1] = 1
    stats = head_statistics(previous, ["<s>", "▁a", "▁b", "</s>"])
    assert stats["previous"][0, 0] == 0.75 and stats["next"][0, 0] == 0
    assert stats["special"][0, 0] == 0.5  # rows 0 and 1 look at <s>
    assert math.isclose(stats["distance"][0, 0], 0.75)


def test_statistics_frame_numbers_layers_and_heads_from_one():
    frame = statistics_frame(head_statistics(np.full((2, 3, 2, 2), 0.5), ["a", "b"]))
    assert list(frame.index[0]) == [1, 1] and list(frame.index[-1]) == [2, 3] and len(frame) == 6


def test_js_divergence_is_zero_for_equal_maps_and_log2_for_disjoint():
    a = np.eye(3)[None, None]
    b = np.roll(np.eye(3), 1, axis=1)[None, None]
    assert np.allclose(js_divergence(a, a), 0)
    assert np.allclose(js_divergence(a, b), math.log(2))


def test_ablation_probe_is_the_model_without_those_heads_and_never_changes_it(model, tokenizer):
    heads = [Head.parse(text) for text in ("cross.1.1", "cross.1.2", "encoder.2.1")]
    before = {name: tensor.clone() for name, tensor in model.state_dict().items()}
    src = torch.tensor([tokenizer.encode("the dog runs") + [3]])
    tgt = torch.tensor([[2, 5, 6]])
    without = copy.deepcopy(model)  # the reference: those heads' columns of W_O zeroed in a copy
    d_head = model.config.d_head
    with torch.no_grad():
        for kind, layer, head in heads:
            kind.module(without, layer).out_proj.weight[:, head * d_head : (head + 1) * d_head] = 0
    for need_weights in (False, True):  # the fused path and the explicit one
        probed = model(src, tgt, need_weights, probe=Probe.ablating(heads))
        reference = without(src, tgt, need_weights)
        torch.testing.assert_close(probed.log_probs, reference.log_probs, atol=1e-6, rtol=1e-6)
    assert not torch.allclose(model(src, tgt).log_probs, probed.log_probs)
    torch.testing.assert_close(probed.attentions.cross[0], reference.attentions.cross[0])  # p_attn as computed
    assert all(torch.equal(before[name], tensor) for name, tensor in model.state_dict().items())


def test_a_probe_reaches_only_its_own_forward_pass(model, tokenizer):
    """Threads decoding on one shared model, half with heads switched off: each gets its own sequential result."""
    import threading

    sentences = [" ".join(["the", "dog", "cat", "red", "park"][i % 5 :] + ["ball"] * (i % 3)) for i in range(16)]
    probe = Probe.ablating([Head(AttentionKind.CROSS, layer, head) for layer in range(3) for head in range(2)])
    probes = [probe if i % 2 else None for i in range(16)]
    expected = [
        decode_with_chooser(model, tokenizer, s, max_new_tokens=6, probe=p).cross for s, p in zip(sentences, probes)
    ]
    results: dict[int, torch.Tensor] = {}
    barrier = threading.Barrier(16)

    def work(i: int) -> None:
        barrier.wait()
        results[i] = decode_with_chooser(model, tokenizer, sentences[i], max_new_tokens=6, probe=probes[i]).cross

    threads = [threading.Thread(target=work, args=(i,)) for i in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    for i in range(16):
        torch.testing.assert_close(results[i], expected[i])
    assert not torch.equal(
        expected[0], decode_with_chooser(model, tokenizer, sentences[0], max_new_tokens=6, probe=probe).cross
    )


def test_corpus_statistics_average_the_sentences(model, tokenizer):
    one = corpus_statistics(model, tokenizer, ["a red ball"], "encoder")
    result = decode_with_chooser(model, tokenizer, "a red ball")
    view_stats = head_statistics(result.encoder_self.numpy(), result.src_pieces)
    assert np.allclose(one["entropy"], view_stats["entropy"])
    seen = []
    two = corpus_statistics(model, tokenizer, ["a red ball", "", "the cat sits"], "cross", progress=seen.append)
    assert seen == [1, 3] and two["entropy"].shape == (3, 2)


def test_parameter_counts_add_up(model):
    frame = parameter_counts(model)
    assert frame["parameters"].sum() == model.config.parameter_count()
    assert "encoder self_attn" in frame.index and math.isclose(frame["share"].sum(), 1)
