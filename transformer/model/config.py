"""The model configuration: one frozen dataclass that every module builds from."""

from __future__ import annotations

import dataclasses
import json
import math
import reprlib
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal

# Refused before any memory is allocated: a checkpoint's config is untrusted input.
# Sinusoids are built ahead for this many positions at most; later ones are computed when a sequence reaches
# them. A config may claim a million positions (2^20 x d_model floats, 5x that while built in float64): a few
# hundred bytes of header must not cost gigabytes.
PRECOMPUTED_POSITIONS = 1024
# Parameters plus the sinusoidal position tables, what building the model allocates: a bound on absurd configs (64 GB
# of float32), above NLLB-200-3.3B's 3.35 billion. What fits is the machine's memory to say, checked where a file or a
# directory is opened (io.checkpoint.file_limit, hugging_face.files.hf_weights).
MAX_ELEMENTS = 16_000_000_000
MAX_DIMENSION = 65_536


def _brief_repr() -> reprlib.Repr:
    brief = reprlib.Repr()
    brief.maxlevel, brief.maxlist, brief.maxtuple, brief.maxdict, brief.maxset = 3, 6, 6, 4, 6
    return brief


BRIEF = _brief_repr()  # a container's repr a few items wide and deep, however many it holds and shares


def shown(value: object, limit: int = 60) -> str:
    """How a message quotes a value it was given: its repr, cut to `limit` characters (a 4,000-digit number made a
    4,077-character line), a container's made a few items wide and deep first (a list of 4^16 shared leaves would
    be written out whole) and an integer past Python's 4,300 digits said by its size."""
    if isinstance(value, int) and value.bit_length() > 14_000:
        return f"an integer of about {int(value.bit_length() * 0.30103):,} digits"
    text = BRIEF.repr(value) if isinstance(value, (list, tuple, dict, set, frozenset)) else repr(value)
    return text if len(text) <= limit else f"{text[: limit - 3]}..."


class ConfigError(ValueError):
    """A configuration that cannot describe a working model."""


def _has_type(value: Any, kind: Any) -> bool:
    """Whether an untrusted JSON value is of a field's type: true is not an int, "0.1" is not a float."""
    if typing.get_origin(kind) is Literal:
        return value in typing.get_args(kind)
    if isinstance(kind, types.UnionType):
        return any(_has_type(value, option) for option in typing.get_args(kind))
    if kind is type(None):
        return value is None
    if kind is float:
        return isinstance(value, int | float) and not isinstance(value, bool) and math.isfinite(value)
    return isinstance(value, kind) and (kind is bool or not isinstance(value, bool))


def _type_name(kind: Any) -> str:
    if typing.get_origin(kind) is Literal:
        return " or ".join(repr(choice) for choice in typing.get_args(kind))
    if isinstance(kind, types.UnionType):
        return " or ".join(_type_name(option) for option in typing.get_args(kind))
    return {int: "an integer", float: "a number", bool: "true or false", type(None): "null"}[kind]


@dataclass(frozen=True)
class TransformerConfig:
    """Sizes and choices of one encoder-decoder Transformer (Vaswani et al. 2017)."""

    src_vocab_size: int  # source vocabulary, including the special pieces
    tgt_vocab_size: int  # target vocabulary (equal to the source one when tied)
    d_model: int = 256  # width of every residual stream
    n_heads: int = 8  # attention heads per layer; d_model must divide by it
    d_ff: int = 1024  # inner width of the position-wise feed-forward layer
    n_encoder_layers: int = 3
    n_decoder_layers: int = 3
    dropout: float = 0.1
    max_len: int = 256  # longest sequence the positional encoding covers
    pad_id: int = 0
    unk_id: int = 1
    bos_id: int = 2
    eos_id: int = 3
    norm_first: bool = False  # False: the paper's post-norm; True: pre-norm
    tie_embeddings: bool = True  # share source, target embeddings and the generator
    # "relative": no position added; a learned bias per head and relative-distance bucket added to the attention
    # scores (T5's), on self-attention only
    positional: Literal["sinusoidal", "learned", "relative"] = "sinusoidal"
    # of the feed-forward layer: the paper's ReLU, GELU, GELU's tanh approximation (T5's gelu_new), SiLU
    activation: Literal["relu", "gelu", "gelu_tanh", "swish"] = "relu"
    # Conventions that differ between model families (FORMAT.md), each defaulting to the paper's:
    layer_norm_eps: float = 1e-5
    scale_embedding: bool = True  # token embeddings times sqrt(d_model) (section 3.4)
    sinusoid_layout: Literal["interleaved", "halves"] = "interleaved"  # sin/cos alternating, or sin half, cos half
    decoder_start_id: int | None = None  # the decoder's first input token; None: bos_id (Marian starts from pad)
    # v3: the index of a sequence's first position in the position table (M2M100 and BART start at 2)
    position_offset: int = 0
    # v3: sinusoid frequencies 10000^(-2i/d) (the paper's) or 10000^(-i/(k-1)) with k = ceil(d/2) (tensor2tensor's)
    sinusoid_frequencies: Literal["paper", "tensor2tensor"] = "paper"
    # v4: a layer norm on each side's embedded, position-encoded input (BART's and mBART's layernorm_embedding)
    embedding_norm: bool = False
    # v5, T5's conventions: RMS norms (a scale, no mean and no bias), linear layers without biases, scores not divided
    # by sqrt(d_head), a gated feed-forward layer (act(x W1) * (x W_gate)) W2, the decoder's output times
    # d_model^-0.5 before the generator, and the relative positions' buckets
    norm: Literal["layer", "rms"] = "layer"
    bias: bool = True
    attention_scale: bool = True
    feed_forward: Literal["plain", "gated"] = "plain"
    scale_output: bool = False
    relative_buckets: int = 32
    relative_max_distance: int = 128

    def __post_init__(self) -> None:
        for name, kind in typing.get_type_hints(TransformerConfig).items():
            if not _has_type(getattr(self, name), kind):
                raise ConfigError(f"{name} must be {_type_name(kind)}, got {shown(getattr(self, name))}")
        for name in ("src_vocab_size", "tgt_vocab_size", "d_model", "n_heads", "d_ff", "max_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= MAX_DIMENSION * 16:
                raise ConfigError(f"{name} must be a positive integer of sane size, got {shown(value)}")
        for name in ("n_encoder_layers", "n_decoder_layers"):
            value = getattr(self, name)
            if not isinstance(value, int) or not 1 <= value <= 128:
                raise ConfigError(f"{name} must be an integer from 1 to 128, got {shown(value)}")
        if self.d_model % self.n_heads:
            raise ConfigError(f"d_model ({self.d_model}) must be divisible by n_heads ({self.n_heads})")
        if not 0.0 <= self.dropout < 1.0:
            raise ConfigError(f"dropout must be in [0, 1), got {shown(self.dropout)}")
        if not 0.0 < self.layer_norm_eps < 1.0:
            raise ConfigError(f"layer_norm_eps must be in (0, 1), got {shown(self.layer_norm_eps)}")
        if not 0 <= self.position_offset <= MAX_DIMENSION:
            raise ConfigError(f"position_offset must be from 0 to {MAX_DIMENSION}, got {shown(self.position_offset)}")
        # Every bucket formula's logarithm needs max_distance past the exact buckets (relative_buckets // 2).
        if (
            not 4 <= self.relative_buckets <= 1024
            or not self.relative_buckets // 2 < self.relative_max_distance <= 2**20
        ):
            raise ConfigError(
                "relative_buckets must be from 4 to 1024 and relative_max_distance above relative_buckets // 2 (at "
                f"most 2^20), got {shown(self.relative_buckets)} and {shown(self.relative_max_distance)}"
            )
        if self.sinusoid_frequencies == "tensor2tensor" and self.d_model < 4:
            raise ConfigError("tensor2tensor sinusoids need d_model of at least 4")
        if not 0 <= self.start_id < self.tgt_vocab_size:
            raise ConfigError(f"decoder_start_id must be inside the target vocabulary, got {shown(self.start_id)}")
        if self.tie_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ConfigError("tie_embeddings needs one joint vocabulary (src_vocab_size == tgt_vocab_size)")
        specials = (self.pad_id, self.unk_id, self.bos_id, self.eos_id)
        distinct = len({self.pad_id, self.unk_id, self.eos_id}) == 3 and self.bos_id not in (self.unk_id, self.eos_id)
        if not distinct or not all(0 <= i < min(self.src_vocab_size, self.tgt_vocab_size) for i in specials):
            raise ConfigError(
                f"pad/unk/bos/eos ids must be distinct (bos may be pad, as in Marian) and inside the vocabularies, "
                f"got {specials}"
            )
        if self.element_count() > MAX_ELEMENTS:
            raise ConfigError(
                f"config describes {self.element_count():,} parameters and position values, "
                f"over the limit of {MAX_ELEMENTS:,}"
            )

    @property
    def start_id(self) -> int:
        """The token the decoder input starts with."""
        return self.bos_id if self.decoder_start_id is None else self.decoder_start_id

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def parameter_shapes(self) -> dict[str, tuple[int, ...]]:
        """Every parameter's state-dict name and shape (tied ones once), derived without building the model.

        A checkpoint's tensors are checked against it before anything is allocated; a test holds it equal
        to the built model's state.
        """
        d = self.d_model
        shapes: dict[str, tuple[int, ...]] = {}

        def linear(name: str, fan_in: int, fan_out: int) -> None:
            shapes[f"{name}.weight"] = (fan_out, fan_in)
            if self.bias:
                shapes[f"{name}.bias"] = (fan_out,)

        def norm(name: str) -> None:
            shapes[f"{name}.weight"] = (d,)
            if self.norm == "layer":
                shapes[f"{name}.bias"] = (d,)

        def block(prefix: str, attentions: tuple[str, ...], norms: tuple[str, ...]) -> None:
            for attention in attentions:
                for projection in ("q_proj", "k_proj", "v_proj", "out_proj"):
                    linear(f"{prefix}.{attention}.{projection}", d, d)
            linear(f"{prefix}.feed_forward.inner", d, self.d_ff)
            if self.feed_forward == "gated":
                linear(f"{prefix}.feed_forward.gate", d, self.d_ff)
            linear(f"{prefix}.feed_forward.outer", self.d_ff, d)
            for name in norms:
                norm(f"{prefix}.{name}.norm")

        shapes["src_embed.lookup.weight"] = (self.src_vocab_size, d)
        if not self.tie_embeddings:
            shapes["tgt_embed.lookup.weight"] = (self.tgt_vocab_size, d)
        if self.positional == "learned":
            shapes["src_position.table"] = shapes["tgt_position.table"] = (self.position_offset + self.max_len, d)
        if self.positional == "relative":
            shapes["src_position.relative_bias"] = shapes["tgt_position.relative_bias"] = (
                self.relative_buckets,
                self.n_heads,
            )
        if self.embedding_norm:
            norm("src_position.norm")
            norm("tgt_position.norm")
        for i in range(self.n_encoder_layers):
            block(f"encoder_layers.{i}", ("self_attn",), ("attn_block", "ff_block"))
        for i in range(self.n_decoder_layers):
            block(f"decoder_layers.{i}", ("self_attn", "cross_attn"), ("self_block", "cross_block", "ff_block"))
        if self.norm_first:
            norm("encoder_norm")
            norm("decoder_norm")
        if not self.tie_embeddings:
            shapes["generator.weight"] = (self.tgt_vocab_size, d)
        if self.bias:
            shapes["generator.bias"] = (self.tgt_vocab_size,)
        return shapes

    def parameter_count(self) -> int:
        """Parameters this config describes, computed without building the model."""
        return sum(math.prod(shape) for shape in self.parameter_shapes().values())

    def element_count(self) -> int:
        """Numbers that building this model allocates: its parameters plus the fixed sinusoid tables (buffers)."""
        rows = min(self.position_offset + self.max_len, PRECOMPUTED_POSITIONS)
        sinusoids = 2 * rows * self.d_model if self.positional == "sinusoidal" else 0
        return self.parameter_count() + sinusoids

    def same_model(self, other: TransformerConfig) -> bool:
        """Whether two configs describe the same network: dropout is a training setting, so a run continued with
        another dropout (epochs on a GPU with 0.1 after CPU epochs without) is still one model."""
        return dataclasses.replace(self, dropout=other.dropout) == other

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_dict(cls, values: dict[str, Any]) -> TransformerConfig:
        """Builds a config from untrusted values, naming unknown or missing fields."""
        if not isinstance(values, dict):
            raise ConfigError(f"config must be a JSON object, got {type(values).__name__}")
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(values) - known)
        if unknown:
            named = ", ".join(shown(name, 40) for name in unknown[:5]) + (", ..." if len(unknown) > 5 else "")
            raise ConfigError(f"unknown config fields: {named}")  # quoted: a name may hold a line break
        try:
            return cls(**values)
        except TypeError as error:
            raise ConfigError(f"incomplete config: {error}") from None

    @classmethod
    def from_json(cls, text: str) -> TransformerConfig:
        try:
            values = json.loads(text)
        except (ValueError, RecursionError) as error:  # nested thousands deep, or a 5,000-digit number
            raise ConfigError(f"config is not valid JSON: {str(error)[:100]}") from None
        return cls.from_dict(values)
