"""A CTranslate2 model (its directory, an Argos Translate package, or its model.bin) as a checkpoint of this project:
the index checked, then the vocabularies and flags read, then each weight laid out in float32 (docs/ctranslate2.md)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, BinaryIO

import torch

from transformer.hugging_face.files import MAX_TOKENIZER_BYTES, check_room, read_bounded, read_json, regular_file
from transformer.hugging_face.seq2seq import checkpoint_from_state
from transformer.io.checkpoint import Checkpoint, CheckpointError
from transformer.model.config import ConfigError, TransformerConfig, shown
from transformer.text.files import open_regular
from transformer.text.tokenizer import Tokenizer, TokenizerError
from transformer.toolkits.ctranslate2 import spec
from transformer.toolkits.ctranslate2.binary import ModelBin, read_index, read_weight
from transformer.toolkits.ctranslate2.directory import (
    Ct2Files,
    find_files,
    renamed,
    special_names,
    vocabularies,
    weights_type,
)
from transformer.toolkits.languages import listing
from transformer.toolkits.vocabulary import PAD, joint_embeddings, joint_vocabulary, zero_start_piece

DEFAULT_POSITIONS = 1024  # CTranslate2's own sinusoids have no length: the longest input they are laid out for here


def import_ctranslate2(path: str | Path, device: torch.device | str = "cpu") -> Checkpoint:
    """A CTranslate2 directory, Argos Translate package or model.bin as a checkpoint of this project."""
    files = find_files(Path(path))
    index = read_index(files.model / "model.bin")
    spec.check_spec(index)
    shape = spec.spec_shape(index)
    spec.check_shapes(index, shape)
    layers = spec.layer_counts(index)
    check_room(files.package.name, sum(variable.numel for variable in index.variables.values()))  # before reading
    options = read_json(files.model, "config.json") if regular_file(files.model, "config.json") else {}
    if not isinstance(options, dict):
        raise CheckpointError(f"{files.model.name}: config.json is not an object")
    names = special_names(options)
    source, target = (renamed(pieces, names) for pieces in vocabularies(files.model, shape))
    with open_regular(index.path) as file:
        flags = spec.flags(file, index, shape.d_model)
        positions = spec.positions(file, index, shape.d_model)
        tokenizer, config, source_rows = _vocabulary_and_config(
            files, options, names, source, target, shape, layers, flags, positions, index
        )
        state = spec.layer_state(file, index, shape.d_model) | _embeddings(file, index, config, source_rows)
    for side, table in zip(("src", "tgt"), positions.get("tables", ())):
        state[f"{side}_position.table"] = table[: config.max_len]
    kind = weights_type(index)
    weights = f"{kind} weights{', dequantized' if kind.startswith('int') else ''}"
    origin = "CTranslate2 (Argos Translate)" if files.argos else "CTranslate2"
    metadata = {
        "languages": files.languages,
        "imported": {"from": f"{origin}, {weights}", "directory": files.package.name, "file": "model.bin"},
    }
    return checkpoint_from_state(config, state, tokenizer, metadata, device)


def _vocabulary_and_config(
    files: Ct2Files,
    options: dict[str, Any],
    names: dict[str, str],
    source: list[str],
    target: list[str],
    shape: spec.Shape,
    layers: tuple[int, int],
    flags: dict[str, Any],
    positions: dict[str, Any],
    index: ModelBin,
) -> tuple[Tokenizer, TransformerConfig, list[int]]:
    """The tokenizer over the joint vocabulary (a zero start row or a padding row added where the model needs one),
    the config the spec and config.json describe, and each joint id's source row (joint_vocabulary)."""
    try:
        pieces, source_rows, start = _joint_pieces(source, target, flags["zero_start"], options, names)
        tokenizer = _tokenizer(files, options, pieces)
        tied = (
            source == target
            and index.same(spec.encoder_embedding(index), spec.TARGET_EMBEDDING)
            and index.same(spec.OUTPUT, spec.TARGET_EMBEDDING)
        )
        epsilon = options.get("layer_norm_epsilon")
        config = TransformerConfig(
            src_vocab_size=len(pieces),
            tgt_vocab_size=len(pieces),
            d_model=shape.d_model,
            n_heads=flags["n_heads"],
            d_ff=shape.d_ff,
            n_encoder_layers=layers[0],
            n_decoder_layers=layers[1],
            dropout=0.0,
            max_len=positions.get("max_len", DEFAULT_POSITIONS),
            pad_id=tokenizer.pad_id,
            unk_id=tokenizer.unk_id,
            bos_id=tokenizer.bos_id,
            eos_id=tokenizer.eos_id,
            norm_first=flags["norm_first"],
            tie_embeddings=tied,
            positional=positions.get("positional", "sinusoidal"),
            activation=flags["activation"],
            layer_norm_eps=1e-5 if epsilon is None else epsilon,
            scale_embedding=flags["scale_embedding"],
            sinusoid_layout=positions.get("sinusoid_layout", "interleaved"),
            sinusoid_frequencies=positions.get("sinusoid_frequencies", "paper"),
            position_offset=positions.get("position_offset", 0),
            embedding_norm=index.find("decoder/layernorm_embedding/gamma") is not None,
            decoder_start_id=start,
        )
    except (ConfigError, TypeError, ValueError, OverflowError, TokenizerError) as error:
        raise CheckpointError(f"{files.package.name}: {str(error)[:300]}") from None
    return tokenizer, config, source_rows


def _joint_pieces(
    source: list[str], target: list[str], zero_start: bool, options: dict[str, Any], names: dict[str, str]
) -> tuple[list[str], list[int], int]:
    """The joint vocabulary's pieces, a zero start row and a padding row added where the model needs them (each read
    from the source's unknown row), each one's source row, and the decoder's start id."""
    if "<unk>" not in source or "<unk>" not in target or "</s>" not in target:
        unknown, end = options.get("unk_token", "<unk>"), options.get("eos_token", "</s>")
        raise ConfigError(f"the vocabularies lack {shown(unknown, 20)} or {shown(end, 20)}")
    pieces, source_rows = joint_vocabulary(source, target, source.index("<unk>"))
    if zero_start:
        start = len(pieces)
        pieces.append(zero_start_piece(pieces))
    else:
        start = _start_id(options, names, target)
    if PAD not in pieces:
        pieces.append(PAD)  # padding, never written
    return pieces, source_rows + [source.index("<unk>")] * (len(pieces) - len(source_rows)), start


def _tokenizer(files: Ct2Files, options: dict[str, Any], pieces: list[str]) -> Tokenizer:
    """The SentencePiece models over the joint vocabulary, the source ended and begun as config.json says."""
    protos = [read_bounded(p.parent, p.name, MAX_TOKENIZER_BYTES) for p in files.splitters]
    tokenizer = Tokenizer(protos[0], None if files.splitters[0] == files.splitters[1] else protos[1], pieces)
    tokenizer = tokenizer if options.get("add_source_eos") else tokenizer.without_source_eos()
    return tokenizer.with_prefixes("<s>", None) if options.get("add_source_bos") else tokenizer


def _start_id(options: dict[str, Any], names: dict[str, str], target: list[str]) -> int:
    """The target id of config.json's decoder_start_token."""
    start = options.get("decoder_start_token", "<s>")
    if start is None:
        raise ConfigError(
            "config.json's decoder_start_token is null (the target's first token is given with each input, as "
            "multilingual models take their language code), which is not read"
        )
    ours = names.get(str(start), str(start))
    if ours not in target:
        raise ConfigError(f"the decoder's start token {shown(start, 20)} is not a target piece")
    return target.index(ours)


def _embeddings(
    file: BinaryIO, index: ModelBin, config: TransformerConfig, source_rows: list[int]
) -> dict[str, torch.Tensor]:
    """The embeddings and the generator over the joint vocabulary, `source_rows` each joint id's source row (its
    added rows zero, never written); one matrix where the spec ties them."""
    encoder_name = spec.encoder_embedding(index)
    # The output layer's matrix read as the model lays it out (transposed): the largest weight, never copied
    target_embedding = read_weight(file, index, spec.TARGET_EMBEDDING, transposed=config.tie_embeddings)
    same = index.same(encoder_name, spec.TARGET_EMBEDDING)
    source_embedding = target_embedding if same else read_weight(file, index, encoder_name)
    tied_output = index.same(spec.OUTPUT, spec.TARGET_EMBEDDING)
    output = target_embedding if tied_output else read_weight(file, index, spec.OUTPUT, transposed=True)
    bias = read_weight(file, index, "decoder/projection/bias") if index.find("decoder/projection/bias") else None
    layout = joint_embeddings(source_embedding, target_embedding, output, bias, source_rows)
    if config.tie_embeddings:
        return {
            "src_embed.lookup.weight": layout["tgt_embed.lookup.weight"],
            "generator.bias": layout["generator.bias"],
        }
    return layout


def is_ctranslate2_directory(path: Path) -> bool:
    """Whether path is a CTranslate2 directory (model.bin beside a vocabulary) or an Argos Translate package
    (metadata.json and model/ holding one); nothing is opened to tell."""
    model = path / "model" if (path / "metadata.json").is_file() else path
    return (model / "model.bin").exists() and any(model.glob("*_vocabulary.*"))


def describe_ctranslate2(directory: Path) -> str:
    """The checkpoint list's label: "NAME · en/fr · CTranslate2 (Argos) · int8 · 1.6 MB", its index alone read."""
    try:
        files = find_files(directory)
        index = read_index(files.model / "model.bin")
        label = f"{'CTranslate2 (Argos)' if files.argos else 'CTranslate2'} · {weights_type(index)}"
        size, pair = f"{index.path.stat().st_size / 1e6:.1f} MB", files.languages
    except (CheckpointError, OSError) as error:
        label, size, pair = "CTranslate2", f"not readable: {str(error)[:80]}", {}
    return listing(directory.name, pair, label, size)
