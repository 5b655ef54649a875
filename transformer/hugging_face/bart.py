"""Hugging Face BART and mBART-50 models in this project's format, read from the saved files alone.

Both families add learned positions from row 2 on and put a layer norm on the embedded input (FORMAT.md's
`embedding_norm`), with GELU; mBART is pre-norm with a final layer norm on each side, BART post-norm. Their
tokenizers are read from `tokenizer.json` with the `tokenizers` library (BART's byte-level BPE may instead come as
`vocab.json` and `merges.txt`). A BART source is `<s> … </s>` and its output is forced to start with
`forced_bos_token_id` (config.json's, or generation_config.json's), `<s>` in bart-large; an mBART-50 source starts with its language's code (`en_XX`) and its output with the
target's, as M2M100's.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from transformer.hugging_face.files import hf_weights, optional_object, read_config_json
from transformer.hugging_face.seq2seq import (
    ACTIVATION_NAMES,
    FINAL_NORMS,
    POSITION_TABLES,
    SIDE_NORMS,
    check_special_ids,
    checkpoint_from_state,
    marian_state,
    shape_fields,
    shape_problems,
)
from transformer.hugging_face.tokenizer_files import read_tokenizer_json, with_language_pair
from transformer.io.checkpoint import Checkpoint, CheckpointError
from transformer.model.config import ConfigError, TransformerConfig, shown
from transformer.text.json_tokenizer import JsonTokenizer

FAMILIES = {"bart": "BART", "mbart": "mBART-50"}
POSITION_OFFSET = 2  # BartLearnedPositionalEmbedding's: rows 0 and 1 are never read


def bart_config(hf: dict[str, Any], tokenizer: JsonTokenizer) -> TransformerConfig:
    """This project's config for a BART or mBART `config.json`; ConfigError naming what it cannot express."""
    unsupported = shape_problems(hf)
    if not hf.get("tie_word_embeddings", True):
        unsupported.append("an output layer not tied to the embeddings")
    if hf.get("vocab_size") != tokenizer.vocab_size:
        unsupported.append(f"{shown(hf.get('vocab_size'))} tokens against the tokenizer's {tokenizer.vocab_size}")
    if unsupported:
        raise ConfigError(
            f"this {FAMILIES[hf['model_type']]} model has {', '.join(unsupported)}, which this format cannot hold"
        )
    eos = hf.get("eos_token_id")
    return TransformerConfig(
        **shape_fields(hf, tokenizer.vocab_size),
        pad_id=hf.get("pad_token_id"),
        unk_id=tokenizer.unk_id,
        bos_id=hf.get("bos_token_id"),
        eos_id=eos,
        norm_first=hf["model_type"] == "mbart",
        positional="learned",
        position_offset=POSITION_OFFSET,
        embedding_norm=True,
        activation=ACTIVATION_NAMES[hf["activation_function"]],
        scale_embedding=bool(hf.get("scale_embedding", False)),
        decoder_start_id=hf.get("decoder_start_token_id") if hf.get("decoder_start_token_id") is not None else eos,
    )


def import_bart(
    directory: str | Path,
    device: torch.device | str = "cpu",
    source_language: str | None = None,
    target_language: str | None = None,
) -> Checkpoint:
    """A BART or mBART-50 model directory as a checkpoint of this project; an mBART-50 one translating between the
    languages given (by default tokenizer_config.json's src_lang and tgt_lang)."""
    directory = Path(directory)
    hf_config = read_config_json(directory)
    kind = hf_config.get("model_type")
    if kind not in FAMILIES:
        raise CheckpointError(
            f"{directory} is not a Hugging Face BART or mBART model directory (model_type bart or mbart)"
        )
    settings = optional_object(directory, "tokenizer_config.json")
    tokenizer = read_tokenizer_json(directory, byte_level_files=kind == "bart")
    if kind == "mbart":
        if settings.get("tokenizer_class", "MBart50Tokenizer") != "MBart50Tokenizer":
            raise CheckpointError(
                f"{directory.name}: the tokenizer {str(settings.get('tokenizer_class'))[:40]} is not "
                "read (mBART's puts the language code after the text; mBART-50's before it is)"
            )
        pair = {"src": source_language or settings.get("src_lang"), "tgt": target_language or settings.get("tgt_lang")}
        tokenizer = with_language_pair(tokenizer, directory, pair["src"], pair["tgt"])
        metadata: dict[str, Any] = {"languages": pair}
    else:
        forced = _forced_first_token(directory, hf_config)
        target = tokenizer.pieces[forced] if isinstance(forced, int) and 0 <= forced < tokenizer.vocab_size else None
        tokenizer = tokenizer.with_prefixes("<s>" if "<s>" in tokenizer.piece_ids else None, target)
        metadata = {}
    try:
        config = bart_config(hf_config, tokenizer)
    except (ConfigError, TypeError, ValueError, OverflowError) as error:
        raise CheckpointError(f"{directory.name}: config.json: {str(error)[:200]}") from None
    check_special_ids(config, tokenizer, "the tokenizer")
    weights = hf_weights(directory)
    state = marian_state(weights, config, SIDE_NORMS | (FINAL_NORMS if config.norm_first else {}))
    state |= {ours: weights[theirs] for theirs, ours in POSITION_TABLES.items() if theirs in weights}
    del weights  # the state holds each tensor once: the model frees each original as it lays it out
    metadata["imported"] = {"from": f"Hugging Face {FAMILIES[kind]}", "directory": directory.name}
    return checkpoint_from_state(config, state, tokenizer, metadata, device)


def _forced_first_token(directory: Path, hf_config: dict[str, Any]) -> Any:
    """forced_bos_token_id: config.json's (transformers 4 wrote it there), else generation_config.json's."""
    if "forced_bos_token_id" in hf_config:
        return hf_config["forced_bos_token_id"]
    return optional_object(directory, "generation_config.json").get("forced_bos_token_id")
