import json

import pytest
import torch
from helpers import tiny_config

from transformer.io.checkpoint import unique_state
from transformer.model.config import ConfigError, TransformerConfig
from transformer.model.encoder_decoder import Transformer


def batch(config, seed=0):
    generator = torch.Generator().manual_seed(seed)
    src = torch.randint(4, config.src_vocab_size, (2, 7), generator=generator)
    tgt = torch.randint(4, config.tgt_vocab_size, (2, 5), generator=generator)
    src[1, 5:] = config.pad_id  # a shorter second sentence
    tgt[1, 4:] = config.pad_id
    return src, tgt


def test_every_attention_map_has_its_shape_and_rows_sum_to_one(model, config):
    src, tgt = batch(config)
    output = model(src, tgt, need_weights=True)
    maps = output.attentions
    assert output.log_probs.shape == (2, 5, config.tgt_vocab_size)
    assert len(maps.encoder_self) == config.n_encoder_layers
    assert len(maps.decoder_self) == len(maps.cross) == config.n_decoder_layers
    heads = config.n_heads
    assert all(m.shape == (2, heads, 7, 7) for m in maps.encoder_self)
    assert all(m.shape == (2, heads, 5, 5) for m in maps.decoder_self)
    assert all(m.shape == (2, heads, 5, 7) for m in maps.cross)
    for m in (*maps.encoder_self, *maps.decoder_self, *maps.cross):
        torch.testing.assert_close(m.sum(-1), torch.ones(m.shape[:-1]))


def test_masked_keys_get_exactly_zero(model, config):
    src, tgt = batch(config)
    maps = model(src, tgt, need_weights=True).attentions
    for m in (*maps.encoder_self, *maps.cross):
        assert (m[1, :, :, 5:] == 0).all()  # source padding
    for m in maps.decoder_self:
        assert (m.triu(diagonal=1) == 0).all()  # look-ahead: lower-triangular
        assert (m[1, :, :, 4:] == 0).all()  # target padding


def test_fused_path_equals_explicit_path(model, config):
    src, tgt = batch(config)
    explicit = model(src, tgt, need_weights=True).log_probs
    fused = model(src, tgt, need_weights=False).log_probs
    torch.testing.assert_close(explicit, fused, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(model.logits(src, tgt).log_softmax(-1), fused, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize(
    "overrides",
    [
        dict(norm_first=True),
        dict(positional="learned"),
        dict(tie_embeddings=False, tgt_vocab_size=70),
        dict(n_encoder_layers=1),
        dict(activation="gelu"),
    ],
)
def test_variants_build_and_count_their_parameters(tokenizer, overrides):
    config = tiny_config(tokenizer, **overrides)
    model = Transformer(config).eval()
    assert sum(p.numel() for p in model.parameters()) == config.parameter_count()
    allocated = sum(t.numel() for t in [*model.parameters(), *model.buffers()])
    assert allocated == config.element_count()  # what a checkpoint's config is bounded by before building
    assert config.parameter_shapes() == {name: tuple(t.shape) for name, t in unique_state(model).items()}
    src, tgt = batch(config)
    maps = model(src, tgt, need_weights=True).attentions
    assert len(maps.encoder_self) == config.n_encoder_layers


def test_embeddings_are_tied(model):
    assert model.generator.weight is model.src_embed.lookup.weight is model.tgt_embed.lookup.weight


def test_embeddings_scale_by_sqrt_d_model(model, config):
    ids = torch.tensor([[5]])
    torch.testing.assert_close(model.src_embed(ids)[0, 0], model.src_embed.lookup.weight[5] * config.d_model**0.5)


@pytest.mark.parametrize(
    "bad, message",
    [
        (dict(d_model=30, n_heads=4), "divisible"),
        (dict(tgt_vocab_size=99), "tie_embeddings"),
        (dict(dropout=1.5), "dropout"),
        (dict(d_model=65536, d_ff=65536, n_encoder_layers=64), "over the limit"),
        (dict(n_heads=0), "positive"),
        (dict(d_model=2048, max_len=1_048_576), "position values, over the limit"),  # the sinusoid tables count
    ],
)
def test_config_refuses_bad_values(tokenizer, bad, message):
    with pytest.raises(ConfigError, match=message):
        tiny_config(tokenizer, **bad)


def test_config_json_round_trip_and_unknown_fields(config):
    assert TransformerConfig.from_json(config.to_json()) == config
    with pytest.raises(ConfigError, match="unknown config fields: colour"):
        TransformerConfig.from_dict({**json.loads(config.to_json()), "colour": 1})


def test_the_feed_forward_activation_is_the_configs(tokenizer):
    x = torch.randn(2, 3, 16, generator=torch.Generator().manual_seed(0))
    for activation, function in (("relu", torch.relu), ("gelu", torch.nn.functional.gelu)):
        layer = Transformer(tiny_config(tokenizer, activation=activation)).encoder_layers[0].feed_forward.eval()
        torch.testing.assert_close(layer(x), layer.outer(function(layer.inner(x))))
    with pytest.raises(ConfigError, match="activation"):
        tiny_config(tokenizer, activation="swish")


def test_encoder_and_decoder_return_named_outputs(model, config):
    from transformer.model.encoder_decoder import DecoderOutput, EncoderOutput
    from transformer.model.masks import padding_mask

    src, tgt = batch(config)
    src_mask = padding_mask(src, config.pad_id)
    encoded = model.encode(src, src_mask, need_weights=True)
    assert isinstance(encoded, EncoderOutput) and len(encoded.attentions) == config.n_encoder_layers
    cache = model.start_cache(encoded.memory)
    decoded = model.decode(tgt[:, :1], encoded.memory, src_mask, None, True, cache)
    assert isinstance(decoded, DecoderOutput) and len(decoded.cross_attentions) == config.n_decoder_layers
    assert decoded.cache[0].self_key.size(2) == 1 and decoded.hidden.shape == (2, 1, config.d_model)
    assert model.encode(src, src_mask).attentions == ()  # nothing recorded unless asked
