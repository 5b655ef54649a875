"""eole translation models read in place from the folder eole's model saver leaves (docs/eole.md).

A folder holds `config.json` (the options set for the run: what it leaves out is eole 0.6.4's default, `DEFAULTS`),
`vocab.json` (the source's and the target's pieces, their special tokens, the decoder's start token), the weights
(`model.00.safetensors`) and the SentencePiece model its transform names (`spm.model`). eole's transformer is pre-norm
with a final norm on each side, its linear layers without biases unless asked (the generator has one), sinusoids
(interleaved with the paper's frequencies, or in halves with tensor2tensor's) added to embeddings times sqrt(d) from
position 0, the decoder started from `<s>`; and **no `</s>` ends the source** (FORMAT.md's `source_eos`). Its padding
token, `<blank>`, is named `<pad>` here; the two vocabularies are read as one (`joint_vocabulary`).
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch

from transformer.hugging_face.files import (
    MAX_TOKENIZER_BYTES,
    read_bounded,
    read_json,
    regular_file,
    safetensors_weights,
)
from transformer.hugging_face.seq2seq import checkpoint_from_state
from transformer.io.checkpoint import Checkpoint, CheckpointError
from transformer.model.config import ConfigError, TransformerConfig, shown
from transformer.text.tokenizer import Tokenizer, TokenizerError
from transformer.toolkits.languages import listing, pair_named
from transformer.toolkits.vocabulary import joint_embeddings, joint_vocabulary

# eole 0.6.4's defaults (eole/config/models.py) of the options read: what a config.json leaves out.
DEFAULTS: dict[str, Any] = {
    "encoder_type": "rnn",
    "decoder_type": "rnn",
    "layer_norm": "standard",
    "norm_eps": 1e-5,
    "mlp_activation_fn": "relu",
    "position_encoding_type": "SinusoidalInterleaved",
    "add_qkvbias": False,
    "add_key_bias": None,
    "add_final_linear_bias": False,
    "add_ffnbias": False,
    "heads_kv": None,
    "head_dim": None,
    "attn_scaling": None,
    "encoder_layer_style": "standard",
    "final_encoder_layer_norm": True,
    "with_cross_attn": False,
    "heads": 8,
    "transformer_ff": 2048,
}
# Options whose model this format cannot hold (yet), each with the value that is no change and what it is.
REFUSED_OPTIONS = {
    "parallel_residual": (False, "parallel residual layers"),
    "shared_layer_norm": (False, "a shared layer norm"),
    "ffn_layernorm": (False, "norms around the feed-forward layer"),
    "query_norm": (False, "query norms"),
    "key_norm": (False, "key norms"),
    "value_norm": (False, "value norms"),
    "q_gating": (False, "gated queries"),
    "sliding_window": (0, "sliding-window attention"),
    "relative_positions_buckets": (0, "relative position buckets"),
    "num_experts": (0, "a mixture of experts"),
    "layer_types": (None, "layers of several kinds"),
    "num_mtp_heads": (0, "multi-token prediction heads"),
}
MODEL_REFUSED = {"add_estimator": (False, "an estimator head"), "generator_function": ("softmax", "sparsemax")}
EMBEDDING_REFUSED = {
    "normalize": (False, "embeddings scaled again"),
    "embedding_layer_norm": (False, "a layer norm on the embeddings"),
    "position_shift": (0, "shifted positions"),
    "embedding_type": ("standard", "RoBERTa's embeddings"),
}
SAME_ON_BOTH_SIDES = ("hidden_size", "heads", "transformer_ff", "mlp_activation_fn", "layer_norm", "norm_eps")
SAME_ON_BOTH_SIDES += ("add_qkvbias", "add_ffnbias", "add_final_linear_bias", "position_encoding_type")
POSITIONS = {"SinusoidalInterleaved": ("interleaved", "paper"), "SinusoidalConcat": ("halves", "tensor2tensor")}
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu-tanh": "gelu_tanh", "silu": "swish"}
NORMS = ("standard", "standardFP32")
TRANSFORMS_READ = {"sentencepiece", "filtertoolong"}  # the second acts in training only
MAX_POSITIONS = 1024  # sinusoids have no length of their own: the longest input they are laid out for here
DEFAULT_VOCABULARY_SIZE = 32768  # eole's src_vocab_size and tgt_vocab_size where config.json leaves them out
MAX_VOCABULARY_SIZE = 1 << 22
MAX_PIECE_BYTES = 256  # a piece as vocab.json writes it: SentencePiece's longest, escaped and quoted, and room to spare
VOCABULARY_ROOM_BYTES = 1 << 16  # vocab.json's specials and padding pieces beyond the declared sizes
COUNTS = ("hidden_size", "heads", "transformer_ff", "layers", "src_word_vec_size", "tgt_word_vec_size")
MAX_COUNT = 1 << 31
SPECIALS = {"pad_token": "<pad>", "unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"}  # eole's: ours
SHARD = re.compile(r"model\.\d{2}\.safetensors")
PROJECTIONS = {"linear_query": "q_proj", "linear_keys": "k_proj", "linear_values": "v_proj", "final_linear": "out_proj"}
FEED_FORWARD = {"mlp.gate_up_proj": "feed_forward.inner", "mlp.down_proj": "feed_forward.outer"}
LAYER_PARTS = {
    "encoder": {"input_layernorm": "attn_block.norm", "post_attention_layernorm": "ff_block.norm", **FEED_FORWARD}
    | {f"self_attn.{theirs}": f"self_attn.{ours}" for theirs, ours in PROJECTIONS.items()},
    "decoder": {"input_layernorm": "self_block.norm", "precontext_layernorm": "cross_block.norm"}
    | {"post_attention_layernorm": "ff_block.norm", **FEED_FORWARD}
    | {f"self_attn.{theirs}": f"self_attn.{ours}" for theirs, ours in PROJECTIONS.items()}
    | {f"context_attn.{theirs}": f"cross_attn.{ours}" for theirs, ours in PROJECTIONS.items()},
}
LAYER_TENSOR = re.compile(r"(encoder|decoder)\.transformer_layers\.(\d+)\.(.+)\.(weight|bias)")
FIXED_TABLES = re.compile(r"(src|tgt)_emb\.pe\.pe")  # sinusoids eole saves and makes again: not read
EMBEDDING_TENSORS = {"src_emb.embeddings.weight", "tgt_emb.embeddings.weight", "generator.weight", "generator.bias"}


def side_options(model: dict[str, Any], side: str) -> dict[str, Any]:
    """One side's options: eole's defaults, under the model's options, under the side's own."""
    own = model.get(side)
    if not isinstance(own, dict):
        raise CheckpointError(f"config.json's model has no {side}: not an encoder-decoder model")
    return DEFAULTS | {k: v for k, v in model.items() if not isinstance(v, dict)} | own


def refusals(model: dict[str, Any], encoder: dict[str, Any], decoder: dict[str, Any]) -> list[str]:
    """What the options describe that this format cannot hold, each named."""
    found = (
        [] if model.get("architecture") == "transformer" else [f"the architecture {shown(model.get('architecture'))}"]
    )
    if (encoder["encoder_type"], decoder["decoder_type"]) != ("transformer", "transformer"):
        found.append(f"a {shown(encoder['encoder_type'])} encoder and a {shown(decoder['decoder_type'])} decoder")
    for options in (encoder, decoder):
        found += [what for name, (off, what) in REFUSED_OPTIONS.items() if options.get(name, off) != off]
    found += [what for name, (off, what) in MODEL_REFUSED.items() if model.get(name, off) != off]
    embeddings = model.get("embeddings") if isinstance(model.get("embeddings"), dict) else {}
    found += [what for name, (off, what) in EMBEDDING_REFUSED.items() if embeddings.get(name, off) != off]
    for name in SAME_ON_BOTH_SIDES:
        if encoder.get(name) != decoder.get(name):
            found.append(f"encoder and decoder of different {name}")
    if decoder["position_encoding_type"] not in POSITIONS:
        found.append(f"{shown(decoder['position_encoding_type'])} positions")
    if decoder["mlp_activation_fn"] not in ACTIVATIONS:
        found.append(f"the activation {shown(decoder['mlp_activation_fn'])}")
    if decoder["layer_norm"] not in NORMS:
        found.append(f"{shown(decoder['layer_norm'])} norms")
    if encoder["encoder_layer_style"] != "standard" or not encoder["final_encoder_layer_norm"]:
        found.append("an encoder other than pre-norm with a final norm")
    if decoder["heads_kv"] not in (None, decoder["heads"]):
        found.append("grouped-query attention")
    if decoder["head_dim"] is not None or decoder["attn_scaling"] is not None:
        found.append("heads of a width or scale of their own")
    if decoder["add_key_bias"] not in (None, decoder["add_qkvbias"]):
        found.append("keys biased unlike queries")
    if not decoder["with_cross_attn"]:
        found.append("a decoder without cross-attention")
    for size in ("src_word_vec_size", "tgt_word_vec_size"):
        if embeddings.get(size, decoder["hidden_size"]) != decoder["hidden_size"]:
            found.append("embeddings of another width than the layers'")
    return found


def check_numbers(encoder: dict[str, Any], decoder: dict[str, Any], embeddings: Any) -> None:
    """ConfigError naming the first size or count (COUNTS) that is not an integer from 1 to MAX_COUNT, or norm_eps
    that is not a number from 0 to 1: each checked before any is compared or used (a 4,299-digit hidden_size was
    refused as "embeddings of another width")."""
    sides = {"encoder": encoder, "decoder": decoder, "embeddings": embeddings if isinstance(embeddings, dict) else {}}
    for side, options in sides.items():
        for name in COUNTS:
            value = options.get(name, 1)
            if type(value) is not int or not 0 < value <= MAX_COUNT:
                raise ConfigError(
                    f"config.json's {side} {name} is {shown(value, 20)}, not an integer from 1 to {MAX_COUNT:,}"
                )
        epsilon = options.get("norm_eps", 0)
        if type(epsilon) not in (int, float) or not 0 <= epsilon < 1:
            raise ConfigError(f"config.json's {side} norm_eps is {shown(epsilon, 20)}, not a number from 0 to 1")


def eole_config(
    config: dict[str, Any], vocabulary_size: int, specials: dict[str, int], tied: bool
) -> TransformerConfig:
    """This project's config for an eole config.json (`tied`: one matrix for every embedding and the generator);
    ConfigError naming what this format cannot hold."""
    model = config.get("model")
    if not isinstance(model, dict):
        raise ConfigError("config.json has no model options: not an eole model")
    encoder, decoder = side_options(model, "encoder"), side_options(model, "decoder")
    check_numbers(encoder, decoder, model.get("embeddings"))
    unsupported = refusals(model, encoder, decoder)
    if unsupported:
        raise ConfigError(f"this eole model has {', '.join(dict.fromkeys(unsupported))}, which this format cannot hold")
    layout, frequencies = POSITIONS[decoder["position_encoding_type"]]
    dropout = (config.get("training") or {}).get("dropout", [0.1]) if isinstance(config.get("training"), dict) else []
    return TransformerConfig(
        src_vocab_size=vocabulary_size,
        tgt_vocab_size=vocabulary_size,
        d_model=decoder["hidden_size"],
        n_heads=decoder["heads"],
        d_ff=decoder["transformer_ff"],
        n_encoder_layers=encoder.get("layers"),
        n_decoder_layers=decoder.get("layers"),
        dropout=float(dropout[0]) if isinstance(dropout, list) and dropout else 0.1,
        max_len=MAX_POSITIONS,
        pad_id=specials["<pad>"],
        unk_id=specials["<unk>"],
        bos_id=specials["<s>"],
        eos_id=specials["</s>"],
        norm_first=True,
        tie_embeddings=tied,
        activation=ACTIVATIONS[decoder["mlp_activation_fn"]],
        layer_norm_eps=float(decoder["norm_eps"]),
        sinusoid_layout=layout,
        sinusoid_frequencies=frequencies,
        decoder_start_id=specials["start"],
    )


def read_vocabularies(directory: Path, config: dict[str, Any] | None = None) -> tuple[list[str], list[str], str]:
    """vocab.json's source and target pieces, their special tokens under this project's names (eole's `<blank>`
    padding is `<pad>` here), and the decoder's start token; a file larger than the pieces config.json declares
    (src_vocab_size, tgt_vocab_size) can hold is refused unread (3.6 million pieces took 17 s and 1 GB to parse)."""
    config = read_json(directory, "config.json") if config is None else config
    declared = [
        config.get(f"{side}_vocab_size", DEFAULT_VOCABULARY_SIZE) if isinstance(config, dict) else None
        for side in ("src", "tgt")
    ]
    if not all(type(size) is int and 0 < size <= MAX_VOCABULARY_SIZE for size in declared):
        raise CheckpointError(
            f"{directory.name}: config.json's src_vocab_size and tgt_vocab_size are {shown(declared, 40)}, not "
            f"numbers of pieces from 1 to {MAX_VOCABULARY_SIZE:,}"
        )
    limit = min(MAX_TOKENIZER_BYTES, VOCABULARY_ROOM_BYTES + MAX_PIECE_BYTES * sum(declared))
    path = regular_file(directory, "vocab.json")
    if path is not None and path.stat().st_size > limit:
        raise CheckpointError(
            f"{directory.name}: vocab.json is {path.stat().st_size / 1e6:.1f} MB, more than the {sum(declared):,} "
            "pieces config.json declares (src_vocab_size, tgt_vocab_size) can take: not read"
        )
    return vocabularies_of(read_json(directory, "vocab.json", limit), f"{directory.name}: vocab.json")


def vocabularies_of(vocab: Any, where: str) -> tuple[list[str], list[str], str]:
    """read_vocabularies of the vocabularies as eole (vocab.json) and OpenNMT-py 3.x (its checkpoint's "vocab")
    keep them: plain lists of pieces; `where` names them in a refusal."""
    sides = [vocab.get(side) if isinstance(vocab, dict) else None for side in ("src", "tgt")]
    if not all(isinstance(pieces, list) and all(isinstance(p, str) for p in pieces) for pieces in sides):
        raise CheckpointError(f"{where} holds no src and tgt lists of pieces")
    named = vocab.get("specials") if isinstance(vocab.get("specials"), dict) else {}
    theirs = {"pad_token": "<blank>", "unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"} | named
    renamed = {str(theirs[key]): ours for key, ours in SPECIALS.items()}
    source, target = ([renamed.get(piece, piece) for piece in pieces] for pieces in sides)
    for pieces, side in ((source, "src"), (target, "tgt")):
        missing = [theirs[key] for key, ours in SPECIALS.items() if ours not in pieces]
        if missing or len(set(pieces)) != len(pieces):
            what = f"lacks {', '.join(map(str, missing))}" if missing else "repeats a piece (or has one named <pad>)"
            raise CheckpointError(f"{where}'s {side} {what}")
    start = str(vocab.get("decoder_start_token", "<s>"))
    return source, target, renamed.get(start, start)


def sentencepiece_files(config: dict[str, Any], directory: Path) -> tuple[str, str]:
    """The names in the directory of the SentencePiece models the source and the target are split with (eole writes
    `${MODEL_PATH}/spm.model`; any other path is read by its file's name in the directory)."""
    transforms = config.get("transforms") or []
    others = [str(t) for t in transforms if t not in TRANSFORMS_READ] if isinstance(transforms, list) else ["?"]
    if others or "sentencepiece" not in transforms:
        named = f"the transforms {shown(', '.join(others), 60)}" if others else "no sentencepiece transform"
        raise CheckpointError(f"{directory.name}: its config names {named}; the sentencepiece transform alone is read")
    settings = (config.get("transforms_configs") or {}).get("sentencepiece") or {}
    names = tuple(Path(str(settings.get(f"{side}_subword_model", ""))).name for side in ("src", "tgt"))
    for name in names:
        if not name or regular_file(directory, name) is None:
            raise CheckpointError(f"{directory.name} lacks the SentencePiece model {shown(name, 60)}: put it beside")
    return names  # type: ignore[return-value]


def eole_state(
    weights: dict[str, torch.Tensor], config: TransformerConfig, model: dict[str, Any], source_rows: list[int]
) -> dict[str, torch.Tensor]:
    """eole's weights under this project's names, its embeddings laid out over the joint vocabulary, and zeros for
    the biases its linear layers were trained without."""
    state = {}
    for name, tensor in weights.items():
        if FIXED_TABLES.fullmatch(name) or name in EMBEDDING_TENSORS:
            continue  # the embeddings and the generator are laid out by _embeddings
        if name.endswith(".layer_scalar") and bool((tensor == 1).all()):
            continue  # Gemma's per-layer scale, 1 in every other model
        if name.startswith(("encoder.layer_norm.", "decoder.layer_norm.")):
            state[name.replace(".layer_norm", "_norm")] = tensor
            continue
        match = LAYER_TENSOR.fullmatch(name)
        ours = LAYER_PARTS[match.group(1)].get(match.group(3)) if match else None
        if ours is None:
            raise CheckpointError(f"unexpected tensor {shown(name, 80)}: not a part of the eole transformer read here")
        state[f"{match.group(1)}_layers.{match.group(2)}.{ours}.{match.group(4)}"] = tensor  # type: ignore[union-attr]
    return state | _zero_biases(config, model, state) | _embeddings(weights, config, model, source_rows)


def _zero_biases(config: TransformerConfig, model: dict[str, Any], state: dict[str, torch.Tensor]) -> dict:
    """Zeros for each bias eole's options say a linear layer has none of, as long as the file's weight beside it (a
    config.json that lies about the sizes allocates nothing: the weights' check names it after)."""
    decoder = side_options(model, "decoder")
    absent = {"q_proj", "k_proj", "v_proj"} if not decoder["add_qkvbias"] else set()
    absent |= {"out_proj"} if not decoder["add_final_linear_bias"] else set()
    absent |= {"inner", "outer"} if not decoder["add_ffnbias"] else set()
    layers = [name.removesuffix(".bias") for name in config.parameter_shapes() if name.endswith(".bias")]
    return {
        f"{layer}.bias": torch.zeros(len(state[f"{layer}.weight"]))
        for layer in layers
        if layer.split(".")[-1] in absent and f"{layer}.bias" not in state and f"{layer}.weight" in state
    }


def _embeddings(
    weights: dict[str, torch.Tensor], config: TransformerConfig, model: dict[str, Any], source_rows: list[int]
) -> dict[str, torch.Tensor]:
    """The embeddings and the generator: one matrix where eole shares both, else each over the joint vocabulary."""
    source = _matrix(weights, "src_emb.embeddings.weight")
    target = source if model.get("share_embeddings") else _matrix(weights, "tgt_emb.embeddings.weight")
    output = target if model.get("share_decoder_embeddings") else _matrix(weights, "generator.weight")
    bias = weights.get("generator.bias")
    if config.tie_embeddings:
        return {"src_embed.lookup.weight": source, "generator.bias": torch.zeros(len(source)) if bias is None else bias}
    return joint_embeddings(source, target, output, bias, source_rows)


def _matrix(weights: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    if name not in weights or weights[name].dim() != 2:
        raise CheckpointError(f"the weights lack {name}")
    return weights[name]


def import_eole(path: str | Path, device: torch.device | str = "cpu") -> Checkpoint:
    """An eole model folder (or a file in it) as a checkpoint of this project."""
    directory = Path(path).parent if Path(path).is_file() else Path(path)
    config = read_json(directory, "config.json")
    if not isinstance(config, dict):
        raise CheckpointError(f"{directory.name}: config.json is not an object")
    vocabularies = read_vocabularies(directory, config)
    split_with = sentencepiece_files(config, directory)
    shards = weight_files(directory)
    if not shards:
        raise CheckpointError(f"{directory.name} has no model.00.safetensors: eole's weights are not there")
    named = [Path(str(config.get(side, ""))).name for side in ("src_vocab", "tgt_vocab")]
    imported = {"from": "eole", "directory": directory.name, "file": ", ".join(shards)}
    weights = functools.partial(safetensors_weights, directory, shards)  # read once the config is known good
    return eole_checkpoint(config, vocabularies, split_with, weights, directory, named, imported, device)


def eole_checkpoint(
    config: dict[str, Any],
    vocabularies: tuple[list[str], list[str], str],
    split_with: tuple[str, str],
    weights: Callable[[], dict[str, torch.Tensor]],
    directory: Path,
    vocabulary_files: list[str],
    imported: dict[str, str],
    device: torch.device | str,
) -> Checkpoint:
    """The checkpoint of an eole (or OpenNMT-py, its options and weights renamed as eole's) model: its config.json,
    its vocabularies (read_vocabularies), the SentencePiece models it splits with, its weights under eole's names
    (read when the rest is known good), and what to record of where it came from."""
    source, target, start = vocabularies
    protos = [read_bounded(directory, name, MAX_TOKENIZER_BYTES) for name in split_with]
    pieces, source_rows = joint_vocabulary(source, target, source.index("<unk>"))
    model = config.get("model") if isinstance(config.get("model"), dict) else {}
    tied = bool(model.get("share_embeddings") and model.get("share_decoder_embeddings")) and source == target
    try:
        tokenizer = Tokenizer(protos[0], None if protos[1] == protos[0] else protos[1], pieces).without_source_eos()
        specials = {piece: tokenizer.piece_ids[piece] for piece in SPECIALS.values()}
        if start not in target:
            raise ConfigError(f"the decoder's start token {shown(start, 20)} is not a target piece")
        ours = eole_config(config, len(pieces), specials | {"start": target.index(start)}, tied)
    except (ConfigError, TypeError, ValueError, OverflowError, TokenizerError) as error:
        raise CheckpointError(f"{directory.name}: {str(error)[:300]}") from None
    state = eole_state(weights(), ours, model, source_rows)
    metadata = {"languages": pair_named(directory.name, *vocabulary_files), "imported": imported}
    return checkpoint_from_state(ours, state, tokenizer, metadata, device)


def is_eole_directory(path: Path) -> bool:
    """Whether path is a folder of an eole model (config.json, vocab.json, model.00.safetensors: nothing opened; a
    pipe or a dangling link among them is the reader's to refuse, naming it)."""
    return all(os.path.lexists(path / name) for name in ("config.json", "vocab.json", "model.00.safetensors"))


def is_eole_path(path: Path) -> bool:
    """Whether path is an eole model folder, or its config.json or weights given themselves."""
    named = path.name == "config.json" or SHARD.fullmatch(path.name)
    return is_eole_directory(path.parent if named and path.is_file() else path)


def weight_files(directory: Path) -> list[str]:
    """The names of the folder's weight files (model.00.safetensors, and any further shards), in order."""
    return sorted(p.name for p in directory.iterdir() if SHARD.fullmatch(p.name))


def describe_eole(directory: Path) -> str:
    """The checkpoint list's label for an eole folder, read without loading the model: its name, the language pair
    its name says, and the weights' size."""
    try:
        size = f"{sum((directory / name).stat().st_size for name in weight_files(directory)) / 1e6:.1f} MB"
    except OSError as error:  # a dangling link
        size = f"not readable: {shown(str(error), 60)}"
    return listing(directory.name, pair_named(directory.name, "", ""), "eole", size)
