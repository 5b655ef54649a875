"""A CTranslate2 model directory, or an Argos Translate package holding one, read in place (docs/ctranslate2.md).

A CTranslate2 directory holds `model.bin`, `config.json` and the vocabularies (`shared_vocabulary.json` or `.txt`, or
`source_vocabulary` and `target_vocabulary`); the SentencePiece models are found as their users keep them: beside
`model.bin` (`source.spm` and `target.spm`, `sentencepiece.model`, or one `.model`), or, in an Argos Translate package
(`metadata.json` with `from_code` and `to_code`, the model in `model/`), `sentencepiece.model` beside `model/`.
The language pair is the package's, or the one the directory's name says."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from transformer.hugging_face.files import MAX_TOKENIZER_BYTES, read_bounded, read_json, regular_file
from transformer.io.checkpoint import CheckpointError
from transformer.toolkits.ctranslate2 import spec
from transformer.toolkits.ctranslate2.binary import ModelBin
from transformer.toolkits.languages import pair_named
from transformer.toolkits.vocabulary import PAD

MAX_PIECE_BYTES = 256  # a piece as a vocabulary file writes it, escaped and quoted, with room to spare
SPLITTERS = (("source.spm", "target.spm"), ("sentencepiece.model", "sentencepiece.model"))
TOKENS = {"unk_token": ("<unk>", "<unk>"), "bos_token": ("<s>", "<s>"), "eos_token": ("</s>", "</s>")}  # default, ours


@dataclass(frozen=True)
class Ct2Files:
    """Where a CTranslate2 model's files are: its directory, the SentencePiece models' folder, the package's."""

    model: Path  # the folder of model.bin
    splitters: tuple[Path, Path]
    package: Path  # the folder named in the list: the Argos package, or the model's own
    languages: dict[str, str]
    argos: bool


def find_files(path: Path) -> Ct2Files:
    """The files of the CTranslate2 directory or Argos package at `path` (or of the model.bin given itself)."""
    path = path.parent if path.is_file() else path
    argos = path.is_dir() and regular_file(path, "metadata.json") is not None and (path / "model").is_dir()
    model = path / "model" if argos else path
    if regular_file(model, "model.bin") is None:
        raise CheckpointError(f"{path.name} holds no model.bin: not a CTranslate2 model")
    languages = _package_languages(path) if argos else pair_named(path.name, "", "")
    for folder in (model, path.parent if path.name == "model" else path) if not argos else (path, model):
        for source, target in SPLITTERS:
            if regular_file(folder, source) and regular_file(folder, target):
                return Ct2Files(model, (folder / source, folder / target), path, languages, argos)
        found = sorted(p.name for p in folder.glob("*.model") if regular_file(folder, p.name))
        if len(found) == 1:
            return Ct2Files(model, (folder / found[0],) * 2, path, languages, argos)  # type: ignore[arg-type]
    raise CheckpointError(
        f"{path.name}: no SentencePiece model beside model.bin (source.spm and target.spm, or sentencepiece.model); "
        "a model split otherwise (BPE, a tokenizer outside the directory) is not read"
    )


def _package_languages(package: Path) -> dict[str, str]:
    """An Argos package's language pair (metadata.json's from_code and to_code)."""
    metadata = read_json(package, "metadata.json")
    codes = [metadata.get(key) if isinstance(metadata, dict) else None for key in ("from_code", "to_code")]
    if not all(isinstance(code, str) and 2 <= len(code) <= 12 for code in codes):
        return pair_named(package.name, "", "")
    return {"src": codes[0], "tgt": codes[1]}  # type: ignore[dict-item]


def read_vocabulary(directory: Path, stem: str, rows: int) -> list[str] | None:
    """The pieces of `stem`_vocabulary.json (a list) or .txt (a piece a line), none where neither is; a file larger
    than `rows` pieces can take is refused unread."""
    limit = min(MAX_TOKENIZER_BYTES, 1024 + MAX_PIECE_BYTES * rows)
    for suffix in ("json", "txt"):
        name = f"{stem}_vocabulary.{suffix}"
        if regular_file(directory, name) is None:
            continue
        data = read_bounded(directory, name, limit)
        try:
            pieces = json.loads(data) if suffix == "json" else data.decode().split("\n")
        except (ValueError, RecursionError):
            raise CheckpointError(f"{name} in {directory.name} is not a vocabulary: not JSON or not UTF-8") from None
        if suffix == "txt" and pieces and pieces[-1] == "":
            pieces.pop()
        if not isinstance(pieces, list) or not all(isinstance(piece, str) for piece in pieces):
            raise CheckpointError(f"{name} in {directory.name} is not a list of pieces")
        if len(pieces) != rows or len(set(pieces)) != len(pieces):
            raise CheckpointError(
                f"{name} in {directory.name} holds {len(pieces):,} pieces{' (some repeated)' * (len(set(pieces)) != len(pieces))}"
                f" for an embedding of {rows:,} rows: not this model's vocabulary"
            )
        return pieces
    return None


def vocabularies(directory: Path, shape: spec.Shape) -> tuple[list[str], list[str]]:
    """The source's and the target's pieces (one shared list, or one a side)."""
    shared = read_vocabulary(directory, "shared", shape.target_vocabulary)
    if shared is not None:
        if shape.source_vocabulary != shape.target_vocabulary:
            raise CheckpointError(f"{directory.name}: one shared vocabulary for embeddings of different sizes")
        return shared, shared
    sides = [
        read_vocabulary(directory, side, rows)
        for side, rows in (("source", shape.source_vocabulary), ("target", shape.target_vocabulary))
    ]
    if sides[0] is None or sides[1] is None:
        raise CheckpointError(f"{directory.name} holds no shared_vocabulary nor source_ and target_vocabulary files")
    return sides[0], sides[1]


def special_names(options: dict[str, Any]) -> dict[str, str]:
    """config.json's special tokens (unk, bos, eos) and OpenNMT-py's `<blank>` padding, each with this project's name."""
    return {str(options.get(key) or default): ours for key, (default, ours) in TOKENS.items()} | {"<blank>": PAD}


def renamed(pieces: list[str], names: dict[str, str]) -> list[str]:
    """The pieces with the special tokens under this project's names, where those names are free."""
    free = {theirs: ours for theirs, ours in names.items() if theirs == ours or ours not in pieces}
    return [free.get(piece, piece) for piece in pieces]


def weights_type(index: ModelBin) -> str:
    """The type most of the weight matrices are stored in (int8, float16, ...; position tables and norms, which
    CTranslate2 leaves in float32, not counted)."""
    counts: dict[str, int] = {}
    for name, variable in index.variables.items():
        if not name.endswith("/weight"):
            continue
        counts[variable.dtype_name] = counts.get(variable.dtype_name, 0) + variable.numel
    return max(counts, key=counts.__getitem__) if counts else "float32"
