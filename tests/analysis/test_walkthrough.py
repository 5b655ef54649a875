import numpy as np
import pytest
import torch
from helpers import tiny_config

from transformer.analysis.walkthrough import attention_stages, sublayer_inputs
from transformer.decoding.greedy import decode_with_chooser
from transformer.model.encoder_decoder import Transformer
from transformer.viz.charts import curves, grouped_bars
from transformer.viz.matrices import mask_heatmap, matrix_heatmap


@pytest.mark.parametrize("norm_first", [False, True])
def test_every_stage_reproduces_the_models_own_attention(tokenizer, norm_first):
    torch.manual_seed(1)
    model = Transformer(tiny_config(tokenizer, norm_first=norm_first)).eval()
    result = decode_with_chooser(model, tokenizer, "the big dog runs in the park")
    recorded = {"encoder": result.encoder_self, "decoder": result.decoder_self, "cross": result.cross}
    for kind, maps in recorded.items():
        for layer in range(maps.shape[0]):
            inputs = sublayer_inputs(model, result.src_ids, result.tgt_ids, kind, layer)
            for head in range(maps.shape[1]):
                stages = attention_stages(inputs, head)
                assert torch.allclose(stages.output, inputs.output, atol=1e-5)
                assert torch.allclose(stages.p_attn, maps[layer, head], atol=1e-5)
                assert torch.allclose(stages.p_attn, inputs.p_attn[head], atol=1e-6)
                assert torch.equal(stages.scaled, stages.scores / stages.query.size(-1) ** 0.5)


def test_masked_scores_are_minus_infinity_and_get_zero_weight(model, tokenizer):
    result = decode_with_chooser(model, tokenizer, "a cat sits")
    stages = attention_stages(sublayer_inputs(model, result.src_ids, result.tgt_ids, "decoder", 0), 1)
    hidden = torch.ones_like(stages.masked, dtype=torch.bool).triu(1)
    assert torch.isneginf(stages.masked[hidden]).all() and (stages.p_attn[hidden] == 0).all()
    assert torch.isfinite(stages.masked[~hidden]).all()


def test_matrix_heatmap_greys_minus_infinity_and_outlines_the_followed_row():
    fig = matrix_heatmap(np.array([[1.0, -np.inf], [-2.0, 3.0]]), "scores", ["a", "b"], ["c", "d"], highlight_row=1)
    z = np.asarray(fig.data[0].z, dtype=float)
    assert np.isnan(z[0, 1]) and z[1, 1] == 3
    assert fig.data[0].zmid == 0 and fig.layout.title.text.endswith("2×2")
    assert fig.layout.shapes[0].y0 == 0.5


def test_mask_and_curve_and_bar_builders():
    fig = mask_heatmap(np.tril(np.ones((3, 3), dtype=bool)), list("abc"), list("abc"), "look-ahead")
    assert fig.data[0].text[0][1] == "masked" and fig.data[0].text[1][0] == "may look"
    assert len(curves(np.zeros((10, 8)), [0, 3, 5], "pe").data) == 3
    assert len(grouped_bars(["x", "y"], {"a": np.ones(2), "b": np.zeros(2)}, "t", "norm").data) == 2
