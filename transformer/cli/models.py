"""The import commands (`IMPORTERS`: a Hugging Face or a toolkit's model as a checkpoint of this project, converted
once) and `train-lens` (a tuned lens fitted to a checkpoint)."""

from __future__ import annotations

import argparse
import importlib
from pathlib import Path

import torch

from transformer.io.checkpoint import DEFAULT_CHECKPOINT


def cmd_import(args: argparse.Namespace) -> int:
    from transformer.io.checkpoint import save_checkpoint

    module, reader = args.importer  # imported only when a conversion runs: the command line starts without it
    checkpoint = getattr(importlib.import_module(module), reader)(args.directory)
    save_checkpoint(args.out, checkpoint.model, checkpoint.tokenizer, checkpoint.metadata, getattr(torch, args.dtype))
    config = checkpoint.config
    print(
        f"wrote {args.out}: {config.parameter_count():,} parameters, {config.n_encoder_layers}+"
        f"{config.n_decoder_layers} layers, {config.n_heads} heads, vocabulary {config.src_vocab_size:,}"
    )
    return 0


def cmd_train_lens(args: argparse.Namespace) -> int:
    from tqdm import tqdm

    from transformer.analysis.tuned_lens import fit_tuned_lens
    from transformer.io.checkpoint import load_checkpoint
    from transformer.io.tuned_lens_file import file_sha256, save_tuned_lens, tuned_lens_path
    from transformer.text.files import read_parallel

    if not Path(args.checkpoint).is_file():
        raise ValueError(f"{args.checkpoint} is not a checkpoint file (a tuned lens is stored beside one)")
    checkpoint = load_checkpoint(args.checkpoint)
    sources, targets = read_parallel(args.src, args.tgt)
    with tqdm(total=args.steps, desc="fitting the tuned lens", unit="step") as bar:

        def advance(step: int, loss: float) -> None:
            bar.update(step - bar.n)
            bar.set_postfix(kl=f"{loss:.3f}")

        lens = fit_tuned_lens(checkpoint.model, checkpoint.tokenizer, sources, targets, args.steps, progress=advance)
    out = Path(args.out) if args.out else tuned_lens_path(Path(args.checkpoint))
    save_tuned_lens(out, lens, file_sha256(args.checkpoint), f"{Path(args.src).name} / {Path(args.tgt).name}")
    for layer, (plain, tuned) in enumerate(zip(lens.kl_logit, lens.kl_tuned)):
        print(
            f"decoder layer {layer + 1}: mean KL from the output {plain:.3f} nats with the logit lens, "
            f"{tuned:.3f} with the tuned lens (held-out pairs)"
        )
    print(f"wrote {out}")
    return 0


# Each toolkit's converter: what it converts, what the directory holds, and the reader (its module, its name).
IMPORTERS = {
    "import-hf": (
        "convert a Hugging Face model directory (Marian, M2M100, NLLB, mBART-50, BART, T5)",
        "saved by the model's and the tokenizer's save_pretrained",
        ("transformer.hugging_face.directory", "import_hf"),
    ),
    "import-fairseq": (
        "convert a fairseq translation model (docs/fairseq.md)",
        "its checkpoint (.pt), the data-bin's dict.SRC.txt and dict.TGT.txt, its SentencePiece model",
        ("transformer.toolkits.fairseq", "import_fairseq"),
    ),
    "import-marian": (
        "convert a model trained with Marian (docs/marian.md)",
        "its model.npz, the model.npz.decoder.yml naming its vocabularies, those .spm files",
        ("transformer.toolkits.marian", "import_marian_npz"),
    ),
    "import-eole": (
        "convert a model trained with eole (docs/eole.md)",
        "the folder eole saved: config.json, vocab.json, model.00.safetensors, its SentencePiece model",
        ("transformer.toolkits.eole", "import_eole"),
    ),
    "import-opennmt": (
        "convert a model trained with OpenNMT-py 3.x (docs/eole.md)",
        "its checkpoint (.pt, or the folder of one), the SentencePiece model beside it",
        ("transformer.toolkits.opennmt", "import_opennmt"),
    ),
    "import-ctranslate2": (
        "convert a CTranslate2 model or an Argos Translate package (docs/ctranslate2.md)",
        "its model.bin, config.json and vocabularies, the SentencePiece models beside them (or the package)",
        ("transformer.toolkits.ctranslate2.reader", "import_ctranslate2"),
    ),
}


def add_parsers(commands: argparse._SubParsersAction) -> None:
    """Registers this module's commands."""
    for name, (summary, holds, importer) in IMPORTERS.items():
        parser = commands.add_parser(name, help=summary)
        parser.add_argument("directory", help=holds)
        parser.add_argument("--out", required=True, help="the checkpoint file to write")
        parser.add_argument("--dtype", choices=["float32", "float16"], default="float32")
        parser.set_defaults(run=cmd_import, importer=importer)

    lens = commands.add_parser("train-lens", help="fit a tuned lens (an affine map per decoder layer) to a checkpoint")
    lens.add_argument("--checkpoint", default=str(DEFAULT_CHECKPOINT), help="checkpoint file (default: %(default)s)")
    lens.add_argument("--src", required=True, help="source sentences, one a line (.gz accepted)")
    lens.add_argument("--tgt", required=True, help="their translations, line by line (teacher forced)")
    lens.add_argument("--steps", type=int, default=200, help="optimisation steps of about 1,200 target tokens")
    lens.add_argument("--out", help="default: lenses/NAME.safetensors beside the checkpoint, where the app finds it")
    lens.set_defaults(run=cmd_train_lens)
