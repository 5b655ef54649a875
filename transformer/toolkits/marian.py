"""Marian models read in place from what `marian` training leaves (docs/marian.md).

A directory holds the model (`model.npz`, or one other `.npz`) with Marian's options inside as `special:model.yml`,
the decoder's config `model.npz.decoder.yml` naming the vocabularies, and those SentencePiece vocabularies (`.spm`;
one `.spm` alone serves both sides). Arrays are read by NumPy without pickles (`arrays`), YAML by `yaml.safe_load`:
nothing in the files runs. Marian's transformer is the paper's with its own conventions, each a config field here:
post-norm (`dan`) or pre-norm with a final norm on each side (`n`/`da`/`n`), swish or ReLU, layer norms with eps 1e-9,
embeddings times sqrt(d) plus sinusoids in halves with tensor2tensor's frequencies from position 0, every source
ended with `</s>`, and a decoder that starts from a zero vector: a row of zeros this reader adds to the vocabulary
(named `<pad>`, or `<start>` where a vocabulary trained with `--pad_id` has a `<pad>` of its own; never written) and
starts the decoder from.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import yaml

from transformer.hugging_face.files import MAX_TOKENIZER_BYTES, files_matching, read_bounded, regular_file
from transformer.hugging_face.seq2seq import checkpoint_from_state
from transformer.io.checkpoint import Checkpoint, CheckpointError
from transformer.model.config import ConfigError, TransformerConfig, shown
from transformer.text.tokenizer import Tokenizer, TokenizerError
from transformer.toolkits.arrays import NpzArchive, open_npz
from transformer.toolkits.languages import listing, pair_named
from transformer.toolkits.vocabulary import joint_embeddings, joint_vocabulary, zero_start_piece

OPTIONS_ARRAY = "special:model.yml"
MAX_YAML_BYTES = 1 << 20
LAYER_NORM_EPS = 1e-9  # Marian's layerNorm
MAX_POSITIONS = 1024  # sinusoids have no length of their own: the longest input they are laid out for here
ACTIVATIONS = {"swish": "swish", "relu": "relu"}  # Marian's gelu is x·sigmoid(1.702x), not read
NORM_PLACEMENTS = {("", "dan", ""): False, ("n", "da", "n"): True}  # (preprocess, postprocess, top): norm_first
# Options whose model this format cannot hold (yet), each with what it is; refused naming it.
REFUSED_OPTIONS = {
    "right-left": "decoding right to left",
    "transformer-no-projection": "attention without its output projection",
    "transformer-pool": "pooled encoder states instead of cross-attention",
    "transformer-rnn-projection": "an RNN projection",
    "transformer-train-position-embeddings": "learned positions",
    "transformer-disable-position-embeddings": "no positions",
    "transformer-alibi-shift": "ALiBi",
    "transformer-no-bias": "linear layers without biases",
    "transformer-no-affine": "layer norms without scales and biases",
}
LAYER_ARRAY = re.compile(r"(encoder|decoder)_l(\d{1,6})_(self|context|ffn)_([Wb])([qkvo12])")
NORM_ARRAY = re.compile(r"(encoder|decoder)_l(\d{1,6})_(self|context|ffn)_(?:Wo|ffn)_ln_(scale|bias)(_pre)?")
TOP_NORM = re.compile(r"(encoder|decoder)_top_ln_(scale|bias)")
SUBLAYERS = {"self": "self_attn", "context": "cross_attn", "ffn": "feed_forward"}
PROJECTIONS = {"q": "q_proj", "k": "k_proj", "v": "v_proj", "o": "out_proj", "1": "inner", "2": "outer"}
NORM_BLOCKS = {"self": {"encoder": "attn_block", "decoder": "self_block"}, "context": {"decoder": "cross_block"}}
OUTPUT_LAYER = "decoder_ff_logit_out"  # its Wt (vocabulary, width), W in older models (width, vocabulary), and b
EMBEDDINGS = {"Wemb", "encoder_Wemb", "decoder_Wemb", *(f"{OUTPUT_LAYER}_{part}" for part in ("Wt", "W", "b"))}


@dataclass(frozen=True)
class MarianFiles:
    """The files of a Marian model directory, found by name."""

    directory: Path
    model: Path
    vocabularies: tuple[str, str]  # the source's and the target's names in the directory


def find_files(path: Path) -> MarianFiles:
    """A Marian directory's model and vocabularies (or those beside an `.npz` given itself); CheckpointError naming
    what is missing."""
    directory = path.parent if path.is_file() else path
    model = path if path.is_file() else _model_in(directory)
    listed = regular_file(directory, f"{model.name}.decoder.yml")
    if listed is not None:
        settings = _yaml(read_bounded(directory, listed.name, MAX_YAML_BYTES), f"{model.name}.decoder.yml")
        vocabularies = settings.get("vocabs") if isinstance(settings, dict) else None
        if not isinstance(vocabularies, list) or len(vocabularies) != 2:
            raise CheckpointError(f"{model.name}.decoder.yml does not name two vocabularies (vocabs: source, target)")
        names = tuple(Path(str(name)).name for name in vocabularies)  # read in this directory, wherever it was
    else:
        spm = sorted(p.name for p in directory.glob("*.spm"))
        if len(spm) != 1:
            raise CheckpointError(
                f"{directory.name}: no {model.name}.decoder.yml to name the vocabularies, and not one .spm to use for "
                f"both sides (found {len(spm)})"
            )
        names = (spm[0], spm[0])
    for name in names:
        if not name.endswith(".spm"):
            raise CheckpointError(
                f"{shown(name, 60)}: only SentencePiece vocabularies (.spm) are read; Marian's .yml and .json "
                "vocabularies pair with a tokenizer outside the model, and .fsv ones with factors"
            )
        if regular_file(directory, name) is None:
            raise CheckpointError(f"{directory.name} lacks the vocabulary {shown(name, 60)}: put it beside the model")
    return MarianFiles(directory, model, names)  # type: ignore[arg-type]


def _model_in(directory: Path) -> Path:
    found = regular_file(directory, "model.npz")
    if found is not None:
        return found
    models = files_matching(directory, "*.npz", leaving_out="*.optimizer.npz")
    if len(models) != 1:
        binary = " (Marian's binary .bin models are not read: give the .npz)" if any(directory.glob("*.bin")) else ""
        raise CheckpointError(f"{directory.name}: not one Marian model (.npz) to read: found {len(models)}{binary}")
    return models[0]


class _Aliased(yaml.YAMLError):
    """A YAML anchor or alias met (& or *)."""


class _TreeLoader(yaml.SafeLoader):
    """yaml.safe_load's loader, refusing anchors and aliases: Marian writes neither, and nine levels of nine aliases
    make a 484-byte file a value of 9^9 names, which printing or joining expands ("billion laughs")."""

    def compose_node(self, parent: Any, index: Any) -> Any:
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise _Aliased()
        return super().compose_node(parent, index)


def _yaml(text: bytes, name: str) -> Any:
    try:
        return yaml.load(text.rstrip(b"\0 ").decode(), Loader=_TreeLoader)  # noqa: S506 (a SafeLoader)
    except _Aliased:
        raise CheckpointError(f"{name} holds YAML aliases (& or *), which Marian never writes: refused") from None
    except (yaml.YAMLError, UnicodeDecodeError, RecursionError) as error:
        raise CheckpointError(f"{name} is not YAML that can be read: {' '.join(str(error).split())[:200]}") from None


def marian_options(arrays: dict[str, np.ndarray], name: str) -> dict[str, Any]:
    """The model's options, stored in the model file as the bytes of a YAML text."""
    stored = arrays.get(OPTIONS_ARRAY)
    if stored is None or stored.dtype.itemsize != 1 or stored.size > MAX_YAML_BYTES:
        raise CheckpointError(f"{name} holds no options ({OPTIONS_ARRAY}): not a Marian model")
    options = _yaml(stored.tobytes(), f"{name}'s {OPTIONS_ARRAY}")
    if not isinstance(options, dict):
        raise CheckpointError(f"{name}'s {OPTIONS_ARRAY} is not a mapping of options")
    return options


def marian_config(options: dict[str, Any], vocabulary_size: int, specials: dict[str, int]) -> TransformerConfig:
    """This project's config for a Marian transformer's options; ConfigError naming what this format cannot hold."""
    unsupported = [f"the model type {shown(options.get('type'), 30)}"] if options.get("type") != "transformer" else []
    unsupported += [what for name, what in REFUSED_OPTIONS.items() if options.get(name)]
    if options.get("transformer-decoder-autoreg", "self-attention") != "self-attention":
        autoregression = options.get("transformer-decoder-autoreg")
        cell = f" ({shown(options.get('dec-cell'), 20)})" if autoregression == "rnn" else ""
        unsupported.append(f"a decoder of {shown(autoregression, 30)}{cell} instead of self-attention")
    if options.get("transformer-attention-mask", "default") != "default":
        unsupported.append(f"the attention mask {shown(options.get('transformer-attention-mask'), 20)}")
    if options.get("transformer-tied-layers"):
        unsupported.append("tied decoder layers")
    if options.get("transformer-ffn-depth", 2) != 2 or options.get("transformer-decoder-ffn-depth", 0) not in (0, 2):
        unsupported.append("feed-forward blocks of other than two layers")
    if options.get("transformer-decoder-dim-ffn", 0) not in (0, options.get("transformer-dim-ffn")):
        unsupported.append("a decoder of another feed-forward width")
    if options.get("transformer-postprocess-emb", "d") not in ("d", ""):
        unsupported.append(f"the embeddings' postprocessing {shown(options.get('transformer-postprocess-emb'), 10)}")
    placement = tuple(
        str(options.get(f"transformer-{p}", "")) for p in ("preprocess", "postprocess", "postprocess-top")
    )
    if placement not in NORM_PLACEMENTS:
        unsupported.append(f"the layer processing {'/'.join(placement)} (dan, or n/da/n, is read)")
    if options.get("transformer-ffn-activation", "swish") not in ACTIVATIONS:
        unsupported.append(f"the activation {shown(options.get('transformer-ffn-activation'), 20)}")
    if unsupported:
        raise ConfigError(f"this Marian model has {', '.join(unsupported)}, which this format cannot hold")
    return TransformerConfig(
        src_vocab_size=vocabulary_size,
        tgt_vocab_size=vocabulary_size,
        d_model=options.get("dim-emb"),
        n_heads=options.get("transformer-heads"),
        d_ff=options.get("transformer-dim-ffn"),
        n_encoder_layers=options.get("enc-depth"),
        n_decoder_layers=options.get("dec-depth"),
        max_len=MAX_POSITIONS,
        pad_id=specials["pad"],
        unk_id=specials["unk"],
        bos_id=specials["bos"],
        eos_id=specials["eos"],
        norm_first=NORM_PLACEMENTS[placement],  # type: ignore[index]
        tie_embeddings=bool(options.get("tied-embeddings-all")),
        activation=ACTIVATIONS[options.get("transformer-ffn-activation", "swish")],
        layer_norm_eps=LAYER_NORM_EPS,
        sinusoid_layout="halves",
        sinusoid_frequencies="tensor2tensor",
        decoder_start_id=specials["start"],
    )


def import_marian_npz(path: str | Path, device: torch.device | str = "cpu") -> Checkpoint:
    """A Marian model directory (or its `.npz`, its vocabularies beside it) as a checkpoint of this project."""
    files = find_files(Path(path))
    with open_npz(files.model) as archive:  # the options and vocabularies read, the arrays checked, then read
        options = marian_options(_options_array(archive), files.model.name)
        protos = [read_bounded(files.directory, name, MAX_TOKENIZER_BYTES) for name in files.vocabularies]
        try:
            source, target = (Tokenizer(proto).pieces for proto in protos)
            _check_pieces(source, target, files.vocabularies)
            source_unk = source.index("<unk>")
            pieces, source_rows = joint_vocabulary(source, target, source_unk)
            tokenizer = Tokenizer(protos[0], protos[1], [*pieces, zero_start_piece(pieces)])
            specials = {"start": len(pieces), "pad": tokenizer.pad_id, "bos": tokenizer.bos_id}
            specials |= {"unk": tokenizer.unk_id, "eos": tokenizer.eos_id}
            config = marian_config(options, len(pieces) + 1, specials)
        except (ConfigError, TypeError, ValueError, OverflowError, TokenizerError) as error:
            raise CheckpointError(f"{files.directory.name}: {str(error)[:300]}") from None
        if config.tie_embeddings and source != target:
            raise CheckpointError("tied-embeddings-all with two different vocabularies: the files are not one model's")
        check_arrays(archive, config)
        arrays = archive.read_all()
    state = npz_state(arrays, options, config, [*source_rows, source_unk])  # the start row: no source piece
    metadata = {
        "languages": marian_languages(files.directory, files.vocabularies),
        "imported": {"from": "Marian", "directory": files.directory.name, "file": files.model.name},
    }
    return checkpoint_from_state(config, state, tokenizer, metadata, device)


def _options_array(archive: NpzArchive) -> dict[str, np.ndarray]:
    """The options' array, where the archive holds one of bytes small enough to be options (else nothing)."""
    shape, dtype = archive.headers.get(OPTIONS_ARRAY, ((), np.dtype(np.float32)))
    if dtype.itemsize != 1 or math.prod(shape) > MAX_YAML_BYTES:
        return {}
    return {OPTIONS_ARRAY: archive.read(OPTIONS_ARRAY)}


def check_arrays(archive: NpzArchive, config: TransformerConfig) -> None:
    """Every array of the archive named as a part of the model its options describe, and all of them together no
    larger than that model's weights: checked on the arrays' headers, before any is read (9 MB unpacking to 2 GB of
    an array no model has was read whole before it was refused)."""
    for name in archive.headers:
        if name not in EMBEDDINGS and name != OPTIONS_ARRAY:
            _our_name(name, config.norm_first)
    declared = sum(math.prod(shape) for name, (shape, _) in archive.headers.items() if name != OPTIONS_ARRAY)
    weights = sum(math.prod(shape) for shape in config.parameter_shapes().values())
    if declared > weights:
        raise CheckpointError(
            f"{archive.name} declares {declared:,} numbers, more than the {weights:,} of the model its options "
            "describe: refused unread"
        )


def _check_pieces(source: list[str], target: list[str], names: tuple[str, str]) -> None:
    """Marian's ids for its specials are those of the vocabularies' `</s>` and `<unk>` pieces."""
    for pieces, name in zip((source, target), names):
        missing = [piece for piece in ("</s>", "<unk>") if piece not in pieces]
        if missing:
            raise CheckpointError(f"{shown(name, 60)} has no {' or '.join(missing)} piece: not a Marian vocabulary")


def npz_state(
    arrays: dict[str, np.ndarray], options: dict[str, Any], config: TransformerConfig, source_rows: list[int]
) -> dict[str, torch.Tensor]:
    """Marian's arrays under this project's names: its matrices (in, out) transposed to PyTorch's (out, in), each
    embedding laid out over the joint vocabulary with the zero start row (`joint_embeddings`)."""
    tensors = {name: _tensor(name, array) for name, array in arrays.items() if name != OPTIONS_ARRAY}
    state = dict(
        _layer_tensor(name, tensor, config.norm_first) for name, tensor in tensors.items() if name not in EMBEDDINGS
    )
    shared = "Wemb" if options.get("tied-embeddings-all") or options.get("tied-embeddings-src") else None
    source, target = (_array(tensors, shared or f"{side}_Wemb") for side in ("encoder", "decoder"))
    tied_output = options.get("tied-embeddings-all") or options.get("tied-embeddings")
    if tied_output:
        output = target
    else:
        legacy = f"{OUTPUT_LAYER}_W" in tensors  # before Marian stored it transposed
        output = _array(tensors, f"{OUTPUT_LAYER}_W").T if legacy else _array(tensors, f"{OUTPUT_LAYER}_Wt")
    layout = joint_embeddings(source, target, output, tensors.get(f"{OUTPUT_LAYER}_b"), source_rows)
    if config.tie_embeddings:  # one matrix: the target's layout holds the zero start row the source's would not
        return state | {
            "src_embed.lookup.weight": layout["tgt_embed.lookup.weight"],
            "generator.bias": layout["generator.bias"],
        }
    return state | layout


def _tensor(name: str, array: np.ndarray) -> torch.Tensor:
    if array.dtype not in (np.float32, np.float16):
        raise CheckpointError(f"{shown(name, 60)} is {array.dtype}, not float32 or float16: not read")
    return torch.from_numpy(np.ascontiguousarray(array))


def _array(tensors: dict[str, torch.Tensor], name: str) -> torch.Tensor:
    if name not in tensors or tensors[name].dim() != 2:
        raise CheckpointError(f"the model lacks its {name} matrix")
    return tensors[name]


def _layer_tensor(name: str, tensor: torch.Tensor, norm_first: bool) -> tuple[str, torch.Tensor]:
    """One of Marian's layer arrays under this project's name, a matrix transposed and a (1, n) vector flattened;
    CheckpointError for an array it has no place for."""
    ours, matrix = _our_name(name, norm_first)
    return ours, tensor.T if matrix else tensor.reshape(-1)


def _our_name(name: str, norm_first: bool) -> tuple[str, bool]:
    """This project's name of one of Marian's layer arrays, and whether it is a matrix (Marian's (in, out), to be
    transposed); CheckpointError for an array it has no place for."""
    if match := LAYER_ARRAY.fullmatch(name):
        side, number, sublayer, kind, projection = match.groups()
        ours = f"{side}_layers.{int(number) - 1}.{SUBLAYERS[sublayer]}.{PROJECTIONS[projection]}"
        return (f"{ours}.weight", True) if kind == "W" else (f"{ours}.bias", False)
    leaves = {"scale": "weight", "bias": "bias"}
    if (match := NORM_ARRAY.fullmatch(name)) and bool(match.group(5)) == norm_first:
        side, number, sublayer, leaf, _ = match.groups()
        block = NORM_BLOCKS.get(sublayer, {}).get(side, "ff_block")
        return f"{side}_layers.{int(number) - 1}.{block}.norm.{leaves[leaf]}", False
    if (match := TOP_NORM.fullmatch(name)) and norm_first:
        return f"{match.group(1)}_norm.{leaves[match.group(2)]}", False
    raise CheckpointError(
        f"unexpected array {shown(name, 60)}: not a part of the Marian transformer its options describe"
    )


def marian_languages(directory: Path, vocabularies: tuple[str, str]) -> dict[str, str]:
    """The language pair, where a name says it (Marian records none): the directory's (`NAME.en-fr`, `opus-mt-en-fr`)
    or the vocabularies' (`vocab.en.spm` and `vocab.fr.spm`)."""
    return pair_named(directory.name, *vocabularies)


def is_marian_directory(path: Path) -> bool:
    """Whether path is a directory with a Marian model (an `.npz` and its vocabularies; nothing is opened to tell)."""
    return path.is_dir() and any(path.glob("*.npz")) and any(path.glob("*.spm"))


def describe_marian_npz(directory: Path) -> str:
    """The checkpoint list's label for a Marian directory, read without loading the model: its name, the language
    pair where names say it, and the model's size."""
    try:
        files = find_files(directory)
        size, pair = f"{files.model.stat().st_size / 1e6:.1f} MB", marian_languages(directory, files.vocabularies)
    except (CheckpointError, OSError) as error:
        size, pair = f"not readable: {str(error)[:80]}", {}
    return listing(directory.name, pair, "Marian", size)
