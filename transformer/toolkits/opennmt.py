"""OpenNMT-py 3.x translation models read in place from the checkpoint `onmt_train` saves (docs/eole.md).

A folder holds the checkpoint (`model_step_N.pt`: the last step's where there are several, or any one `.pt`) and the
SentencePiece model its transform names (`spm.model`, say). The checkpoint is read by the allow-listed unpickler
(`pickled`): its options are an `argparse.Namespace`, its vocabularies plain lists (3.x's); a 2.x file, whose
vocabularies are torchtext objects, names a global off the list and is refused unread. eole is OpenNMT-py's successor
and its transformer is OpenNMT-py's renamed: the options and the weights are read as eole's (`eole_checkpoint`),
the source without `</s>` among them.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import torch

from transformer.hugging_face.files import files_matching, weights_fitting
from transformer.io.checkpoint import Checkpoint, CheckpointError
from transformer.model.config import shown
from transformer.toolkits.eole import eole_checkpoint, sentencepiece_files, vocabularies_of
from transformer.toolkits.languages import listing, pair_named
from transformer.toolkits.pickled import options_of, read_pickled

STEP = re.compile(r".*_step_(\d+)\.pt")
POSITIONS = {0: "no", -1: "Rotary", -2: "Alibi"}  # max_relative_positions without sinusoids; above 0: Shaw's
# OpenNMT-py's weights' names, as eole's (in order: a layer's norms before the layer's other parts).
RENAMES = [
    (re.compile(r"^encoder\.transformer\.(\d+)\.layer_norm\."), r"encoder.transformer_layers.\1.input_layernorm."),
    (re.compile(r"^encoder\.transformer\.(\d+)\."), r"encoder.transformer_layers.\1."),
    (re.compile(r"\.layer_norm_1\."), ".input_layernorm."),
    (re.compile(r"\.layer_norm_2\."), ".precontext_layernorm."),
    (re.compile(r"\.feed_forward\.layer_norm\."), ".post_attention_layernorm."),
    (re.compile(r"\.feed_forward\.w_1\."), ".mlp.gate_up_proj."),
    (re.compile(r"\.feed_forward\.w_2\."), ".mlp.down_proj."),
    (re.compile(r"^encoder\.embeddings\.make_embedding\.(emb_luts\.0\.)?"), "src_emb."),
    (re.compile(r"^decoder\.embeddings\.make_embedding\.(emb_luts\.0\.)?"), "tgt_emb."),
    (re.compile(r"^(src|tgt)_emb\.weight$"), r"\1_emb.embeddings.weight"),
]


def eole_options(opt: dict[str, Any]) -> dict[str, Any]:
    """OpenNMT-py's options as an eole config.json holds them (what eole's reader refuses, it refuses here too)."""
    positions = (
        opt.get("position_encoding_type", "SinusoidalInterleaved")
        if opt.get("position_encoding")
        else POSITIONS.get(opt.get("max_relative_positions", 0), "Relative")
    )
    qkv_bias = bool(opt.get("add_qkvbias", False))
    common = {
        "hidden_size": opt.get("hidden_size", opt.get("rnn_size")),
        "heads": opt.get("heads"),
        "transformer_ff": opt.get("transformer_ff"),
        "mlp_activation_fn": opt.get("pos_ffn_activation_fn", "relu"),
        "layer_norm": opt.get("layer_norm", "standard"),
        "norm_eps": opt.get("norm_eps", 1e-6),
        "add_qkvbias": qkv_bias,
        "add_final_linear_bias": qkv_bias,  # OpenNMT-py's output projection follows the query's
        "add_ffnbias": bool(opt.get("add_ffnbias", False)),
        "heads_kv": opt.get("num_kv") or None,
        "position_encoding_type": positions,
        **{name: opt.get(name, 0) for name in ("sliding_window", "num_experts", "relative_positions_buckets")},
        **{name: bool(opt.get(name)) for name in ("parallel_residual", "shared_layer_norm")},
    }
    task = (opt.get("model_task", "seq2seq"), opt.get("model_type", "text"))
    decoder = "average-attention" if opt.get("self_attn_type") == "average" else opt.get("decoder_type")
    return {
        "architecture": "transformer" if task == ("seq2seq", "text") else "/".join(map(str, task)),
        "encoder": common | {"encoder_type": opt.get("encoder_type"), "layers": opt.get("enc_layers")},
        "decoder": common | {"decoder_type": decoder, "layers": opt.get("dec_layers"), "with_cross_attn": True},
        "share_embeddings": bool(opt.get("share_embeddings")),
        "share_decoder_embeddings": bool(opt.get("share_decoder_embeddings")),
        "generator_function": opt.get("generator_function", "softmax"),
        "embeddings": {
            size: opt.get(size, opt.get("word_vec_size")) for size in ("src_word_vec_size", "tgt_word_vec_size")
        },
    }


def eole_weights(saved: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The checkpoint's model and generator weights under eole's names."""
    model, generator = saved.get("model"), saved.get("generator") or {}
    if not isinstance(model, dict) or not isinstance(generator, dict):
        raise CheckpointError("the checkpoint holds no state dict under 'model': not an OpenNMT-py checkpoint")
    renamed = {}
    for name, tensor in model.items():
        for pattern, replacement in RENAMES:
            name = pattern.sub(replacement, name)
        renamed[name] = tensor
    renamed |= {f"generator.{name}": tensor for name, tensor in generator.items()}
    if not all(isinstance(tensor, torch.Tensor) for tensor in renamed.values()):
        raise CheckpointError("the checkpoint's model holds something other than tensors")
    return renamed


def find_checkpoint(path: Path) -> Path:
    """The `.pt` given, or the folder's: its only one, or the last step's of several `NAME_step_N.pt`."""
    if path.is_file():
        return path
    found = files_matching(path, "*.pt")
    steps = [p for p in found if STEP.fullmatch(p.name)]
    if len(found) == 1 or (steps and len(steps) == len(found)):
        return max(found, key=lambda p: int(m.group(1)) if (m := STEP.fullmatch(p.name)) else 0)
    raise CheckpointError(f"{path.name}: not one OpenNMT-py checkpoint (.pt) to read: {len(found)} found")


def import_opennmt(path: str | Path, device: torch.device | str = "cpu") -> Checkpoint:
    """An OpenNMT-py 3.x checkpoint (or its folder), its SentencePiece model beside it, as a checkpoint of this
    project."""
    checkpoint = find_checkpoint(Path(path))
    directory = checkpoint.parent
    try:
        saved = read_pickled(checkpoint)
    except CheckpointError as error:
        if "torchtext" not in str(error):
            raise
        raise CheckpointError(
            f"{error}: an OpenNMT-py 2.x checkpoint, whose vocabularies are torchtext objects; OpenNMT-py 3's "
            "tools/convertv2_v3.py converts it to the 3.x checkpoint read here"
        ) from None
    opt = options_of(saved.get("opt"))
    if not opt:
        fairseq = " (a fairseq checkpoint: put its data-bin's dict.SRC.txt and dict.TGT.txt beside it)"
        raise CheckpointError(
            f"{checkpoint.name} holds no options ('opt'): not an OpenNMT-py checkpoint"
            + (fairseq if "cfg" in saved or "args" in saved else "")
        )
    if opt.get("copy_attn"):
        raise CheckpointError(f"{directory.name}: this OpenNMT-py model has a copy attention, which is not read")
    config = {"model": eole_options(opt), "training": {"dropout": opt.get("dropout")}}
    config |= {name: opt.get(name) for name in ("transforms", "src_vocab", "tgt_vocab")}
    config["transforms_configs"] = {
        "sentencepiece": {f"{s}_subword_model": opt.get(f"{s}_subword_model") for s in ("src", "tgt")}
    }
    vocabularies = vocabularies_of(saved.get("vocab"), f"{checkpoint.name}'s vocab")
    split_with = sentencepiece_files(config, directory)
    named = [Path(str(opt.get(side, ""))).name for side in ("src_vocab", "tgt_vocab")]
    imported = {"from": "OpenNMT-py", "directory": directory.name, "file": checkpoint.name}
    return eole_checkpoint(
        config,
        vocabularies,
        split_with,
        lambda: weights_fitting(checkpoint.name, eole_weights(saved)),
        directory,
        named,
        imported,
        device,
    )


def is_opennmt_directory(path: Path) -> bool:
    """Whether path is a folder with an OpenNMT-py checkpoint: a `.pt` without fairseq's dictionaries beside it, and
    a SentencePiece model (nothing is opened to tell)."""
    return path.is_dir() and any(path.glob("*.pt")) and not any(path.glob("dict.*.txt")) and any(path.glob("*.model"))


def describe_opennmt(directory: Path) -> str:
    """The checkpoint list's label for an OpenNMT-py folder, read without unpickling: its name, the language pair
    its name says, and the checkpoint's size."""
    try:
        size = f"{find_checkpoint(directory).stat().st_size / 1e6:.1f} MB"
    except (CheckpointError, OSError) as error:
        size = f"not readable: {shown(str(error), 60)}"
    return listing(directory.name, pair_named(directory.name, "", ""), "OpenNMT-py", size)
