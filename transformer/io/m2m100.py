"""Hugging Face M2M100 models (many-to-many translation) in this project's format, read from the saved files alone.

A directory written by `M2M100ForConditionalGeneration.save_pretrained` and `M2M100Tokenizer.save_pretrained`
holds `config.json`, `model.safetensors`, `sentencepiece.bpe.model`, `vocab.json` and `tokenizer_config.json`.
M2M100 is pre-norm with a final layer norm on each side, adds sinusoids in halves with tensor2tensor's
frequencies from row pad_id + 1 on, scales its embeddings, starts the decoder from `</s>` and forces the first
output token to the target language's code (`__fr__`); each source starts with its own language's code. The
codes' ids follow the vocabulary in the order of fairseq's list named by `language_codes`, then 8 made-up words.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from transformer.io.checkpoint import Checkpoint, CheckpointError
from transformer.io.marian import (
    ACTIVATIONS,
    FINAL_NORMS,
    MAX_TOKENIZER_BYTES,
    check_special_ids,
    checkpoint_from_state,
    hf_weights,
    marian_state,
    optional_object,
    read_bounded,
    read_json,
    regular_file,
    shape_fields,
    shape_problems,
)
from transformer.model.config import ConfigError, TransformerConfig
from transformer.text.tokenizer import Tokenizer, TokenizerError

# fairseq's language codes, in the order their tokens follow the vocabulary (transformers' M2M100Tokenizer).
LANGUAGE_CODES = {
    "m2m100": (
        "af am ar ast az ba be bg bn br bs ca ceb cs cy da de el en es et fa ff fi fr fy ga gd gl gu ha he hi hr ht hu "
        "hy id ig ilo is it ja jv ka kk km kn ko lb lg ln lo lt lv mg mk ml mn mr ms my ne nl no ns oc or pa pl ps pt "
        "ro ru sd si sk sl so sq sr ss su sv sw ta th tl tn tr uk ur uz vi wo xh yi yo zh zu"
    ).split(),
    "wmt21": "en ha is ja cs ru zh de".split(),
}


def m2m100_config(hf: dict[str, Any], vocabulary_size: int, tokenizer: Tokenizer) -> TransformerConfig:
    """This project's config for an M2M100 `config.json`; ConfigError naming what it cannot express."""
    unsupported = shape_problems(hf)
    if not hf.get("tie_word_embeddings", True):
        unsupported.append("an output layer not tied to the embeddings")
    if not isinstance(hf.get("d_model"), int) or hf["d_model"] % 2:
        unsupported.append("an odd width")
    if hf.get("vocab_size") != vocabulary_size:
        unsupported.append(f"{hf.get('vocab_size')!r} tokens against the tokenizer's {vocabulary_size}")
    if unsupported:
        raise ConfigError(f"this M2M100 model has {', '.join(unsupported)}, which this format cannot hold")
    pad = hf.get("pad_token_id")
    return TransformerConfig(
        **shape_fields(hf, vocabulary_size),
        pad_id=pad,
        unk_id=tokenizer.unk_id,
        bos_id=hf.get("bos_token_id"),
        eos_id=hf.get("eos_token_id"),
        norm_first=True,
        activation=ACTIVATIONS[hf["activation_function"]],
        scale_embedding=bool(hf.get("scale_embedding", True)),
        sinusoid_layout="halves",
        sinusoid_frequencies="tensor2tensor",
        position_offset=pad + 1 if isinstance(pad, int) else -1,
        decoder_start_id=hf.get("decoder_start_token_id", hf.get("eos_token_id")),
    )


def import_m2m100(
    directory: str | Path,
    device: torch.device | str = "cpu",
    source_language: str | None = None,
    target_language: str | None = None,
) -> Checkpoint:
    """An M2M100 model directory as a checkpoint of this project, translating between the languages given (by
    default tokenizer_config.json's src_lang and tgt_lang)."""
    directory = Path(directory)
    hf_config = read_json(directory, "config.json")
    if not isinstance(hf_config, dict) or hf_config.get("model_type") != "m2m_100":
        raise CheckpointError(f"{directory} is not a Hugging Face M2M100 model directory (model_type m2m_100)")
    settings = _tokenizer_settings(directory)
    pair = {"src": source_language or settings.get("src_lang"), "tgt": target_language or settings.get("tgt_lang")}
    tokenizer = _m2m100_tokenizer(directory, settings, hf_config.get("vocab_size"), pair)
    try:
        config = m2m100_config(hf_config, tokenizer.vocab_size, tokenizer)
    except (ConfigError, TypeError, ValueError, OverflowError) as error:
        raise CheckpointError(f"{directory.name}: config.json: {str(error)[:200]}") from None
    check_special_ids(config, tokenizer, "vocab.json")
    metadata = {"languages": pair, "imported": {"from": "Hugging Face M2M100", "directory": directory.name}}
    state = marian_state(hf_weights(directory), config, FINAL_NORMS)
    return checkpoint_from_state(config, state, tokenizer, metadata, device)


def languages_of(directory: Path) -> list[str]:
    """The language codes an M2M100 directory's tokenizer knows (for choosing a pair)."""
    return list(LANGUAGE_CODES.get(str(_tokenizer_settings(directory).get("language_codes", "m2m100")), []))


def _tokenizer_settings(directory: Path) -> dict[str, Any]:
    settings = optional_object(directory, "tokenizer_config.json")
    if settings.get("tokenizer_class", "M2M100Tokenizer") != "M2M100Tokenizer":
        raise CheckpointError(
            f"{directory.name}: the tokenizer {str(settings.get('tokenizer_class'))[:40]} is not read yet (M2M100's "
            "is: sentencepiece.bpe.model with vocab.json)"
        )
    return settings


def _m2m100_tokenizer(directory: Path, settings: dict[str, Any], model_size: Any, pair: dict[str, Any]) -> Tokenizer:
    names = ("sentencepiece.bpe.model", "vocab.json")
    missing = [name for name in names if regular_file(directory, name) is None]
    if missing:
        raise CheckpointError(
            f"{directory} lacks the tokenizer files {', '.join(missing)} (M2M100Tokenizer.save_pretrained writes them)"
        )
    index = read_json(directory, "vocab.json", MAX_TOKENIZER_BYTES)
    if not isinstance(index, dict) or not all(type(i) is int for i in index.values()):
        raise CheckpointError(f"{directory.name}: vocab.json is not an object of pieces and whole-number ids")
    if sorted(index.values()) != list(range(len(index))):
        raise CheckpointError(f"{directory.name}: vocab.json's ids are not 0 to n-1, each once")
    codes = LANGUAGE_CODES.get(str(settings.get("language_codes", "m2m100")))
    if codes is None:
        raise CheckpointError(f"{directory.name}: unknown language_codes {str(settings.get('language_codes'))[:40]!r}")
    unknown = [str(code)[:20] for code in pair.values() if code not in codes]
    if unknown:
        raise CheckpointError(f"{directory.name}: no language code {unknown[0]!r}; the model knows {', '.join(codes)}")
    pieces = sorted(index, key=index.__getitem__) + [f"__{code}__" for code in codes]
    if not isinstance(model_size, int) or model_size < len(pieces):
        raise CheckpointError(
            f"{directory.name}: config.json's vocab_size {model_size!r} is smaller than vocab.json and the language "
            f"codes ({len(pieces)})"
        )
    pieces += [f"madeupword{i:04d}" for i in range(model_size - len(pieces))]
    try:
        return Tokenizer(
            read_bounded(directory, names[0], MAX_TOKENIZER_BYTES), None, pieces, f"__{pair['src']}__",
            f"__{pair['tgt']}__",
        )  # fmt: skip
    except TokenizerError as error:
        raise CheckpointError(f"{directory.name}: invalid tokenizer files: {str(error)[:200]}") from None
