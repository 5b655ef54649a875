"""python -m benchmarks.hf_families [--quick] [--nllb [SHAPE ...]] [--app] [--app-on-device] [--ctranslate2]: each Hugging Face
family read here, imported and decoding token by token against transformers' own generate in the same run, at the
tests' size and at opus-mt's (d_model 512, 6+6 layers); and models of NLLB-200's configurations (random weights: the
distilled 600M by default, 1.3B and 3.3B when named) imported: time and peak memory, and their decode speed. With
--app, the app in Chromium with the opus-mt-shaped Marian model and each NLLB shape (and the shipped default in the
same run): a link to the step view, a Translate of 20 words, step clicks. With --app-on-device, the app's own work for each NLLB shape's link and Translate on the GPU against the
CPU held to 2 cores (benchmarks.app_on_device: no browser needed). With --ctranslate2, each NLLB shape converted to an
int8 CTranslate2 directory by CTranslate2's own converter and read (docs/ctranslate2.md) against reading the same
model's safetensors directory, each in a fresh process: time and peak memory, against the weights' float32 bytes.

Needs `transformers` (requirements-dev.txt). Greedy, 40 tokens, the end token never chosen, so both sides produce
the same number of tokens; the forced first token (a language code, BART's <s>) counts as one of them.
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from benchmarks.model_speed import Row, machine, median_ms, no_eos_chooser, table
from tests.fixtures.hf_models import (
    FAIRSEQ_IDS,
    TINY,
    bart_shape,
    save_bart,
    save_m2m100,
    save_marian,
    save_mbart50,
    save_nllb,
    save_t5,
)
from transformer.decoding.greedy import decode_ids, generate
from transformer.decoding.lens import read_lens
from transformer.decoding.result import source_ids
from transformer.hugging_face.directory import import_hf
from transformer.io.checkpoint import APP_ROOM_BYTES
from transformer.io.memory import memory_available

TOKENS = 40
SENTENCE = "the red dog runs in the blue park and a small cat sits on the big ball"
CORPUS = [SENTENCE, "a woman jumps in the green street", "le chien rouge court dans le parc bleu"] * 40
OPUS_MT = bart_shape(d_model=512, layers=6, heads=8, ffn=2048, positions=512)
NLLB_600M = (
    bart_shape(d_model=1024, layers=12, heads=16, ffn=4096, positions=1024) | FAIRSEQ_IDS | dict(scale_embedding=True)
)
NLLB_TOKENS = 256_204  # NLLB-200's tokenizer: its embedding has two rows more
NLLB_SHAPES = {  # the released models' config.json shapes
    "600M": NLLB_600M,
    "1.3B": NLLB_600M | dict(encoder_layers=24, decoder_layers=24, encoder_ffn_dim=8192, decoder_ffn_dim=8192),
    "3.3B": NLLB_600M
    | dict(d_model=2048, encoder_layers=24, decoder_layers=24, encoder_ffn_dim=8192, decoder_ffn_dim=8192),
}


def family_builders() -> dict:
    return {
        "Marian": lambda directory, sizes: save_marian(directory, CORPUS, CORPUS, sizes),
        "M2M100": lambda directory, sizes: save_m2m100(directory, CORPUS, sizes),
        "NLLB-200": lambda directory, sizes: save_nllb(directory, CORPUS, sizes),
        "mBART-50": lambda directory, sizes: save_mbart50(directory, CORPUS, sizes),
        "BART": lambda directory, sizes: save_bart(directory, CORPUS, sizes),
        "T5": lambda directory, sizes: save_t5(directory, CORPUS, t5_sizes(sizes)),
        "Flan-T5": lambda directory, sizes: save_t5(directory, CORPUS, t5_sizes(sizes), flan=True),
    }


def t5_sizes(sizes: dict) -> dict:
    """The same sizes in T5Config's names."""
    return dict(
        d_model=sizes["d_model"],
        d_kv=sizes["d_model"] // sizes["encoder_attention_heads"],
        d_ff=sizes["encoder_ffn_dim"],
        num_layers=sizes["encoder_layers"],
        num_decoder_layers=sizes["decoder_layers"],
        num_heads=sizes["encoder_attention_heads"],
    )


def decode_row(family: str, size: str, directory: Path, repeats: int, device: str = "cpu") -> Row:
    """Ours (recording every attention map, as the app's step view does) against transformers' generate, per token,
    both on `device`."""
    from transformers import AutoModelForSeq2SeqLM

    ours = import_hf(directory, device)
    theirs = AutoModelForSeq2SeqLM.from_pretrained(directory, attn_implementation="eager").to(device).eval()
    ids, _ = source_ids(ours.tokenizer, SENTENCE, ours.config.max_len)
    src, prefix = torch.tensor([ids], device=device), ours.tokenizer.target_prefix_ids
    choose = no_eos_chooser(ours.config.eos_id)
    forced = prefix[0] if prefix else None

    def hugging_face() -> None:
        with torch.no_grad():
            theirs.generate(
                src,
                num_beams=1,
                do_sample=False,
                max_new_tokens=TOKENS,
                min_new_tokens=TOKENS,
                forced_bos_token_id=forced,
                forced_eos_token_id=None,
            )

    def timed(run):  # a GPU's work is queued: a run ends when the device has done it
        return median_ms(lambda: (run(), torch.cuda.synchronize() if device == "cuda" else None), repeats)

    with torch.no_grad():
        theirs_ms = timed(hugging_face)
        ours_ms = timed(lambda: generate(ours.model, src, TOKENS, choose, need_weights=True, prefix=prefix))
        silent_ms = timed(lambda: generate(ours.model, src, TOKENS, choose, prefix=prefix))
        whole_ms = timed(lambda: decode_ids(ours.model, ours.tokenizer, ids, choose, max_new_tokens=TOKENS))
        result = decode_ids(ours.model, ours.tokenizer, ids, choose, max_new_tokens=TOKENS)
        lens, asked = "every layer's logit lens, ", ""
        if not result.lens.read:  # a large vocabulary: the lens waits to be asked for
            lens_ms = timed(lambda: read_lens(ours.model, result.lens, result.tgt_ids))
            lens, asked = "", f"; every layer's logit lens when asked: {lens_ms:.0f} ms for the {TOKENS} tokens"
    on = "" if device == "cpu" else f" on {torch.cuda.get_device_name()}"
    return Row(
        f"{family}, {size}{on}: greedy, per token, every map recorded",
        "transformers generate, per token",
        theirs_ms / TOKENS,
        ours_ms / TOKENS,
        "report",
        f"recording nothing: {silent_ms / TOKENS:.2f} ms ({silent_ms / theirs_ms:.2f} of theirs); the app's whole "
        f"decode ({lens}top-k, entropy): {whole_ms / TOKENS:.2f} ms ({whole_ms / theirs_ms:.2f}){asked}",
    )


def save_nllb_at_size(directory: Path, shape: str = "600M") -> None:
    """An NLLB-200 configuration (NLLB_SHAPES) with random weights and a tokenizer of its size (made-up pieces)."""
    from transformers import M2M100Config, M2M100ForConditionalGeneration, NllbTokenizer

    specials = ["<s>", "<pad>", "</s>", "<unk>"]
    words = NLLB_TOKENS - len(specials) - 202 - 1  # the 202 language codes and <mask> follow
    vocabulary = {piece: i for i, piece in enumerate(specials + [f"▁w{i}" for i in range(words)])}
    tokenizer = NllbTokenizer(vocab=vocabulary, merges=[], src_lang="eng_Latn", tgt_lang="fra_Latn")
    assert len(tokenizer) == NLLB_TOKENS, len(tokenizer)
    tokenizer.save_pretrained(directory)
    with torch.device("meta"):
        model = M2M100ForConditionalGeneration(M2M100Config(vocab_size=NLLB_TOKENS + 2, **NLLB_SHAPES[shape]))
    model = model.to_empty(device="cpu")
    model.tie_weights()  # to_empty gave each tied name a tensor of its own
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.02)
    model.save_pretrained(directory)


IMPORT_SCRIPT = """
import json, re, sys, time
import torch
from transformer.toolkits.opening import load_any_checkpoint
from transformer.decoding.strategies import DecodeSettings, decode_text
torch.set_grad_enabled(False)
def memory_mb(field):  # this process's own figures (ru_maxrss would carry the parent's over exec)
    return int(re.search(field + r":\\s+(\\d+) kB", open("/proc/self/status").read()).group(1)) / 1024
before = memory_mb("VmRSS")
loaded = time.perf_counter()
checkpoint = load_any_checkpoint(sys.argv[1])
imported, held, import_peak = time.perf_counter(), memory_mb("VmRSS"), memory_mb("VmHWM")
result = decode_text(checkpoint.model, checkpoint.tokenizer, "w1 w2 w3 w4 w5 w6 w7 w8", DecodeSettings(max_new_tokens=20))
decoded = time.perf_counter()
print(json.dumps({"import_s": imported - loaded, "decode_s": decoded - imported, "tokens": len(result.tgt_ids),
                  "parameters": sum(p.numel() for p in checkpoint.model.parameters()),
                  "rss_before_mb": before, "import_peak_mb": import_peak, "peak_mb": memory_mb("VmHWM"),
                  "rss_imported_mb": held,
                  "rss_decoding_mb": memory_mb("VmRSS")}))
"""


# The app rows' sentences: words of the random tokenizers' corpus (NLLB-600M's made-up pieces know none: there the
# two differ in length, so that the Translate has a result of its own to draw).
APP_FIRST = "the red dog runs in the blue park and a small cat sits on the big ball near the"
APP_SECOND = "a woman jumps in the green street and the red dog runs to the blue park with a small cat"


def app_rows_at(label: str, path: Path, on_device: bool = False) -> list[Row]:
    """The app in Chromium with the model in `path`, a directory or a file (benchmarks.app_at_size); or if
    `on_device` its own work on the GPU and on 2 CPU cores, through AppTest (benchmarks.app_on_device)."""
    from benchmarks.app_on_device import device_rows, linked_checkpoint

    with linked_checkpoint(path, re.sub(r"[^a-z0-9]+", "-", label.lower()).strip("-")) as name:
        if on_device:
            return device_rows(label, name, APP_FIRST, APP_SECOND, threads=2)
        from benchmarks.app_at_size import app_rows  # imports Playwright, which a GPU machine may not have

        return app_rows(label, name, APP_FIRST, APP_SECOND)


def printed_rows(rows: list[Row]) -> list[Row]:
    """Rows without a baseline, each printed as a line of the table as soon as it is measured."""
    print(*(table([row]).splitlines()[-1] for row in rows), sep="\n", flush=True)
    return rows


def opened(path: Path) -> dict:
    """A model directory or checkpoint file opened and decoding in a fresh process: its time and memory figures."""
    out = subprocess.run([sys.executable, "-c", IMPORT_SCRIPT, str(path)], capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def nllb_report(shape: str, repeats: int, device: str, app: bool, on_device: bool) -> tuple[list[Row], str]:
    """Builds the model, then opens it and translates in a fresh process (its memory is the opening's and the
    decoding's alone), as a directory and as the file `import-hf` writes of it; its decode against transformers';
    if `app` the app's rows in Chromium with each, and if `on_device` the app's own work on each device. A step
    that would not fit in this machine's memory (ours and theirs at once; the file, which opens holding its bytes
    beside its weights) is left out and said so."""
    sizes, label = NLLB_SHAPES[shape], f"NLLB-{shape}'s shape"
    with tempfile.TemporaryDirectory() as folder, tempfile.TemporaryDirectory() as elsewhere:
        directory, file = Path(folder), Path(elsewhere) / f"nllb-{shape.lower()}.safetensors"
        started = time.perf_counter()
        save_nllb_at_size(directory, shape)
        built = time.perf_counter() - started
        weights = (directory / "model.safetensors").stat().st_size
        figures, rows, notes = opened(directory), [], []
        twice_fits = 2.3 * weights + APP_ROOM_BYTES < (memory_available() or 0)
        if twice_fits:
            size = f"{label[:-8]}'s size (d {sizes['d_model']}, {sizes['encoder_layers']}+{sizes['decoder_layers']}, 256k pieces)"
            rows.append(printed(decode_row("NLLB-200", size, directory, repeats, device)))
        else:
            notes.append("no decode against transformers (the two models would not fit in memory at once)")
        if on_device:
            rows += printed_rows(app_rows_at(label, directory, on_device=True))
        if app:
            rows += printed_rows(app_rows_at(label, directory))
        if twice_fits:
            started = time.perf_counter()
            command = [sys.executable, "-m", "transformer", "import-hf", folder, "--out", str(file)]
            subprocess.run(command, capture_output=True, check=True)
            written, from_file = time.perf_counter() - started, opened(file)
            notes.append(
                f"`import-hf` wrote it as a {file.stat().st_size / 2**30:.2f} GiB file in {written:.0f} s; that file "
                f"opened in {from_file['import_s']:.1f} s, its peak memory {from_file['import_peak_mb']:,.0f} MB, "
                f"{from_file['rss_imported_mb']:,.0f} MB held once opened"
            )
            if app:
                rows += printed_rows(app_rows_at(f"{label}, its file", file))
        else:
            notes.append("no file written (it opens holding its bytes beside its weights: more than this machine has)")
    return rows, (
        f"{label} ({figures['parameters']:,} parameters, model.safetensors {weights / 2**30:.2f} GiB, built with "
        f"transformers in {built:.0f} s): import {figures['import_s']:.1f} s, its peak memory "
        f"{figures['import_peak_mb']:,.0f} MB ({figures['rss_before_mb']:,.0f} MB of it Python, torch and the package "
        f"before it), {figures['rss_imported_mb']:,.0f} MB held once imported, {figures['rss_decoding_mb']:,.0f} MB once "
        f"decoding (the decode's own tensors; peak {figures['peak_mb']:,.0f} MB); then {figures['tokens']} tokens "
        f"decoded, every map recorded, in {figures['decode_s']:.1f} s "
        f"({figures['decode_s'] * 1000 / max(1, figures['tokens']):.0f} ms a token). " + "; ".join(notes)
    )


def ctranslate2_report(shape: str) -> str:
    """NLLB-`shape` with random weights converted to int8 by CTranslate2's TransformersConverter, opened as a
    CTranslate2 directory and as the Hugging Face directory it was converted from, each in a fresh process. The
    made-up tokenizer has no SentencePiece model: the OpenNMT-py fixture's splits the text (its pieces unknown)."""
    from ctranslate2.converters import TransformersConverter

    from tests.fixtures.toolkit_outputs import FIXTURES

    with tempfile.TemporaryDirectory() as folder, tempfile.TemporaryDirectory() as elsewhere:
        directory, converted = Path(folder), Path(elsewhere) / f"nllb-{shape.lower()}-int8"
        save_nllb_at_size(directory, shape)
        started = time.perf_counter()
        TransformersConverter(str(directory)).convert(str(converted), quantization="int8")
        conversion = time.perf_counter() - started
        shutil.copy(FIXTURES / "opennmt.en-fr" / "spm.model", converted / "sentencepiece.model")
        ours, safetensors = opened(converted), opened(directory)
        stored = (converted / "model.bin").stat().st_size / 2**20
    weights = 4 * ours["parameters"] / 2**20  # MB of float32
    grown = {
        name: figures["import_peak_mb"] - figures["rss_before_mb"]
        for name, figures in (("ct2", ours), ("st", safetensors))
    }
    return (
        f"NLLB-{shape}'s shape as int8 CTranslate2 (converted in {conversion:.0f} s, model.bin {stored:,.0f} MB): "
        f"read in {ours['import_s']:.1f} s "
        f"against {safetensors['import_s']:.1f} s from its safetensors (ratio {ours['import_s'] / safetensors['import_s']:.2f}); "
        f"peak memory while reading {grown['ct2']:,.0f} MB against {grown['st']:,.0f} MB, the weights' float32 "
        f"{weights:,.0f} MB: {grown['ct2'] / weights:.2f}x them (safetensors {grown['st'] / weights:.2f}x); held once "
        f"read {ours['rss_imported_mb'] - ours['rss_before_mb']:,.0f} MB against "
        f"{safetensors['rss_imported_mb'] - safetensors['rss_before_mb']:,.0f} MB"
    )


def printed(row: Row) -> Row:
    print(
        f"{row.what}: ours {row.ours_ms:.2f} ms, theirs {row.baseline_ms:.2f} ms, ratio {row.ratio:.2f}; {row.note}",
        flush=True,
    )
    return row


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.hf_families", description=__doc__)
    parser.add_argument("--quick", action="store_true", help="fewer repeats (noisier)")
    parser.add_argument(
        "--nllb",
        nargs="*",
        choices=list(NLLB_SHAPES),
        default=["600M"],
        help="NLLB-200's shapes to build and measure (none: skip them; 600M's weights are 2.3 GiB, 3.3B's 13)",
    )
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu", help="where both sides decode")
    parser.add_argument(
        "--app", action="store_true", help="also the app in Chromium with each shape: a link, a Translate, step clicks"
    )
    parser.add_argument(
        "--app-on-device", action="store_true", help="also the app's own work with each NLLB shape, GPU against CPU"
    )
    parser.add_argument(
        "--ctranslate2", action="store_true", help="also each NLLB shape read as an int8 CTranslate2 directory"
    )
    args = parser.parse_args()
    repeats = 3 if args.quick else 7
    print(f"machine: {machine()}, decoding on {args.device}\n", flush=True)
    rows = []
    for size, sizes in (("tests' size (d 16, 2+2)", TINY), ("opus-mt's size (d 512, 6+6)", OPUS_MT)):
        for family, build in family_builders().items():
            with tempfile.TemporaryDirectory() as folder:
                rows.append(printed(decode_row(family, size, build(Path(folder), sizes), repeats, args.device)))
    if args.app:
        from benchmarks.app_at_size import app_rows
        from benchmarks.app_on_device import TWENTY_WORDS

        default = " ".join(TWENTY_WORDS[0].split()[:19])  # the shipped default in the same run, as a baseline
        rows += printed_rows(app_rows("the shipped default", None, default, TWENTY_WORDS[1]))
        with tempfile.TemporaryDirectory() as folder:
            opus_mt = family_builders()["Marian"](Path(folder), OPUS_MT)
            rows += printed_rows(app_rows_at("opus-mt's shape (Marian)", opus_mt))
    for shape in args.nllb:
        nllb_rows, report = nllb_report(shape, repeats, args.device, args.app, args.app_on_device)
        rows += nllb_rows
        print("\n" + report, flush=True)
        if args.ctranslate2:
            print("\n" + ctranslate2_report(shape), flush=True)
    print("\n" + table(rows), flush=True)
    print(f"\nthis process's peak memory: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f} MB")


if __name__ == "__main__":
    main()
