"""Any model the app and the command line open by path: a checkpoint file of this project, a Hugging Face
directory, a fairseq directory (or its `.pt` file), a Marian one (or its `.npz`), an eole folder or an OpenNMT-py one
(or its `.pt`), a CTranslate2 directory (or its `model.bin`) or an Argos Translate package, told apart by what the
path holds, never by running it."""

from __future__ import annotations

from pathlib import Path

import torch

from transformer.hugging_face.directory import describe_hf, import_hf, is_hf_directory
from transformer.io.checkpoint import Checkpoint, load_checkpoint
from transformer.toolkits.ctranslate2.reader import (
    describe_ctranslate2,
    import_ctranslate2,
    is_ctranslate2_directory,
)
from transformer.toolkits.eole import describe_eole, import_eole, is_eole_directory, is_eole_path
from transformer.toolkits.fairseq import describe_fairseq, import_fairseq, is_fairseq_directory
from transformer.toolkits.marian import describe_marian_npz, import_marian_npz, is_marian_directory
from transformer.toolkits.opennmt import describe_opennmt, import_opennmt, is_opennmt_directory

# Each directory reader's test (nothing opened) and the checkpoint list's label, in the order they are told apart:
# the Hugging Face test, which reads config.json, last.
DIRECTORY_READERS = [
    (is_eole_directory, describe_eole),
    (is_fairseq_directory, describe_fairseq),
    (is_opennmt_directory, describe_opennmt),
    (is_marian_directory, describe_marian_npz),
    (is_ctranslate2_directory, describe_ctranslate2),
    (is_hf_directory, describe_hf),
]


def is_model_directory(path: Path) -> bool:
    """Whether path is a directory of a model read here (Hugging Face's, fairseq's, Marian's, eole's, OpenNMT-py's,
    CTranslate2's, an Argos Translate package)."""
    return any(is_reader_directory(path) for is_reader_directory, _ in DIRECTORY_READERS)


def describe_directory(path: Path) -> str:
    """The checkpoint list's label for a model directory, read without loading the model."""
    for is_reader_directory, describe in DIRECTORY_READERS:
        if is_reader_directory(path):
            return describe(path)
    return describe_hf(path)  # a directory no reader knows: its label says why


def load_any_checkpoint(path: str | Path, device: torch.device | str = "cpu") -> Checkpoint:
    """A checkpoint file, or a toolkit's model converted as it is read (the command line's and the app's
    --checkpoint): a fairseq directory or `.pt` file (its dictionaries beside it), a Marian directory or `.npz`
    file, an eole folder (or its config.json or weights), an OpenNMT-py folder or `.pt` file, a CTranslate2 directory
    (or its model.bin) or an Argos Translate package, a Hugging Face directory."""
    path = Path(path)
    if is_ctranslate2_directory(path.parent if path.name == "model.bin" else path):
        return import_ctranslate2(path, device)
    if is_eole_path(path):
        return import_eole(path, device)
    lone_pt = path.suffix == ".pt" and path.is_file()
    if is_fairseq_directory(path) or (lone_pt and any(path.parent.glob("dict.*.txt"))):
        return import_fairseq(path, device)
    if is_opennmt_directory(path) or lone_pt:
        return import_opennmt(path, device)
    if is_marian_directory(path) or (path.suffix == ".npz" and path.is_file()):
        return import_marian_npz(path, device)
    return import_hf(path, device) if path.is_dir() else load_checkpoint(path, device)
