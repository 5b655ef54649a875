"""fairseq translation models read in place from what fairseq-preprocess and fairseq-train leave (docs/fairseq.md).

A directory holds the checkpoint (`checkpoint_best.pt`, `checkpoint_last.pt`, `model.pt` or one other `.pt`), the
data-bin's dictionaries `dict.SRC.txt` and `dict.TGT.txt`, and the SentencePiece model the text was split with
(`sentencepiece.bpe.model`, `spm.model` or `sentencepiece.model`). The checkpoint is read by the allow-listed
unpickler (`pickled`): nothing in it runs. fairseq's `transformer` is the model Hugging Face's M2M100 was ported from,
without language codes: post-norm by default (pre-norm with a final norm on each side under --*-normalize-before),
sinusoids in halves with tensor2tensor's frequencies from row pad + 1 (or learned positions from there, and a layer
norm on the embeddings, where it was trained with them), embeddings times sqrt(d), the decoder started from </s> and
every source ended with it. A dictionary puts <s>, <pad>, </s>, <unk> at ids 0-3 before its file's
symbols. Two dictionaries are read as one vocabulary (`joint_vocabulary`).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from transformer.hugging_face.files import (
    MAX_TOKENIZER_BYTES,
    files_matching,
    read_bounded,
    regular_file,
    weights_fitting,
)
from transformer.hugging_face.seq2seq import (
    FINAL_NORMS,
    POSITION_TABLES,
    SIDE_NORMS,
    checkpoint_from_state,
    marian_state,
)
from transformer.io.checkpoint import Checkpoint, CheckpointError
from transformer.model.config import ConfigError, TransformerConfig, shown
from transformer.text.tokenizer import Tokenizer, TokenizerError
from transformer.toolkits.pickled import options_of, read_pickled
from transformer.toolkits.vocabulary import joint_embeddings, joint_vocabulary

CHECKPOINT_NAMES = ("checkpoint_best.pt", "checkpoint_last.pt", "model.pt")
SENTENCEPIECE_NAMES = ("sentencepiece.bpe.model", "spm.model", "sentencepiece.model")
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>"]  # fairseq's Dictionary, ids 0-3
MAX_DICTIONARY_LINES = 1_000_000
ACTIVATIONS = {"relu": "relu", "gelu": "gelu", "gelu_fast": "gelu_tanh", "gelu_accurate": "gelu_tanh", "swish": "swish"}
# Options whose model this format cannot hold (yet), each with what it is; refused naming it.
REFUSED_OPTIONS = {
    "no_token_positional_embeddings": "no positions",
    "adaptive_input": "adaptive input embeddings",
    "cross_self_attention": "cross+self-attention",
    "no_cross_attention": "a decoder without cross-attention",
    "no_decoder_final_norm": "a pre-norm decoder without its final norm",
}


@dataclass(frozen=True)
class FairseqFiles:
    """The files of a fairseq model directory, found by name."""

    directory: Path
    checkpoint: Path
    sentencepiece: str  # its name in the directory, read there (a link to a file further in keeps its own name)


def find_files(path: Path) -> FairseqFiles:
    """A fairseq directory's checkpoint and SentencePiece model (or those beside a `.pt` file given itself);
    CheckpointError naming what is missing."""
    directory = path.parent if path.is_file() else path
    checkpoint = path if path.is_file() else _checkpoint_in(directory)
    sentencepiece = next((name for name in SENTENCEPIECE_NAMES if regular_file(directory, name) is not None), None)
    if sentencepiece is None:
        bpe = " (bpecodes is subword-nmt's BPE, which is not read)" if (directory / "bpecodes").exists() else ""
        raise CheckpointError(
            f"{directory.name}: no SentencePiece model ({', '.join(SENTENCEPIECE_NAMES)}) to split the text with{bpe}"
        )
    return FairseqFiles(directory, checkpoint, sentencepiece)


def _checkpoint_in(directory: Path) -> Path:
    for name in CHECKPOINT_NAMES:
        found = regular_file(directory, name)
        if found is not None:
            return found
    others = files_matching(directory, "*.pt")
    if len(others) != 1:
        named = ", ".join(p.name for p in others[:5]) or "none"
        raise CheckpointError(f"{directory.name}: not one fairseq checkpoint (.pt) to read: {named}")
    return others[0]


def language_pair(saved: dict[str, Any], directory: Path) -> tuple[str, str]:
    """Source and target language: as the options name them (fairseq-train -s SRC -t TGT), else as the data-bin's name
    does (fairseq infers the pair from its files; its examples name it data-bin/NAME.SRC-TGT), else as the
    directory's name does; CheckpointError where none says which of the two dictionaries is the source's."""
    languages = dictionary_languages(directory)
    if len(languages) != 2:
        raise CheckpointError(
            f"{directory.name}: a fairseq model needs its data-bin's two dictionaries (dict.SRC.txt and dict.TGT.txt) "
            f"beside the checkpoint; found {len(languages)}"
        )
    options = options_of(options_of(saved.get("cfg")).get("task")) or options_of(saved.get("args"))
    stated = (options.get("source_lang"), options.get("target_lang"))
    if sorted(map(str, stated)) == languages:
        return stated  # type: ignore[return-value]
    for name in (Path(str(options.get("data", ""))).name, directory.name):
        for first, second in (languages, languages[::-1]):
            if f"{first}-{second}" in name:
                return first, second
    raise CheckpointError(
        f"{directory.name}: which of {' and '.join(languages)} is the source is not said: the checkpoint names no pair "
        f"(fairseq-train -s/-t) and neither its data-bin's name nor the directory's holds {'-'.join(languages)} or "
        f"{'-'.join(languages[::-1])}; rename the directory to say it (e.g. my-model.{'-'.join(languages)})"
    )


def dictionary_languages(directory: Path) -> list[str]:
    """The languages the directory's dictionaries name (dict.en.txt: en), in order."""
    return sorted(path.name.split(".")[1] for path in directory.glob("dict.*.txt"))


def dictionary_path(directory: Path, language: str) -> Path:
    """The dictionary of `language` in the directory, by its name there; CheckpointError where it is missing."""
    if regular_file(directory, f"dict.{language}.txt") is None:
        raise CheckpointError(
            f"{directory.name} lacks dict.{language}.txt: fairseq-preprocess writes the dictionaries into the "
            "data-bin; put them beside the checkpoint"
        )
    return directory / f"dict.{language}.txt"


def read_dictionary(path: Path) -> list[str]:
    """A fairseq dictionary's symbols by id: the four specials, then each line's symbol (`symbol count`, or with
    `#fairseq:overwrite` after it)."""
    try:
        text = read_bounded(path.parent, path.name, MAX_TOKENIZER_BYTES).decode()
    except UnicodeDecodeError:
        raise CheckpointError(f"{path.name} is not UTF-8 text") from None
    symbols = list(SPECIALS)
    for number, line in enumerate(text.splitlines()[: MAX_DICTIONARY_LINES + 1], start=1):
        fields = line.rstrip().rsplit(" ", 1)
        if len(fields) == 2 and fields[1] == "#fairseq:overwrite":
            fields = fields[0].rsplit(" ", 1)
        if len(fields) != 2 or not fields[1].isdigit():
            raise CheckpointError(f"{path.name}, line {number}: not a symbol and its count: {shown(line, 40)}")
        symbols.append(fields[0])
    if len(symbols) > MAX_DICTIONARY_LINES:
        raise CheckpointError(f"{path.name} has over {MAX_DICTIONARY_LINES:,} symbols: refused")
    return symbols


def model_options(saved: dict[str, Any]) -> dict[str, Any]:
    """The model's options: cfg.model in fairseq 0.10 and later, args before."""
    cfg = options_of(saved.get("cfg"))
    options = options_of(cfg.get("model")) or options_of(saved.get("args"))
    if not options:
        raise CheckpointError("the checkpoint holds no model options (cfg.model or args): not a fairseq checkpoint")
    return options


def fairseq_config(options: dict[str, Any], vocabulary_size: int, tied: bool) -> TransformerConfig:
    """This project's config for a fairseq transformer's options; ConfigError naming what this format cannot hold."""
    arch = str(options.get("arch", options.get("_name", "")))
    unsupported = [what for name, what in REFUSED_OPTIONS.items() if options.get(name)]
    if not arch.startswith("transformer") or arch.startswith(("transformer_lm", "transformer_align")):
        unsupported.insert(0, f"the architecture {shown(arch, 40)} (fairseq's transformer family is read)")
    if options.get("adaptive_softmax_cutoff"):
        unsupported.append("an adaptive softmax")
    learned = bool(options.get("encoder_learned_pos"))
    if bool(options.get("decoder_learned_pos")) != learned:
        unsupported.append("learned positions on one side only")
    if learned and options.get("max_source_positions") != options.get("max_target_positions"):
        unsupported.append("learned position tables of different lengths")
    for part in ("embed_dim", "ffn_embed_dim", "attention_heads", "normalize_before"):
        if options.get(f"encoder_{part}") != options.get(f"decoder_{part}"):
            unsupported.append(f"encoder and decoder of different {part.replace('_', ' ')}")
    width = options.get("encoder_embed_dim")
    if options.get("decoder_output_dim", width) != width or options.get("decoder_input_dim", width) != width:
        unsupported.append("a decoder whose input or output width is not its embeddings'")
    if options.get("activation_fn", "relu") not in ACTIVATIONS:
        unsupported.append(f"the activation {shown(options.get('activation_fn'), 20)}")
    if unsupported:
        raise ConfigError(f"this fairseq model has {', '.join(unsupported)}, which this format cannot hold")
    return TransformerConfig(
        src_vocab_size=vocabulary_size,
        tgt_vocab_size=vocabulary_size,
        d_model=width,
        n_heads=options.get("encoder_attention_heads"),
        d_ff=options.get("encoder_ffn_embed_dim"),
        n_encoder_layers=options.get("encoder_layers"),
        n_decoder_layers=options.get("decoder_layers"),
        dropout=float(options.get("dropout", 0.1)),
        max_len=min(options.get("max_source_positions", 1024), options.get("max_target_positions", 1024)),
        pad_id=1,
        unk_id=3,
        bos_id=0,
        eos_id=2,
        norm_first=bool(options.get("encoder_normalize_before")),
        tie_embeddings=tied,
        activation=ACTIVATIONS[options.get("activation_fn", "relu")],
        scale_embedding=not options.get("no_scale_embedding"),
        positional="learned" if learned else "sinusoidal",
        embedding_norm=bool(options.get("layernorm_embedding")),
        sinusoid_layout="halves",
        sinusoid_frequencies="tensor2tensor",
        position_offset=2,  # pad + 1: the first row a position reads, learned or not
        decoder_start_id=2,  # </s>
    )


def import_fairseq(path: str | Path, device: torch.device | str = "cpu") -> Checkpoint:
    """A fairseq model directory (or its `.pt` file, its dictionaries and SentencePiece model beside it) as a
    checkpoint of this project."""
    files = find_files(Path(path))
    saved = read_pickled(files.checkpoint)
    options, pair = model_options(saved), language_pair(saved, files.directory)
    source, target = (read_dictionary(dictionary_path(files.directory, language)) for language in pair)
    pieces, source_rows = joint_vocabulary(source, target, SPECIALS.index("<unk>"))
    weights = saved.get("model")
    if not isinstance(weights, dict) or not all(isinstance(t, torch.Tensor) for t in weights.values()):
        raise CheckpointError(f"{files.checkpoint.name} holds no state dict of tensors under 'model'")
    weights_fitting(files.checkpoint.name, weights)
    _check_rows(weights, {"encoder": (source, pair[0]), "decoder": (target, pair[1])})
    tied = bool(options.get("share_all_embeddings")) and source == target
    try:
        config = fairseq_config(options, len(pieces), tied)
        tokenizer = Tokenizer(read_bounded(files.directory, files.sentencepiece, MAX_TOKENIZER_BYTES), None, pieces)
    except (ConfigError, TypeError, ValueError, OverflowError, TokenizerError) as error:
        raise CheckpointError(f"{files.directory.name}: {str(error)[:300]}") from None
    state = fairseq_state(weights, config, source_rows)
    metadata = {
        "languages": {"src": pair[0], "tgt": pair[1]},
        "imported": {"from": "fairseq", "directory": files.directory.name, "file": files.checkpoint.name},
    }
    return checkpoint_from_state(config, state, tokenizer, metadata, device)


def _check_rows(weights: dict[str, torch.Tensor], sides: dict[str, tuple[list[str], str]]) -> None:
    """Each side's embedding has a row per symbol of its dictionary (a dictionary of another run is refused)."""
    for side, (symbols, language) in sides.items():
        embedding = weights.get(f"{side}.embed_tokens.weight")
        if embedding is None or embedding.dim() != 2 or len(embedding) != len(symbols):
            rows = "no" if embedding is None else f"{len(embedding):,}"
            raise CheckpointError(
                f"dict.{language}.txt has {len(symbols):,} symbols (with fairseq's 4 specials) and the {side}'s "
                f"embedding {rows} rows: the dictionary is not this model's"
            )


def fairseq_state(
    weights: dict[str, torch.Tensor], config: TransformerConfig, source_rows: list[int]
) -> dict[str, torch.Tensor]:
    """fairseq's weights under this project's names: its layers' names are Hugging Face's M2M100's without the
    `model.` prefix; with two dictionaries, each embedding laid out over the joint vocabulary (`joint_vocabulary`)."""
    # Stored types kept: the model lays each weight out in float32 as it takes it (a copy of all of them here first
    # held an F16 model twice)
    renamed = {f"model.{name}": tensor for name, tensor in weights.items() if not name.endswith("version")}
    state = marian_state(renamed, config, FINAL_NORMS | SIDE_NORMS)
    if config.positional == "learned":
        state |= {ours: renamed[theirs] for theirs, ours in POSITION_TABLES.items() if theirs in renamed}
    if config.tie_embeddings:
        return state
    if "decoder.output_projection.weight" not in weights:
        raise CheckpointError("the checkpoint lacks decoder.output_projection.weight")
    names = ("encoder.embed_tokens.weight", "decoder.embed_tokens.weight", "decoder.output_projection.weight")
    source_embedding, target_embedding, output = (weights[name] for name in names)  # their rows checked on reading
    return state | joint_embeddings(source_embedding, target_embedding, output, None, source_rows)


def is_fairseq_directory(path: Path) -> bool:
    """Whether path is a directory with a fairseq checkpoint and dictionaries (nothing is opened to tell)."""
    return path.is_dir() and any(path.glob("dict.*.txt")) and any(path.glob("*.pt"))


def describe_fairseq(directory: Path) -> str:
    """The checkpoint list's label for a fairseq directory, read without unpickling: its name, the language pair its
    dictionaries name, and the checkpoint's size."""
    try:
        size = f"{_checkpoint_in(directory).stat().st_size / 1e6:.1f} MB"
    except (CheckpointError, OSError):
        size = "no checkpoint to read"
    return " · ".join((directory.name, "/".join(dictionary_languages(directory)), "fairseq", size))
