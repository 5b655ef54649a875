"""The model's shortcuts for activation patching: the decoder's one row of input for a memory of many, its last layer
computed at the last position only, and an encoder layer's output from its heads' outputs at some positions."""

import pytest
import torch
from helpers import tiny_config

from transformer.model.encoder_decoder import Transformer
from transformer.model.kinds import AttentionKind
from transformer.model.masks import padding_mask, target_mask
from transformer.model.probes import Probe

SHAPES = [
    dict(),  # post-norm, sinusoids: the paper's
    dict(positional="relative", norm="rms", bias=False, feed_forward="gated", scale_output=True, norm_first=True),
]


def memories_and_input(config, rows: int = 3):
    generator = torch.Generator().manual_seed(1)
    src = torch.randint(4, config.src_vocab_size, (rows, 6), generator=generator)
    src[2, 4:] = config.pad_id  # a padded row: its mask is its own
    tgt = torch.randint(4, config.tgt_vocab_size, (1, 5), generator=generator)
    return src, tgt


@pytest.mark.parametrize("overrides", SHAPES)
def test_one_input_row_over_many_memories_and_the_last_position_alone_give_what_the_whole_decoder_gives(
    tokenizer, overrides
):
    torch.manual_seed(0)
    config = tiny_config(tokenizer, **overrides)
    model = Transformer(config).eval().double()  # float64: the shapes' own roundings far below what is compared
    src, tgt = memories_and_input(config)
    src_mask = padding_mask(src, config.pad_id)
    with torch.inference_mode():
        memory = model.encode(src, src_mask).memory
        rows = tgt.expand(len(src), -1)
        whole = model.decode(rows, memory, src_mask, target_mask(rows, config.pad_id)).hidden
        shared = model.decode(tgt, memory, src_mask, target_mask(tgt, config.pad_id)).hidden
        last = model.decode(tgt, memory, src_mask, target_mask(tgt, config.pad_id), last_only=True).hidden
    assert shared.shape == whole.shape and last.shape == (len(src), 1, config.d_model)
    torch.testing.assert_close(shared, whole, atol=1e-12, rtol=0)
    torch.testing.assert_close(last[:, 0], whole[:, -1], atol=1e-12, rtol=0)
    assert not torch.allclose(whole[:, -1], whole[:, -2])  # the position read is not any position


def test_a_probe_of_the_last_layer_is_refused_where_it_computes_one_position(model, config, tokenizer):
    src, tgt = memories_and_input(config)
    src_mask = padding_mask(src, config.pad_id)
    memory = model.encode(src, src_mask).memory
    last = config.n_decoder_layers - 1
    below = Probe(record_at=frozenset({(AttentionKind.CROSS, last - 1)}))
    decoded = model.decode(tgt, memory, src_mask, None, probe=below, last_only=True)
    assert decoded.hidden.size(1) == 1 and (AttentionKind.CROSS, last - 1) in below.records
    with pytest.raises(ValueError, match="a layer computed at its last positions only is not probed"):
        model.decode(tgt, memory, src_mask, None, probe=Probe.recording("cross", last), last_only=True)


@pytest.mark.parametrize("overrides", SHAPES)
def test_an_encoder_layer_from_its_heads_outputs_gives_its_output_at_those_positions(tokenizer, overrides):
    torch.manual_seed(0)
    config = tiny_config(tokenizer, **overrides)
    model = Transformer(config).eval().double()
    src, _ = memories_and_input(config)
    heads, streams = {}, []

    def read(outputs: torch.Tensor) -> torch.Tensor:
        heads["layer 1"] = outputs
        return outputs

    def keep(boundary: int, x: torch.Tensor) -> torch.Tensor:
        streams.append(x)
        return x

    probe = Probe(head_edits={(AttentionKind.ENCODER, 1): read})
    with torch.inference_mode():
        model.encode(src, padding_mask(src, config.pad_id), probe=probe, between_layers=keep)
        some = model.encoder_layers[1].output_from_heads(streams[1][:, 2:4], heads["layer 1"][:, :, 2:4])
    torch.testing.assert_close(some, streams[2][:, 2:4], atol=1e-12, rtol=0)
    assert not torch.allclose(streams[1][:, 2:4], streams[2][:, 2:4])


@pytest.mark.parametrize("overrides", [*SHAPES, dict(tie_embeddings=False)])
def test_the_scores_of_some_ids_are_those_of_the_whole_output_layer(tokenizer, overrides):
    """A bias, a scale before the output layer (T5's tied one) and an untied layer: two ids read alone give what the
    vocabulary's scores hold for them, in the order asked."""
    torch.manual_seed(0)
    model = Transformer(tiny_config(tokenizer, **overrides)).eval().double()
    hidden = torch.randn(3, model.config.d_model, dtype=torch.float64)
    ids = [7, 4]
    whole = model.output_logits(hidden)
    torch.testing.assert_close(model.output_logits(hidden, ids), whole[:, ids], atol=1e-12, rtol=0)
    assert model.output_logits(hidden, ids).shape == (3, 2)
