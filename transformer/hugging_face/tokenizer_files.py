"""Tokenizers of Hugging Face directories saved as `tokenizer.json` (mBART-50's, NLLB-200's, BART's), confined to
the directory and bounded in size like every file read there, and a language-pair model's codes chosen on them."""

from __future__ import annotations

from pathlib import Path

from tokenizers import ByteLevelBPETokenizer

from transformer.hugging_face.files import MAX_TOKENIZER_BYTES, read_bounded, regular_file
from transformer.io.checkpoint import CheckpointError
from transformer.model.config import shown
from transformer.text.json_tokenizer import JsonTokenizer
from transformer.text.tokenizer import TokenizerError

MAX_UNUSED_ROWS = 1024  # embedding rows past the tokenizer's tokens: a few in real models, never millions
BYTE_LEVEL_SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]  # BART's, at ids 0-4 of its vocab.json


def read_tokenizer_json(directory: Path, byte_level_files: bool = False) -> JsonTokenizer:
    """The directory's tokenizer.json; with byte_level_files, a byte-level BPE's vocab.json and merges.txt where
    there is none (BART's older saves), made into one by `tokenizers`."""
    if regular_file(directory, "tokenizer.json") is not None:
        try:
            text = read_bounded(directory, "tokenizer.json", MAX_TOKENIZER_BYTES).decode()
        except UnicodeDecodeError:
            raise CheckpointError(f"{directory.name}: tokenizer.json is not UTF-8 text") from None
    elif byte_level_files and all(regular_file(directory, name) for name in ("vocab.json", "merges.txt")):
        text = _byte_level_json(directory)
    else:
        wanted = "tokenizer.json, or vocab.json and merges.txt" if byte_level_files else "tokenizer.json"
        raise CheckpointError(
            f"{directory} lacks the tokenizer file(s) {wanted} (the tokenizer's save_pretrained writes them)"
        )
    try:
        return JsonTokenizer(text)
    except TokenizerError as error:
        raise CheckpointError(f"{directory.name}: invalid tokenizer files: {str(error)[:200]}") from None


def with_language_pair(tokenizer: JsonTokenizer, directory: Path, source: object, target: object) -> JsonTokenizer:
    """The tokenizer with a language-pair model's codes (mBART-50's en_XX, NLLB's fra_Latn): the source's before
    every source, the target's forced first; a code the tokenizer lacks is refused, naming those it has."""
    unknown = [str(code)[:20] for code in (source, target) if tokenizer.piece_ids.get(code) not in tokenizer.code_ids]
    if unknown:
        codes = ", ".join(tokenizer.pieces[i] for i in sorted(tokenizer.code_ids))
        raise CheckpointError(f"{directory.name}: no language code {shown(unknown[0])}; the model knows {codes}")
    return tokenizer.with_prefixes(str(source), str(target))


def unused_rows(directory: Path, model_size: object, tokens: int) -> int:
    """How many embedding rows past the tokenizer's tokens config.json's vocab_size describes (M2M100's 8
    madeupwords, NLLB's 2 unnamed rows, T5's 28 to a multiple of 128); CheckpointError for fewer rows than tokens,
    or implausibly many more (a hostile config asking for a billion names)."""
    if not isinstance(model_size, int) or not tokens <= model_size <= tokens + MAX_UNUSED_ROWS:
        raise CheckpointError(
            f"{directory.name}: config.json's vocab_size {str(model_size)[:20]} does not fit the tokenizer's "
            f"{tokens} tokens (it may exceed them by at most {MAX_UNUSED_ROWS})"
        )
    return model_size - tokens


def padded_json_tokenizer(directory: Path, model_size: object) -> JsonTokenizer:
    """The directory's tokenizer.json, with <unused0> ... naming the embedding rows past its tokens."""
    tokenizer = read_tokenizer_json(directory)
    return tokenizer.padded_to(model_size) if unused_rows(directory, model_size, tokenizer.vocab_size) else tokenizer


def _byte_level_json(directory: Path) -> str:
    for name in ("vocab.json", "merges.txt"):
        read_bounded(directory, name, MAX_TOKENIZER_BYTES)  # refuses a file too large before the library reads it
    try:
        bpe = ByteLevelBPETokenizer(str(directory / "vocab.json"), str(directory / "merges.txt"), trim_offsets=True)
    except Exception as error:  # tokenizers raises plain Exception for a malformed file
        raise CheckpointError(
            f"{directory.name}: vocab.json and merges.txt are not a BPE tokenizer: {str(error)[:150]}"
        ) from None
    bpe.add_special_tokens(BYTE_LEVEL_SPECIALS)
    return bpe.to_str()
