"""CTranslate2's TransformerSpec mapped onto this project's model (docs/ctranslate2.md): which variable is which
parameter, what its shape must be, and what the spec's flags say; every variable's name and shape checked against
the model the spec describes before any weight is read, and what this format cannot hold refused naming it.

CTranslate2's conventions, as its layers compute them (src/layers/transformer.cc, common.cc): embeddings times
sqrt(d) unless `scale_embeddings` says otherwise; a stored position table added from position 0, or, where none is
stored, sinusoids in halves with tensor2tensor's frequencies from position 1; pre-norm (a final norm on each side)
or post-norm; self-attention's query, key and value projections fused in one matrix (cross-attention's key and value
in one); layer norms with eps 1e-5 unless config.json's `layer_norm_epsilon` says; a decoder started from
`decoder_start_token`, or from a zero vector (`start_from_zero_embedding`, Marian's)."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import BinaryIO

import torch

from transformer.io.checkpoint import CheckpointError
from transformer.model.config import MAX_DIMENSION, shown
from transformer.model.embeddings import sinusoidal_table
from transformer.toolkits.ctranslate2.binary import ModelBin, read_scalar, read_weight

SPEC = "TransformerSpec"
ACTIVATIONS = {0: "relu", 1: "gelu_tanh", 2: "swish", 3: "gelu"}
# Flags read (their values checked where they matter); any other name is a parameter or refused.
FLAGS = {
    "num_heads",
    "pre_norm",
    "activation",
    "embeddings_merge",
    "scale_embeddings",
    "start_from_zero_embedding",
    "alignment_layer",
    "alignment_heads",
    "multi_query_attention",
    "alibi",
    "alibi_use_positive_positions",
    "scale_alibi",
}
# What a variable of another spec's option is, named in the refusal.
REFUSED = {
    "relative_position_keys": "relative positions (Shaw's)",
    "relative_attention_bias": "T5's relative attention bias",
    "relative_asymmetric_position_keys": "asymmetric relative positions",
    "rotary_dim": "rotary positions",
    "sliding_window": "a sliding window",
    "q_norm": "query and key norms",
    "v_norm": "value norms",
    "project_in": "projections into and out of the decoder",
    "linear_0_noact": "a gated feed-forward layer",
    "queries_scale": "a queries' scale of its own",
    "scale_outputs": "scaled outputs",
    "embeddings_1": "source features (more than one source embedding)",
    "shared_layer_norm": "parallel residual layers",
    "input_layer_norm": "parallel residual layers",
    "pre_feedforward_layer_norm": "layer norms before and after each block",
    "final_logit_softcapping": "soft-capped logits",
    "weight_zero": "AWQ quantization",
    "layer_norm_use_residual": "RMS norms",
}
LAYER = re.compile(
    r"(encoder|decoder)/layer_(\d{1,4})/(self_attention|attention|ffn)/(linear_[012]|layer_norm)/"
    r"(weight|bias|gamma|beta)"
)
SIDE = re.compile(r"(encoder|decoder)/(layer_norm|layernorm_embedding)/(gamma|beta)")
EMBEDDINGS = {
    "encoder": ("encoder/embeddings_0/weight", "encoder/embeddings/weight"),
    "decoder": ("decoder/embeddings/weight",),
}
TARGET_EMBEDDING, OUTPUT = "decoder/embeddings/weight", "decoder/projection/weight"
NORM_LEAVES = {"gamma": "weight", "beta": "bias"}
BLOCK_NORMS = {
    ("encoder", "self_attention"): "attn_block",
    ("encoder", "ffn"): "ff_block",
    ("decoder", "self_attention"): "self_block",
    ("decoder", "attention"): "cross_block",
    ("decoder", "ffn"): "ff_block",
}


@dataclass(frozen=True)
class Shape:
    """The sizes a spec's variables are checked against: the width, the feed-forward's, the vocabularies'."""

    d_model: int
    d_ff: int
    source_vocabulary: int
    target_vocabulary: int


def check_spec(index: ModelBin) -> None:
    """CheckpointError unless the file is a sequence-to-sequence Transformer's spec, naming what else it is."""
    if index.spec != SPEC:
        what = {"TransformerDecoderModelSpec": "a language model (a decoder alone)", "WhisperSpec": "Whisper"}
        raise CheckpointError(
            f"{index.path.name} holds CTranslate2's {shown(index.spec, 40)}"
            f"{f' ({what[index.spec]})' if index.spec in what else ''}: the encoder-decoder TransformerSpec is read"
        )
    for name in sorted(index.names()):
        leaf = name.rsplit("/", 1)[-1]
        parts = set(name.split("/"))
        refused = next((what for key, what in REFUSED.items() if key in parts or leaf == key), None)
        if refused:
            raise CheckpointError(f"this CTranslate2 model has {refused} ({shown(name, 60)}), which is not read")


def spec_shape(index: ModelBin) -> Shape:
    """The widths the spec's embeddings and first feed-forward layer declare."""
    decoder = _variable(index, "decoder/embeddings/weight")
    encoder = _variable(index, *EMBEDDINGS["encoder"])
    inner = _variable(index, "encoder/layer_0/ffn/linear_0/weight")
    if len(decoder.shape) != 2 or len(encoder.shape) != 2 or len(inner.shape) != 2:
        raise CheckpointError(f"{index.path.name}: its embeddings or feed-forward weights are not matrices")
    shape = Shape(decoder.shape[1], inner.shape[0], encoder.shape[0], decoder.shape[0])
    if not all(1 <= size <= MAX_DIMENSION * 16 for size in vars(shape).values()):
        raise CheckpointError(f"{index.path.name}: sizes {shown(list(vars(shape).values()))} are not a model's")
    return shape


def check_shapes(index: ModelBin, shape: Shape) -> None:
    """Every variable named as a part of the spec and of the shape that part has: checked on the index, before any
    weight is read (a crafted file's 4-billion-row "bias" is refused unread)."""
    for name, variable in index.variables.items():
        expected = expected_shape(name, shape)
        if expected is None:
            raise CheckpointError(
                f"{index.path.name}: unexpected variable {shown(name, 80)}, not a part of the Transformer read here"
            )
        if expected != "any" and variable.shape != expected:
            raise CheckpointError(
                f"{index.path.name}: {shown(name, 80)} has shape {list(variable.shape)}, the spec's is {list(expected)}"
            )


def expected_shape(name: str, shape: Shape) -> tuple[int, ...] | str | None:
    """A variable's shape in the spec of these sizes ("any" for a position table or a flag; None: not a part)."""
    d, ff = shape.d_model, shape.d_ff
    side, _, leaf = name.partition("/")
    if leaf in FLAGS:
        return ()
    if leaf.startswith("position_encodings/encodings"):
        return "any"
    if name.endswith("_scale"):  # one per row, or one in all (int16): read_weight checks which
        return None if expected_shape(name.removesuffix("_scale"), shape) in (None, "any") else "any"
    if leaf.endswith("multiply_by_sqrt_depth"):
        return ()
    vocabulary = shape.source_vocabulary if side == "encoder" else shape.target_vocabulary
    if name in (*EMBEDDINGS["encoder"], *EMBEDDINGS["decoder"], "decoder/projection/weight"):
        return (vocabulary, d)
    if name == "decoder/projection/bias":
        return (vocabulary,)
    if SIDE.fullmatch(name):
        return (d,)
    match = LAYER.fullmatch(name)
    if not match:
        return None
    sublayer, part, leaf = match.group(3), match.group(4), match.group(5)
    if part == "layer_norm":
        return (d,) if leaf in NORM_LEAVES else None
    rows, columns = _linear(sublayer, part, d, ff)
    return (rows, columns) if leaf == "weight" else (rows,) if leaf == "bias" else None


def _linear(sublayer: str, part: str, d: int, ff: int) -> tuple[int, int]:
    """A linear layer's (out, in): self-attention's linear_0 the fused query, key and value, cross-attention's
    linear_1 the fused key and value."""
    if sublayer == "ffn":
        return {"linear_0": (ff, d), "linear_1": (d, ff)}.get(part, (0, 0))
    fused = {"self_attention": {"linear_0": 3 * d, "linear_1": d}, "attention": {"linear_0": d, "linear_1": 2 * d}}
    return fused[sublayer].get(part, d if sublayer == "attention" and part == "linear_2" else 0), d


def layer_counts(index: ModelBin) -> tuple[int, int]:
    """The encoder's and the decoder's layers, counted from the variables' names."""
    found: dict[str, set[int]] = {"encoder": set(), "decoder": set()}
    for name in index.names():
        if match := LAYER.fullmatch(name):
            found[match.group(1)].add(int(match.group(2)))
    for side, layers in found.items():
        if not layers or layers != set(range(len(layers))):
            raise CheckpointError(f"{index.path.name}: its {side} layers are not numbered 0 to N-1: not a whole model")
    return len(found["encoder"]), len(found["decoder"])


def encoder_embedding(index: ModelBin) -> str:
    """The name the file gives the source's embedding (`embeddings_0`, or `embeddings` in older specs)."""
    return next((name for name in EMBEDDINGS["encoder"] if index.find(name) is not None), EMBEDDINGS["encoder"][0])


def _variable(index: ModelBin, *names: str):  # noqa: ANN202 (a Variable)
    for name in names:
        if (found := index.find(name)) is not None:
            return found
    raise CheckpointError(f"{index.path.name} lacks {names[0]}: not a whole CTranslate2 Transformer")


def flags(file: BinaryIO, index: ModelBin, d_model: int) -> dict[str, object]:
    """The spec's flags as this project's config fields; CheckpointError naming a flag this format cannot hold."""

    def both(flag: str) -> set[float]:
        return {read_scalar(file, index, f"{side}/{flag}", -1.0) for side in ("encoder", "decoder")} - {-1.0}

    heads, activations, pre_norm = both("num_heads"), both("activation"), both("pre_norm")
    refused = [
        what
        for flag, what in (("alibi", "ALiBi"), ("multi_query_attention", "multi-query attention"))
        if 1.0 in both(flag)
    ]
    if len(heads) > 1 or len(pre_norm) > 1:
        refused.append("an encoder and a decoder of different heads or norm placement")
    if len(activations) > 1 or not activations <= set(ACTIVATIONS):
        refused.append(f"the activation {shown(sorted(activations), 20)} (0 to 3, one for both sides, are read)")
    scales = {_embedding_scale(file, index, side, d_model) for side in ("encoder", "decoder")}
    if len(scales) > 1 or None in scales:
        refused.append("embeddings scaled by other than sqrt(d) or 1")
    if refused:
        raise CheckpointError(f"this CTranslate2 model has {', '.join(refused)}, which this format cannot hold")
    return {
        "n_heads": int(heads.pop()) if heads else 8,  # CTranslate2's default
        "norm_first": pre_norm != {0.0},
        "activation": ACTIVATIONS[int(activations.pop())] if activations else "relu",
        "scale_embedding": scales.pop(),
        "zero_start": read_scalar(file, index, "decoder/start_from_zero_embedding", 0.0) == 1.0,
    }


def _embedding_scale(file: BinaryIO, index: ModelBin, side: str, d_model: int) -> bool | None:
    """Whether a side's embeddings are multiplied by sqrt(d), as CTranslate2 decides (build_embeddings_scale): a flag
    (int8), or the scale itself (1: none); absent, sqrt(d). None for another scale."""
    names = [f"{side}/scale_embeddings", *(f"{e.rsplit('/', 1)[0]}/multiply_by_sqrt_depth" for e in EMBEDDINGS[side])]
    found = next((name for name in names if index.find(name) is not None), None)
    if found is None:
        return True
    value = read_scalar(file, index, found, 1.0)
    if index.find(found).type_id == 1:  # type: ignore[union-attr]
        return value != 0
    if value == 1.0:
        return False
    return True if math.isclose(value, math.sqrt(d_model), rel_tol=1e-6) else None


def positions(file: BinaryIO, index: ModelBin, d_model: int) -> dict[str, object]:
    """The position encodings as config fields: none stored, CTranslate2's own sinusoids (halves, tensor2tensor's
    frequencies, from position 1); a stored table, the sinusoids it equals, or else the table itself (learned)."""
    names = [f"{side}/position_encodings/encodings" for side in ("encoder", "decoder")]
    stored = [index.find(name) for name in names]
    if stored == [None, None]:
        return {"sinusoid_layout": "halves", "sinusoid_frequencies": "tensor2tensor", "position_offset": 1}
    if None in stored or any(
        len(v.shape) != 2 or v.shape[1] != d_model or not 1 <= v.shape[0] <= 1 << 16 for v in stored
    ):  # type: ignore[union-attr]
        raise CheckpointError(f"{index.path.name}: its position tables are not one (rows, {d_model}) table a side")
    first = read_weight(file, index, names[0])
    tables = [first, first if index.same(*names) else read_weight(file, index, names[1])]  # an alias read once
    rows = min(len(table) for table in tables)
    for layout in ("interleaved", "halves"):
        for frequencies in ("paper", "tensor2tensor"):
            made = sinusoidal_table(min(rows, 512), d_model, layout, 0, frequencies)
            if all(torch.allclose(table[: len(made)], made, atol=1e-4) for table in tables):
                return {"sinusoid_layout": layout, "sinusoid_frequencies": frequencies, "max_len": rows}
    return {"positional": "learned", "max_len": rows, "tables": tables}


def layer_state(file: BinaryIO, index: ModelBin, d_model: int) -> dict[str, torch.Tensor]:
    """Every layer's weights under this project's names, fused projections split, missing biases as zeros."""
    state: dict[str, torch.Tensor] = {}
    for name in sorted(index.variables):
        match = LAYER.fullmatch(name)
        if not match or match.group(5) not in ("weight", "gamma"):
            continue
        side, number, sublayer, part, _ = match.groups()
        prefix = f"{side}_layers.{number}"
        if part == "layer_norm":
            norm = f"{prefix}.{BLOCK_NORMS[side, sublayer]}.norm"
            state[f"{norm}.weight"] = read_weight(file, index, name)
            state[f"{norm}.bias"] = _beta(file, index, name.removesuffix("gamma") + "beta")
            continue
        weight = read_weight(file, index, name)
        bias_name = name.removesuffix("weight") + "bias"
        bias = read_weight(file, index, bias_name) if index.find(bias_name) else torch.zeros(len(weight))
        for ours, rows in _parts(sublayer, part, d_model):
            state[f"{prefix}.{ours}.weight"] = weight[rows]
            state[f"{prefix}.{ours}.bias"] = bias[rows]
    for name in index.names():
        if match := SIDE.fullmatch(name):
            side, which, leaf = match.groups()
            ours = f"{side}_norm" if which == "layer_norm" else f"{'src' if side == 'encoder' else 'tgt'}_position.norm"
            if leaf == "gamma":
                state[f"{ours}.weight"] = read_weight(file, index, name)
                state[f"{ours}.bias"] = _beta(file, index, name.removesuffix("gamma") + "beta")
    return state


def _beta(file: BinaryIO, index: ModelBin, name: str) -> torch.Tensor:
    if index.find(name) is None:
        raise CheckpointError(f"this CTranslate2 model has RMS norms ({shown(name, 60)} absent), which are not read")
    return read_weight(file, index, name)


def _parts(sublayer: str, part: str, d: int) -> list[tuple[str, slice]]:
    """This project's layers a CTranslate2 linear layer holds, and the rows of each."""
    whole = slice(None)
    if sublayer == "ffn":
        return [("feed_forward." + {"linear_0": "inner", "linear_1": "outer"}[part], whole)]
    attention = "self_attn" if sublayer == "self_attention" else "cross_attn"
    if sublayer == "self_attention" and part == "linear_0":
        named = ["q_proj", "k_proj", "v_proj"]
    elif sublayer == "attention" and part == "linear_1":
        named = ["k_proj", "v_proj"]
    else:
        last = {"self_attention": "linear_1", "attention": "linear_2"}[sublayer] == part
        named = ["out_proj" if last else "q_proj"]
    return [(f"{attention}.{ours}", slice(i * d, (i + 1) * d)) for i, ours in enumerate(named)]
