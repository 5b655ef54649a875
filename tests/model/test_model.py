import json
import subprocess
import sys

import pytest
import torch
from helpers import REPO, measured, tiny_config

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


def test_the_inference_path_equals_the_differentiable_one(model, config):
    """Without gradients the model multiplies by derived weights (transposed, Q/K/V side by side)."""
    src, tgt = batch(config)
    differentiable = model(src, tgt, need_weights=True)
    with torch.inference_mode():
        inference = model(src, tgt, need_weights=True)
    torch.testing.assert_close(inference.log_probs, differentiable.log_probs, atol=1e-6, rtol=1e-5)
    pairs = zip(vars(inference.attentions).values(), vars(differentiable.attentions).values())
    for fast, slow in ((f, s) for maps in pairs for f, s in zip(*maps)):
        torch.testing.assert_close(fast, slow, atol=1e-6, rtol=1e-5)


def test_fused_query_key_value_follows_every_weight_change(model, config):
    attention = model.decoder_layers[0].self_attn
    x = torch.randn(2, 3, config.d_model)

    def separate() -> list[torch.Tensor]:
        return [attention.split_heads(p(x)) for p in (attention.q_proj, attention.k_proj, attention.v_proj)]

    with torch.no_grad():
        for fused, alone in zip(attention.project_query_key_value(x), separate()):
            torch.testing.assert_close(fused, alone, atol=1e-6, rtol=1e-6)
        saved = attention.v_proj.weight.clone()
        attention.v_proj.weight.mul_(-3.0)  # as an optimiser step does, in place
        try:
            torch.testing.assert_close(attention.project_query_key_value(x)[2], separate()[2], atol=1e-6, rtol=1e-6)
        finally:
            attention.v_proj.weight.copy_(saved)


def test_a_cache_grows_past_its_room_and_a_branch_never_overwrites_another(model, config):
    from transformer.model.encoder_decoder import DecoderOutput
    from transformer.model.masks import padding_mask, target_mask

    src, tgt = batch(config)
    tgt = tgt.clamp(min=4)  # no padding: the whole-sequence decode would mask it, a cached step does not
    src_mask = padding_mask(src, config.pad_id)
    with torch.inference_mode():
        memory = model.encode(src, src_mask).memory

        def whole(ids: torch.Tensor) -> torch.Tensor:  # every position at once, no cache
            return model.decode(ids, memory, src_mask, target_mask(ids, config.pad_id)).hidden[:, -1]

        def step(ids: torch.Tensor, cache: list) -> DecoderOutput:
            return model.decode(ids, memory, src_mask, None, cache=cache)

        cache = model.start_cache(memory, capacity=1)
        for position in range(3):  # room for 1: grows twice
            decoded = step(tgt[:, position : position + 1], cache)
            cache = decoded.cache
        torch.testing.assert_close(decoded.hidden[:, -1], whole(tgt[:, :3]), atol=1e-5, rtol=1e-5)
        assert cache[0].length == 3 and cache[0].buffer.capacity >= 3
        fork = tgt[:, 3:4]
        other = torch.flip(fork, dims=[0])  # another token in each row
        first = step(fork, cache)
        kept = first.cache[0].self_key.clone()
        second = step(other, cache)  # extends the same cache: must not write over `first`
        torch.testing.assert_close(first.cache[0].self_key, kept, atol=0, rtol=0)
        torch.testing.assert_close(second.hidden[:, -1], whole(torch.cat([tgt[:, :3], other], 1)), atol=1e-5, rtol=1e-5)
        following = step(tgt[:, 4:5], first.cache)  # and `first` goes on as if `second` never was
        torch.testing.assert_close(following.hidden[:, -1], whole(tgt[:, :5]), atol=1e-5, rtol=1e-5)


VARIANTS = [
    dict(norm_first=True),
    dict(positional="learned"),
    dict(positional="learned", position_offset=2, embedding_norm=True),
    dict(positional="relative", norm="rms", bias=False, feed_forward="gated", scale_output=True, norm_first=True),
    dict(tie_embeddings=False, tgt_vocab_size=70),
    dict(n_encoder_layers=1),
    dict(activation="gelu"),
]


@pytest.mark.parametrize("overrides", VARIANTS)
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


@pytest.mark.parametrize("overrides", [dict(), *VARIANTS])
def test_a_model_built_around_given_tensors_holds_them_and_computes_the_same(tokenizer, overrides):
    config = tiny_config(tokenizer, **overrides)
    loaded = Transformer(config).eval()
    given = {name: t.detach().clone() for name, t in unique_state(loaded).items()}
    state = dict(given)
    held = Transformer.holding(config, state).eval()
    assert state == {}  # taken: the dict's references dropped, each original (a file's bytes, a mapping) let go
    linear = {f"{name}.weight" for name, m in held.named_modules() if isinstance(m, torch.nn.Linear)}
    for name, t in unique_state(held).items():
        assert torch.equal(t, given[name]), name
        assert t.untyped_storage().data_ptr() != given[name].untyped_storage().data_ptr(), f"{name} is the caller's"
        if name in linear or (name == "src_embed.lookup.weight" and config.tie_embeddings):
            assert t.t().is_contiguous(), f"{name} is not laid out for decoding"
    assert (held.generator.weight is held.src_embed.lookup.weight) == config.tie_embeddings
    src, tgt = batch(config)
    torch.testing.assert_close(held(src, tgt).log_probs, loaded(src, tgt).log_probs, atol=1e-5, rtol=1e-5)
    dropped = "decoder_layers.1.feed_forward.outer.weight"
    with pytest.raises(ValueError, match=f"no tensor given for {dropped}"):
        Transformer.holding(config, {name: t for name, t in given.items() if name != dropped})


def test_a_process_loads_a_checkpoint_without_importing_torch_dynamo():
    """A model built on the meta device drew random initial weights and computed its sinusoids there, which imports
    torch._dynamo: 1.2 s of the app's cold start, for values about to be replaced (a fresh process)."""
    load = (
        "import sys; from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint;"
        "checkpoint = load_checkpoint(DEFAULT_CHECKPOINT);"
        "print('torch._dynamo' in sys.modules, checkpoint.model.src_position.table.shape[0] > 0)"
    )
    run = subprocess.run([sys.executable, "-c", load], cwd=REPO, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert run.stdout.split() == ["False", "True"]


def test_building_around_tensors_allocates_no_weights_of_its_own(tokenizer):
    """Each tensor is laid out or copied anew and its original freed, one at a time: the growth is about the largest
    weight (the tied embedding), never the weights again."""
    config = tiny_config(tokenizer, src_vocab_size=50_000, tgt_vocab_size=50_000, d_model=512, n_heads=8)
    state = {name: t.detach().clone() for name, t in unique_state(Transformer(config)).items()}
    Transformer.holding(config, dict(state))  # the first meta-device build loads torch's meta kernels (45 MB, once)
    weights_mb = sum(t.nbytes for t in state.values()) / 2**20
    largest_mb = max(t.nbytes for t in state.values()) / 2**20
    with measured() as cost:
        Transformer.holding(config, {name: state.pop(name) for name in list(state)})
    assert weights_mb > 100 and cost.peak_growth_mb < largest_mb + weights_mb / 4, (weights_mb, largest_mb, cost)


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
        (dict(d_model=16384, max_len=1_048_576, positional="learned"), "over the limit"),  # learned tables count
        (dict(bos_id=3), "must be distinct"),  # bos is eos
        (dict(unk_id=0), "must be distinct"),  # unk is pad (only bos may be pad, Marian's start token)
    ],
)
def test_config_refuses_bad_values(tokenizer, bad, message):
    with pytest.raises(ConfigError, match=message):
        tiny_config(tokenizer, **bad)


def test_config_json_round_trip_and_unknown_fields(config):
    assert TransformerConfig.from_json(config.to_json()) == config
    with pytest.raises(ConfigError, match="unknown config fields: 'colour'"):
        TransformerConfig.from_dict({**json.loads(config.to_json()), "colour": 1})


def test_the_feed_forward_activation_is_the_configs(tokenizer):
    x = torch.randn(2, 3, 16, generator=torch.Generator().manual_seed(0))
    functions = (("relu", torch.relu), ("gelu", torch.nn.functional.gelu), ("swish", torch.nn.functional.silu))
    for activation, function in functions:
        layer = Transformer(tiny_config(tokenizer, activation=activation)).encoder_layers[0].feed_forward.eval()
        torch.testing.assert_close(layer(x), layer.outer(function(layer.inner(x))))
    with pytest.raises(ConfigError, match="activation"):
        tiny_config(tokenizer, activation="tanh")


def test_the_family_conventions_are_config_fields_defaulting_to_the_papers(tokenizer):
    from transformer.model.embeddings import sinusoidal_table

    paper = Transformer(tiny_config(tokenizer)).eval()
    other = Transformer(
        tiny_config(tokenizer, layer_norm_eps=1e-6, scale_embedding=False, sinusoid_layout="halves", decoder_start_id=0)
    ).eval()
    ids = torch.tensor([[5, 6, 7]])
    assert torch.equal(other.src_embed(ids), other.src_embed.lookup(ids))
    assert torch.allclose(paper.src_embed(ids), paper.src_embed.lookup(ids) * 4.0)  # sqrt(16)
    interleaved, halves = sinusoidal_table(10, 16), sinusoidal_table(10, 16, "halves")
    assert torch.equal(halves, torch.cat([interleaved[:, 0::2], interleaved[:, 1::2]], dim=1))
    assert torch.equal(other.src_position.table[:10], halves) and torch.equal(
        paper.src_position.table[:10], interleaved
    )
    assert other.encoder_layers[0].attn_block.norm.eps == 1e-6 and paper.encoder_layers[0].attn_block.norm.eps == 1e-5
    assert (paper.config.start_id, other.config.start_id) == (paper.config.bos_id, 0)
    old_file = {
        k: v
        for k, v in json.loads(paper.config.to_json()).items()
        if k not in ("layer_norm_eps", "scale_embedding", "sinusoid_layout", "decoder_start_id")
    }
    assert TransformerConfig.from_dict(old_file) == paper.config  # files written before these fields load unchanged
    with pytest.raises(ConfigError, match="decoder_start_id must be an integer or null"):
        tiny_config(tokenizer, decoder_start_id="pad")


def test_decoding_starts_from_the_configs_start_token(model, tokenizer):
    from dataclasses import replace

    from transformer.decoding.greedy import decode_with_chooser

    starting_from_pad = Transformer(replace(model.config, decoder_start_id=model.config.pad_id)).eval()
    starting_from_pad.load_state_dict(model.state_dict())
    result = decode_with_chooser(starting_from_pad, tokenizer, "the dog runs")
    assert (
        result.decoder_input_pieces[0] == "<pad>"
        and decode_with_chooser(model, tokenizer, "the dog runs").start_piece == "<s>"
    )
    src = torch.tensor([result.src_ids])
    forced = starting_from_pad(src, torch.tensor([[model.config.pad_id, *result.tgt_ids[:-1]]]), need_weights=True)
    assert torch.isfinite(forced.log_probs).all()  # the start token is attended to, though it is the pad id
    assert torch.allclose(forced.attentions.cross[0][0], result.cross[0], atol=1e-5)


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


def test_a_config_claiming_a_million_positions_costs_what_a_short_one_does(tokenizer):
    from helpers import measured

    from transformer.model.config import PRECOMPUTED_POSITIONS
    from transformer.model.embeddings import sinusoidal_table

    config = tiny_config(tokenizer, d_model=128, n_heads=4, max_len=2**20)
    with measured() as cost:
        model = Transformer(config)
    assert cost.peak_growth_mb < 50, cost  # 2^20 x 128 positions in float64 were 1 GB, 5x that while built
    position = model.src_position
    far = PRECOMPUTED_POSITIONS + 500
    assert torch.equal(position.rows(far, 3), sinusoidal_table(far + 3, 128)[far:])  # computed when reached
    assert torch.equal(
        position.rows(PRECOMPUTED_POSITIONS - 2, 4), sinusoidal_table(PRECOMPUTED_POSITIONS + 2, 128)[-4:]
    )
    assert torch.equal(position.rows(0, 7), sinusoidal_table(7, 128))
    with pytest.raises(ValueError, match="exceeds max_len"):
        position.rows(2**20 - 1, 2)


def test_the_shipped_model_with_a_huge_max_len_loads_small_and_translates_the_same(checkpoint_path):
    from helpers import REPO, measured, with_config

    from transformer.decoding.strategies import decode_text
    from transformer.io.checkpoint import load_checkpoint_bytes

    shipped = (REPO / "checkpoints" / "en-fr-captions.safetensors").read_bytes()
    sentence = "A man is riding a bicycle."
    expected = decode_text(*_model_and_tokenizer(load_checkpoint_bytes(shipped)), sentence).text
    with measured() as cost:
        huge = load_checkpoint_bytes(with_config(shipped, max_len=524_288))
    assert cost.peak_growth_mb < 150, cost  # was 3.35 GB
    assert decode_text(*_model_and_tokenizer(huge), sentence).text == expected


def _model_and_tokenizer(checkpoint):
    return checkpoint.model, checkpoint.tokenizer


@pytest.mark.parametrize("buckets, distance", [(2, 128), (32, 16), (32, 0)])
def test_relative_buckets_whose_formula_has_no_value_are_refused(tokenizer, buckets, distance):
    with pytest.raises(ConfigError, match="relative_buckets must be from 4 to 1024"):
        tiny_config(tokenizer, positional="relative", relative_buckets=buckets, relative_max_distance=distance)
