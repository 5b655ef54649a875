"""The encoder-decoder Transformer (section 3, figure 1), returning its attention as values."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from torch.overrides import TorchFunctionMode

from transformer.model.config import TransformerConfig
from transformer.model.embeddings import Embeddings, PositionalEncoding
from transformer.model.kinds import AttentionKind
from transformer.model.layers import DecoderLayer, EncoderLayer, LayerCache, make_norm
from transformer.model.linear import hold_transposed
from transformer.model.masks import padding_mask, target_mask
from transformer.model.probes import Probe


class NoRandomDraws(TorchFunctionMode):
    """Inside it, a random initialisation leaves its tensor as it is: on the meta device there is nothing to draw,
    and drawing there anyway imported torch._dynamo, 1.2 s of a process's first checkpoint load (the app's cold
    start) for weights about to be replaced."""

    DRAWS = frozenset({"uniform_", "normal_", "kaiming_uniform_", "kaiming_normal_", "xavier_uniform_"})

    def __torch_function__(self, func, types, args=(), kwargs=None):
        if getattr(func, "__name__", "") in self.DRAWS:
            return args[0] if args else kwargs["tensor"]
        return func(*args, **(kwargs or {}))


@dataclass(frozen=True)
class AttentionMaps:
    """Post-softmax attention, one tensor per layer, each (batch, heads, query, key)."""

    encoder_self: tuple[torch.Tensor, ...]
    decoder_self: tuple[torch.Tensor, ...]
    cross: tuple[torch.Tensor, ...]


@dataclass(frozen=True)
class EncoderOutput:
    """The encoder's states and, if asked for, each layer's self-attention (B, H, S, S)."""

    memory: torch.Tensor  # (B, S, d_model)
    attentions: tuple[torch.Tensor, ...]


@dataclass(frozen=True)
class DecoderOutput:
    """The decoder's states, each layer's attention and output if asked for, and the cache extended by these
    positions."""

    hidden: torch.Tensor  # (B, T, d_model)
    self_attentions: tuple[torch.Tensor, ...]  # (B, H, T, T + cached)
    cross_attentions: tuple[torch.Tensor, ...]  # (B, H, T, S)
    cache: list[LayerCache] | None
    layer_states: tuple[torch.Tensor, ...] = ()  # (B, T, d_model) each layer's output, before the final norm


@dataclass(frozen=True)
class ModelOutput:
    """Log-probabilities over the target vocabulary, (B, T, V); the attention and each decoder layer's output
    (B, T, d_model), if asked for."""

    log_probs: torch.Tensor
    attentions: AttentionMaps | None
    decoder_layer_states: tuple[torch.Tensor, ...] = ()


class Transformer(nn.Module):
    """Encoder, decoder and generator of "Attention Is All You Need"."""

    def __init__(self, config: TransformerConfig) -> None:
        super().__init__()
        self.config = config
        self.src_embed = Embeddings(config.src_vocab_size, config)
        self.tgt_embed = self.src_embed if config.tie_embeddings else Embeddings(config.tgt_vocab_size, config)
        self.src_position = PositionalEncoding(config)
        self.tgt_position = PositionalEncoding(config, bidirectional=False)
        self.encoder_layers = nn.ModuleList([EncoderLayer(config) for _ in range(config.n_encoder_layers)])
        self.decoder_layers = nn.ModuleList([DecoderLayer(config) for _ in range(config.n_decoder_layers)])
        final_norm = (lambda: make_norm(config)) if config.norm_first else nn.Identity
        self.encoder_norm = final_norm()  # pre-norm needs a last norm; post-norm ends normalised
        self.decoder_norm = final_norm()
        self.generator = nn.Linear(config.d_model, config.tgt_vocab_size, bias=config.bias)
        self.output_scale = config.d_model**-0.5 if config.scale_output else None
        self._init_weights()
        self._tie_generator()

    @classmethod
    def holding(cls, config: TransformerConfig, tensors: dict[str, torch.Tensor]) -> Transformer:
        """The model built around these float tensors (state-dict names, tied ones once) without weights of its
        own: a 600M-parameter import is held once in memory, not twice, and nothing is initialised only to be
        overwritten. Its linear weights are laid out for decoding (`hold_transposed`), and every tensor owns its
        memory: a Hugging Face file's mapping or a checkpoint's bytes are let go, never held beside the
        laid-out weights (measured: docs/performance.md)."""
        with torch.device("meta"), NoRandomDraws():
            model = cls(config)
        model.load_state_dict(tensors, strict=False, assign=True)
        model._tie_generator()
        for position in (model.src_position, model.tgt_position):
            position.compute_fixed_table()
        missing = [name for name, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
        if missing:
            raise ValueError(f"no tensor given for {', '.join(missing[:5])}")
        tensors.clear()  # the caller's references: each weight's row-major original is freed as it is laid out
        hold_transposed(model)
        laid_out = {id(m.weight) for m in model.modules() if isinstance(m, nn.Linear)}
        with torch.no_grad():  # the rest copied too: nothing left pointing into a file's bytes or a mapped file
            for tensor in {id(t): t for t in [*model.parameters(), *model.buffers()]}.values():
                if id(tensor) not in laid_out:
                    tensor.data = tensor.data.clone()
        return model

    def _tie_generator(self) -> None:
        if self.config.tie_embeddings:
            self.generator.weight = self.tgt_embed.lookup.weight

    def _init_weights(self) -> None:
        for parameter in self.parameters():
            if parameter.dim() > 1:
                nn.init.xavier_uniform_(parameter)

    def encode(
        self,
        src: torch.Tensor,
        src_mask: torch.Tensor,
        need_weights: bool = False,
        probe: Probe | None = None,
        embedded: torch.Tensor | None = None,
        between_layers: Callable[[int, torch.Tensor], torch.Tensor] | None = None,
        start: tuple[int, torch.Tensor] | None = None,
    ) -> EncoderOutput:
        """src ids (B, S) -> memory (B, S, d_model) and, if asked, each layer's self-attention.

        embedded, if given, replaces the token embeddings of src (B, S, d_model): attribution differentiates
        through it, with no hook on the shared modules. between_layers, if given, is called with each layer
        boundary's stream (0: the embeddings with positions, the first layer's input; L: the last layer's output,
        before the final norm) and returns the stream to carry on: activation patching reads and replaces it there.
        start, if given, is (boundary, stream): the encoder begins there, the layers below it not run (patched runs
        that share a stream below their site).
        """
        first, x = (0, None) if start is None else start
        if x is None:
            x = self.src_position(self.src_embed(src) if embedded is None else embedded)
        positions = torch.arange(src.size(1), device=src.device)[None]
        bias = self.src_position.attention_bias(positions, positions)
        maps = []
        for i, layer in enumerate(self.encoder_layers[first:], start=first):
            if between_layers is not None:
                x = between_layers(i, x)
            x, p_attn = layer(x, src_mask, need_weights, self._sublayer_probe(probe, AttentionKind.ENCODER, i), bias)
            maps.append(p_attn)
        if between_layers is not None:
            x = between_layers(len(self.encoder_layers), x)
        return EncoderOutput(self.encoder_norm(x), tuple(maps) if need_weights else ())

    def decode(
        self,
        tgt: torch.Tensor,
        memory: torch.Tensor,
        src_mask: torch.Tensor,
        tgt_mask: torch.Tensor | None,
        need_weights: bool = False,
        cache: list[LayerCache] | None = None,
        probe: Probe | None = None,
        embedded: torch.Tensor | None = None,
        positions: torch.Tensor | None = None,
        key_positions: torch.Tensor | None = None,
        between_layers: Callable[[int, torch.Tensor], torch.Tensor] | None = None,
        last_only: bool = False,
    ) -> DecoderOutput:
        """Decoder states for tgt (B, T); with a cache, tgt holds only the positions after it.

        embedded, if given, replaces the token embeddings of tgt (as in encode). positions (B,), if given, is each
        row's position of its first token, where rows continue prefixes of different lengths from one cache (the
        keys a row may not see hidden by tgt_mask); else the cache's length. Such rows of a model with relative
        positions need key_positions too (B, cached + T): the position of each key slot in that row.
        between_layers, as encode's, reads and replaces the decoder's stream at each layer boundary. tgt may be one
        row for a memory of many (B, S, d_model): rows sharing an input compute its first self-attention once.
        last_only asks for the last position's state only (B, 1, d_model): the last layer computes the keys and
        values of every position, the rest at that one (activation patching reads one step), and takes no probe.
        """
        cached = 0 if cache is None else cache[0].length
        offset = positions if positions is not None else cached
        x = self.tgt_position(self.tgt_embed(tgt) if embedded is None else embedded, offset)
        bias = self._self_attention_bias(offset, tgt.size(1), key_positions, tgt.device)
        self_maps, cross_maps, new_cache, states = [], [], [], []
        for i, layer in enumerate(self.decoder_layers):
            if between_layers is not None:
                x = between_layers(i, x)
            x, self_p, cross_p, layer_cache = layer(
                x,
                memory,
                src_mask,
                tgt_mask,
                need_weights,
                None if cache is None else cache[i],
                *self._decoder_probes(probe, i),
                bias,
                tgt.size(1) - 1 if last_only and i == len(self.decoder_layers) - 1 else 0,
            )
            self_maps.append(self_p)
            cross_maps.append(cross_p)
            new_cache.append(layer_cache)
            states.append(x)
        if between_layers is not None:
            x = between_layers(len(self.decoder_layers), x)
        if not need_weights:
            self_maps, cross_maps, states = [], [], []
        cache_out = new_cache if cache is not None else None
        return DecoderOutput(self.decoder_norm(x), tuple(self_maps), tuple(cross_maps), cache_out, tuple(states))

    def _self_attention_bias(
        self, offset: int | torch.Tensor, length: int, key_positions: torch.Tensor | None, device: torch.device
    ) -> torch.Tensor | None:
        """The relative positions' bias of the decoder's new queries over every key (None without relative
        positions): keys at their slots' positions, or where key_positions puts them."""
        if not self.tgt_position.relative:
            return None
        steps = torch.arange(length, device=device)
        if isinstance(offset, int):
            return self.tgt_position.attention_bias(
                (offset + steps)[None], torch.arange(offset + length, device=device)[None]
            )
        if key_positions is None:
            raise ValueError("rows at positions of their own need key_positions in a model with relative positions")
        return self.tgt_position.attention_bias(offset[:, None] + steps, key_positions)

    def _sublayer_probe(self, probe: Probe | None, kind: AttentionKind, layer: int):
        return None if probe is None else probe.at(kind, layer, self.config.n_heads)

    def _decoder_probes(self, probe: Probe | None, layer: int) -> tuple:
        """A decoder layer's self-attention and cross-attention parts of the probe."""
        return tuple(self._sublayer_probe(probe, kind, layer) for kind in (AttentionKind.DECODER, AttentionKind.CROSS))

    def start_cache(self, memory: torch.Tensor, capacity: int = 16) -> list[LayerCache]:
        """A fresh key/value cache for incremental decoding over this memory, with room for `capacity`
        positions before it grows."""
        return [layer.start_cache(memory, capacity) for layer in self.decoder_layers]

    def log_probs(self, hidden: torch.Tensor) -> torch.Tensor:
        """The generator: log-softmax over the target vocabulary, in float32 at least (a half-precision model's
        log-probs would round away the differences between close candidates)."""
        logits = self.output_logits(hidden)
        return logits.to(torch.promote_types(logits.dtype, torch.float32)).log_softmax(dim=-1)

    def output_logits(self, hidden: torch.Tensor, ids: list[int] | None = None) -> torch.Tensor:
        """The generator's scores of decoder states (..., d_model), scaled by d_model^-0.5 first where the model
        says so (T5 with tied embeddings); of `ids` alone where given (..., len(ids)): a metric that reads two
        scores needs two rows of the output layer, not the vocabulary's."""
        hidden = hidden if self.output_scale is None else hidden * self.output_scale
        if ids is None:
            return self.generator(hidden)
        bias = None if self.generator.bias is None else self.generator.bias[ids]
        return nn.functional.linear(hidden, self.generator.weight[ids], bias)

    def lens_log_probs(self, states: torch.Tensor) -> torch.Tensor:
        """What the output layer makes of decoder layer outputs (..., d_model), as if each were the last (the
        logit lens): the final norm, where the model has one, then the generator. The last layer's is the model's
        own output distribution."""
        return self.log_probs(self.decoder_norm(states))

    def forward(
        self, src: torch.Tensor, tgt: torch.Tensor, need_weights: bool = False, probe: Probe | None = None
    ) -> ModelOutput:
        """Teacher-forced pass: src (B, S) and decoder input tgt (B, T) -> next-token log-probs (B, T, V)."""
        src_mask = padding_mask(src, self.config.pad_id)
        encoded = self.encode(src, src_mask, need_weights, probe)
        decoded = self.decode(
            tgt, encoded.memory, src_mask, target_mask(tgt, self.config.pad_id), need_weights, probe=probe
        )
        attentions = (
            AttentionMaps(encoded.attentions, decoded.self_attentions, decoded.cross_attentions)
            if need_weights
            else None
        )
        return ModelOutput(self.log_probs(decoded.hidden), attentions, decoded.layer_states)

    def logits(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        """Unnormalised scores (B, T, V) for training, where the loss applies its own softmax."""
        return self.output_logits(self.decoder_states(src, tgt))

    def decoder_states(self, src: torch.Tensor, tgt: torch.Tensor, probe: Probe | None = None) -> torch.Tensor:
        """The teacher-forced pass up to the decoder's final states (B, T, d_model), before the generator: for a
        caller that takes the scores over the vocabulary a part at a time."""
        src_mask = padding_mask(src, self.config.pad_id)
        memory = self.encode(src, src_mask, probe=probe).memory
        return self.decode(tgt, memory, src_mask, target_mask(tgt, self.config.pad_id), probe=probe).hidden
