"""Hugging Face M2M100 models (many-to-many translation) in this project's format, read from the saved files alone.

A directory written by `M2M100ForConditionalGeneration.save_pretrained` and `M2M100Tokenizer.save_pretrained`
holds `config.json`, `model.safetensors`, `sentencepiece.bpe.model`, `vocab.json` and `tokenizer_config.json`.
M2M100 is pre-norm with a final layer norm on each side, adds sinusoids in halves with tensor2tensor's
frequencies from row pad_id + 1 on, scales its embeddings, starts the decoder from `</s>` and forces the first
output token to the target language's code (`__fr__`); each source starts with its own language's code. The
codes' ids follow the vocabulary in the order of fairseq's list named by `language_codes`, then 8 made-up words.
NLLB-200 is the same model with another tokenizer, saved as `tokenizer.json` (`NllbTokenizer`), whose codes are
special tokens such as `fra_Latn`, and two embedding rows past its tokens.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from transformer.hugging_face.files import (
    MAX_TOKENIZER_BYTES,
    hf_weights,
    optional_object,
    read_bounded,
    read_config_json,
    read_json,
    regular_file,
)
from transformer.hugging_face.seq2seq import (
    ACTIVATION_NAMES,
    FINAL_NORMS,
    check_special_ids,
    checkpoint_from_state,
    marian_state,
    shape_fields,
    shape_problems,
)
from transformer.hugging_face.tokenizer_files import padded_json_tokenizer, unused_rows, with_language_pair
from transformer.io.checkpoint import Checkpoint, CheckpointError
from transformer.model.config import ConfigError, TransformerConfig, shown
from transformer.text.tokenizer import Tokenizer, TokenizerBase, TokenizerError

# fairseq's language codes, in the order their tokens follow the vocabulary (transformers' M2M100Tokenizer).
NLLB_TOKENIZERS = ("NllbTokenizer", "NllbTokenizerFast")  # NLLB-200: the M2M100 model with a tokenizer.json
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
        unsupported.append(f"{shown(hf.get('vocab_size'))} tokens against the tokenizer's {vocabulary_size}")
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
        activation=ACTIVATION_NAMES[hf["activation_function"]],
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
    hf_config = read_config_json(directory)
    if hf_config.get("model_type") != "m2m_100":
        raise CheckpointError(f"{directory} is not a Hugging Face M2M100 model directory (model_type m2m_100)")
    settings = _tokenizer_settings(directory)
    pair = {"src": source_language or settings.get("src_lang"), "tgt": target_language or settings.get("tgt_lang")}
    nllb = is_nllb(directory)
    size = hf_config.get("vocab_size")
    tokenizer = _nllb_tokenizer(directory, size, pair) if nllb else _m2m100_tokenizer(directory, settings, size, pair)
    try:
        config = m2m100_config(hf_config, tokenizer.vocab_size, tokenizer)
    except (ConfigError, TypeError, ValueError, OverflowError) as error:
        raise CheckpointError(f"{directory.name}: config.json: {str(error)[:200]}") from None
    check_special_ids(config, tokenizer, "tokenizer.json" if nllb else "vocab.json")
    family = "NLLB-200" if nllb else "M2M100"
    metadata = {"languages": pair, "imported": {"from": f"Hugging Face {family}", "directory": directory.name}}
    state = marian_state(hf_weights(directory), config, FINAL_NORMS)
    return checkpoint_from_state(config, state, tokenizer, metadata, device)


def is_nllb(directory: Path) -> bool:
    """Whether an M2M100 directory holds NLLB-200's tokenizer (a hostile tokenizer_config.json reads as not)."""
    try:
        return optional_object(directory, "tokenizer_config.json").get("tokenizer_class") in NLLB_TOKENIZERS
    except (CheckpointError, OSError):
        return False


def _tokenizer_settings(directory: Path) -> dict[str, Any]:
    settings = optional_object(directory, "tokenizer_config.json")
    kind = settings.get("tokenizer_class", "M2M100Tokenizer")
    if kind not in ("M2M100Tokenizer", *NLLB_TOKENIZERS):
        raise CheckpointError(
            f"{directory.name}: the tokenizer {str(kind)[:40]} is not read (M2M100's is: sentencepiece.bpe.model "
            "with vocab.json; NLLB-200's: tokenizer.json)"
        )
    if kind in NLLB_TOKENIZERS and settings.get("legacy_behaviour"):
        raise CheckpointError(
            f"{directory.name}: NLLB's legacy_behaviour puts the language code after the text: not "
            "read (the default since 2023 puts it before)"
        )
    return settings


def _nllb_tokenizer(directory: Path, model_size: Any, pair: dict[str, Any]) -> TokenizerBase:
    return with_language_pair(padded_json_tokenizer(directory, model_size), directory, pair["src"], pair["tgt"])


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
        raise CheckpointError(
            f"{directory.name}: no language code {shown(unknown[0])}; the model knows {', '.join(codes)}"
        )
    pieces = sorted(index, key=index.__getitem__) + [f"__{code}__" for code in codes]
    pieces += [f"madeupword{i:04d}" for i in range(unused_rows(directory, model_size, len(pieces)))]
    try:
        return Tokenizer(
            read_bounded(directory, names[0], MAX_TOKENIZER_BYTES),
            None,
            pieces,
            f"__{pair['src']}__",
            f"__{pair['tgt']}__",
        )
    except TokenizerError as error:
        raise CheckpointError(f"{directory.name}: invalid tokenizer files: {str(error)[:200]}") from None
