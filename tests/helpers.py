"""Helpers shared by several test modules (fixtures live in conftest.py)."""

from __future__ import annotations

import base64
import contextlib
import gzip
import io
import json
import random
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from unittest import mock

import numpy as np
from fixtures.crafted import with_config, with_header, with_metadata  # noqa: F401 (the test modules import them from here)
from streamlit.testing.v1 import AppTest

from transformer.model.config import TransformerConfig
from transformer.text.tokenizer import Tokenizer
from transformer.training.settings import TrainSettings
from ui.players.step_player import sent_step_data

REPO = Path(__file__).resolve().parent.parent


def run_cli(*args, stdin: str | bytes = "") -> SimpleNamespace:
    """`python -m transformer ARGS` in this process (a new one costs seconds of imports): its exit code and output."""
    from transformer.cli import main

    raw = stdin.encode() if isinstance(stdin, str) else stdin
    out, err = io.StringIO(), io.StringIO()
    with (
        mock.patch("sys.stdin", io.TextIOWrapper(io.BytesIO(raw))),
        contextlib.redirect_stdout(out),
        contextlib.redirect_stderr(err),
    ):
        try:
            code = main([str(arg) for arg in args])
        except SystemExit as exit:  # argparse's refusals
            code = exit.code
    return SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())


def _status_kib(field: str) -> int:
    return int(re.search(rf"{field}:\s+(\d+) kB", Path("/proc/self/status").read_text()).group(1))


@dataclass
class Cost:
    """How far a block of code raised the process's peak memory (its time is never asserted: the machine is shared)."""

    peak_growth_mb: float = 0.0


@contextmanager
def measured() -> Iterator[Cost]:
    """Peak RSS growth of the block, measured by resetting the kernel's high-water mark (VmHWM) first."""
    Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current RSS
    before, cost = _status_kib("VmRSS"), Cost()
    try:
        yield cost
    finally:
        cost.peak_growth_mb = (_status_kib("VmHWM") - before) / 1024


def gzip_bomb(megabytes: int) -> bytes:
    """Gzip members of 8 MB of short lines each, concatenated: about 8 KB of file per 8 MB of text."""
    member = gzip.compress(b"a\n" * (4 * 2**20), compresslevel=9)
    return member * (megabytes // 8)


def figure(at: AppTest, index: int) -> dict:
    return json.loads(at.get("plotly_chart")[index].proto.spec)


def array(value) -> np.ndarray:
    """A Plotly data array from a figure's JSON: a list, or a typed array in base64."""
    if isinstance(value, dict):
        data = np.frombuffer(base64.b64decode(value["bdata"]), dtype=np.dtype(value["dtype"]))
        shape = [int(n) for n in str(value.get("shape", len(data))).split(",")]
        return data.reshape(shape)
    return np.array(value, dtype=float)


def step_view(at: AppTest) -> dict:
    """What the explorer sent its step view (which steps through it in the browser)."""
    return sent_step_data(at.get("bidi_component")[0].proto.json)


def step_action(at: AppTest, **action) -> AppTest:
    """Runs the page as a button of the step view does: one trigger that carries the step shown."""
    return step_trigger(at, json.dumps([{"event": "action", "value": action}]))


def step_trigger(at: AppTest, raw: str) -> AppTest:
    """Runs the page with the step view's trigger holding `raw`, whatever a hostile browser might send."""
    from streamlit.components.v2.bidi_component.main import _make_trigger_id
    from streamlit.proto.WidgetStates_pb2 import WidgetState

    states = at._tree.get_widget_states()
    trigger = WidgetState(id=_make_trigger_id(at.get("bidi_component")[0].proto.id, "events"))
    trigger.json_trigger_value = raw
    states.widgets.append(trigger)
    return at._run(states)


def markdown(at: AppTest) -> str:
    return "\n".join(element.value for element in at.markdown)


def start(query: dict[str, str] | None = None) -> AppTest:
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    at.query_params.update(query or {})
    return at.run()


def translate(at: AppTest, text: str) -> AppTest:
    at.text_area(key="widget_text").input(text)
    return at.button(key="translate").click().run()


WORDS = "the a dog cat man woman child runs jumps sits red blue green big small park street water ball".split()


def make_sentences(count: int, seed: int = 0) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 9))) for _ in range(count)]


def reversal_corpus(directory: Path, count: int, seed: int) -> tuple[str, str]:
    """A tiny parallel corpus to train on, each target its source's words reversed: the paths of s.txt and t.txt."""
    sentences = make_sentences(count, seed=seed)
    (directory / "s.txt").write_text("\n".join(sentences))
    (directory / "t.txt").write_text("\n".join(" ".join(reversed(s.split())) for s in sentences))
    return str(directory / "s.txt"), str(directory / "t.txt")


# The tiny model the training tests train: a reversal task learns within an epoch or two on it.
TINY_TRAINED = dict(vocab_size=40, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1, n_decoder_layers=1, max_len=32)


def tiny_training_options(**changed) -> list[str]:
    """`train`'s options for the tiny model (and any others given, as keyword arguments), as typed on the command
    line: tiny_training_options(epochs=3) is --vocab-size 40 ... --epochs 3."""
    values = TINY_TRAINED | changed
    return [word for name, value in values.items() for word in (f"--{name.replace('_', '-')}", str(value))]


def tiny_trained_config(**changed) -> TransformerConfig:
    """The tiny model's config, as the training tests' settings name it."""
    sizes = TINY_TRAINED | changed
    vocab = sizes.pop("vocab_size")
    return TransformerConfig(vocab, vocab, **sizes)


def reversal_settings(directory: Path, **changed) -> TrainSettings:
    """Two epochs of the tiny model on a reversal corpus of 300 pairs, written into `directory`; any field changed."""
    s, t = reversal_corpus(directory, 300, seed=3)
    values = dict(
        train_src=s,
        train_tgt=t,
        val_src=s,
        val_tgt=t,
        out=str(directory / "m.safetensors"),
        model=tiny_trained_config(),
        epochs=2,
        max_tokens=400,
        lr_factor=1.0,
        warmup=20,
        val_limit=20,
        save_dtype="float32",
    )
    return TrainSettings(**(values | changed))


def tiny_config(tokenizer: Tokenizer, **overrides) -> TransformerConfig:
    sizes = dict(d_model=16, n_heads=2, d_ff=32, n_encoder_layers=2, n_decoder_layers=3, dropout=0.1, max_len=64)
    vocabulary = dict(src_vocab_size=tokenizer.vocab_size, tgt_vocab_size=tokenizer.vocab_size)
    return TransformerConfig(**(vocabulary | sizes | overrides))


# A 1.3 MB file whose config claims a 600M-parameter model: refused from the header, nothing built.
SMALL_FILE_HUGE_CONFIG = dict(
    src_vocab_size=300_000, tgt_vocab_size=300_000, d_model=2048, n_heads=8, d_ff=64, max_len=64
)


def upload(at, name: str, data: bytes):
    at = at.switch_page("pages/checkpoints.py").run()
    at.file_uploader(key="upload_file").set_value((name, data, "application/octet-stream"))
    return at.run()


def errors(at) -> str:
    return "\n".join(e.value for e in at.error).replace("\\", "")  # the page escapes markdown


def assert_same_as_transformers(
    model, hf_model, src_ids: list[int], decoder_input: list[int], layers: int | None = None
) -> None:
    """An imported model's forward pass (need_weights) equal to transformers' (output_attentions) within 1e-5:
    the log-probabilities and every encoder, decoder and cross-attention map of every layer."""
    import torch

    with torch.no_grad():
        theirs = hf_model(
            input_ids=torch.tensor([src_ids]), decoder_input_ids=torch.tensor([decoder_input]), output_attentions=True
        )
        ours = model(torch.tensor([src_ids]), torch.tensor([decoder_input]), need_weights=True)

    torch.testing.assert_close(ours.log_probs, theirs.logits.log_softmax(-1), atol=1e-5, rtol=1e-5)
    pairs = {
        "encoder": (ours.attentions.encoder_self, theirs.encoder_attentions),
        "decoder": (ours.attentions.decoder_self, theirs.decoder_attentions),
        "cross": (ours.attentions.cross, theirs.cross_attentions),
    }
    for kind, (a, b) in pairs.items():
        assert len(a) == len(b) and (layers is None or len(a) == layers)
        for layer, (x, y) in enumerate(zip(a, b)):
            torch.testing.assert_close(x, y, atol=1e-5, rtol=1e-5, msg=f"{kind} layer {layer}")


def assert_follows_the_format(path, checkpoint, sentences: list[str]) -> None:
    """The NumPy reader of FORMAT.md, given the checkpoint file at path, decodes each sentence to the same ids and
    the same attention maps (within 1e-5) as the package's checkpoint loaded from it."""
    import numpy as np
    from numpy_reference import ReferenceModel

    from transformer.decoding.greedy import decode_with_chooser

    reference_model = ReferenceModel(str(path))
    for sentence in sentences:
        reference = reference_model.greedy(sentence)
        result = decode_with_chooser(checkpoint.model, checkpoint.tokenizer, sentence)
        assert reference["src_ids"] == result.src_ids and reference["tgt_ids"] == result.tgt_ids
        for kind in ("encoder_self", "decoder_self", "cross"):
            np.testing.assert_allclose(reference[kind], getattr(result, kind).numpy(), atol=1e-5)


def weights_megabytes(directory: Path) -> str:
    """A Hugging Face directory's weight files' size, as its label in the checkpoint list gives it."""
    sizes = [p.stat().st_size for p in directory.iterdir() if p.suffix in (".safetensors", ".bin")]
    return f"{sum(sizes) / 1e6:.1f} MB"


PAGES = ["explorer", "attention", "attribution", "positional", "masks", "computation", "learned", "checkpoints",
         "compare", "heads", "corpus", "alignment", "cause", "sets"]  # fmt: skip


SWAPPED = "the dog red runs"  # the every-page sentence's words in another order


def run_uploaded_set(at: AppTest, corrupted: tuple[str, ...]) -> AppTest:
    """The Pair sets page run on a set uploaded of the sidebar's sentence against each of `corrupted` and against
    itself, at its translation's first token."""
    first, clean = at.session_state["result"].tgt_pieces[0].lstrip("▁Ġ"), at.session_state["applied_text"]
    lines = [
        json.dumps({"id": f"pair-{number}", "clean": clean, "corrupt": corrupt, "target": first})
        for number, corrupt in enumerate((*corrupted, clean))
    ]
    at.radio(key="sets_source").set_value("My own set")
    at = at.run()
    at.file_uploader(key="sets_file").set_value(("set.jsonl", "\n".join(lines).encode(), "text/plain"))
    return at.run().button(key="sets_run").click().run()


def open_on_every_page(directory, tmp_path, monkeypatch, label: str):
    """A model directory (Hugging Face's, fairseq's) placed among the checkpoints beside the default: listed as
    `label`, chosen, translating, and every page drawn on it without an exception; the app as the last page left
    it."""
    import shutil

    import ui.services.checkpoints

    shutil.copy(REPO / "checkpoints" / "en-fr-captions.safetensors", tmp_path / "en-fr-captions.safetensors")
    shutil.copytree(directory, tmp_path / directory.name)
    shutil.copytree(directory, tmp_path / "hf-copy")  # the same tokenizer: Compare draws the maps
    monkeypatch.setattr(ui.services.checkpoints, "CHECKPOINT_DIR", tmp_path)
    monkeypatch.setattr(ui.services.checkpoints, "DEFAULT_CHECKPOINT", tmp_path / "en-fr-captions.safetensors")
    at = start()
    assert label in at.selectbox(key="widget_checkpoint").options
    at.selectbox(key="widget_checkpoint").set_value(directory.name).run()
    at = translate(at, "the red dog runs")
    assert not at.exception and step_view(at)["step"] == 0
    for page in PAGES:
        at = at.switch_page(f"pages/{page}.py").run()
        if page == "explorer":  # the first word blocked in every decoder layer, and the first head pinned to it
            at = at.multiselect(key="knockout_words").set_value([0]).run()
            at = at.selectbox(key="knockout_pin").set_value((0, 0)).run()
            assert any("**With the edit** ·" in m.value for m in at.markdown), page
        if page == "compare":
            at = at.selectbox(key="compare_with").set_value("hf-copy").run()
        if page == "corpus":
            at.file_uploader(key="corpus_src").set_value(("src.txt", b"the dog runs\na red cat\n", "text/plain"))
            at = at.button(key="FormSubmitter:corpus-Translate the file").click().run()
        if page == "alignment":
            at.checkbox(key="align_example").check()
            at = at.button(key="align_run").click().run()
        if page == "cause":  # patched against a source of as many pieces (the first found), at the first output token
            first = at.session_state["result"].tgt_pieces[0].lstrip("▁Ġ")
            at = at.text_input(key="cause_target").input(first).run()
            # the last: two words swapped, as many pieces wherever words split alone
            for corrupt in ("the red cat runs", "the blue dog runs", "a red dog runs", "the red dog sits", SWAPPED):
                at = at.text_input(key="cause_corrupt").input(corrupt).run()
                if not any("pieces and the corrupted one" in error.value for error in at.error):
                    break
        if page == "sets":  # Cause's candidates as an uploaded set: each pair read or refused, and the set run
            at = run_uploaded_set(at, ("the red cat runs", "the blue dog runs", "a red dog runs", SWAPPED))
            assert "pairs are correct" in markdown(at) or "No pair was read" in markdown(at), page
        assert not at.exception, page
        assert page != "cause" or not at.error, [e.value for e in at.error]
        if page == "learned":  # no timeline in this checkpoints folder, the default's included: the page says so
            assert "No timeline is shipped" in at.info[-1].value
            continue
        players = [c for c in at.get("bidi_component") if c.proto.component_name != "svg_buttons"]  # it draws none
        assert at.get("plotly_chart") or at.dataframe or players, page
    return at


class WritesAMarker:
    """An object whose unpickling writes "ran" to `marker`: a file holding it shows whether a reader ran its pickle."""

    def __init__(self, marker: Path):
        self.marker = marker

    def __reduce__(self):
        return (Path.write_text, (self.marker, "ran"))
