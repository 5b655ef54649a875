"""A sentence's figures as files (`figures`): SVG and PDF with text as text, PNG at twice the size, written by
kaleido with this machine's Chromium, the app's own figures in its style."""

from __future__ import annotations

import struct
import xml.etree.ElementTree as ElementTree

import pytest
from fixtures.patching_pair import CLEAN, CORRUPT
from helpers import run_cli

from transformer.viz.files import WIDTH, file_name

SVG = "{http://www.w3.org/2000/svg}"


def svg_texts(path) -> list[str]:
    """Every text node of an SVG file, as a vector editor reads them."""
    root = ElementTree.parse(path).getroot()
    return ["".join(node.itertext()) for node in root.iter(f"{SVG}text")]


def test_every_figure_of_a_sentence_and_its_cause_grids_are_written_as_svg_with_text_as_text(tmp_path):
    out = tmp_path / "figures"
    done = run_cli("figures", "--text", CLEAN, "--out", out, "--corrupt", CORRUPT, "--token", "il", "--against", "elle")
    assert done.returncode == 0, done.stderr
    written = sorted(path.name for path in out.iterdir())
    assert written[:3] == ["01-output.svg", "02-encoder-self-attention.svg", "03-decoder-masked-self-attention.svg"]
    assert any("integrated-gradients" in name for name in written) and any("cause" in name for name in written)
    assert len(written) >= 10 and all(name.endswith(".svg") for name in written)
    texts = " ".join(svg_texts(out / "02-encoder-self-attention.svg"))
    assert "animal" in texts and "layer 1" in texts  # the tokens and the rows' names, as text a paper can search
    probabilities = " ".join(svg_texts(out / "01-output.svg"))
    assert "probability of each output token" in probabilities and "fatigué" in probabilities


@pytest.mark.parametrize("file_format", ["pdf", "png"])
def test_pdf_and_png_at_twice_the_width(tmp_path, file_format):
    done = run_cli("figures", "--text", "A dog runs.", "--out", tmp_path, "--format", file_format, "--steps", "4")
    assert done.returncode == 0, done.stderr
    first = tmp_path / file_name(1, "Output", file_format)
    data = first.read_bytes()
    if file_format == "pdf":
        assert data.startswith(b"%PDF") and b"/Font" in data  # text set in a font, not drawn as pixels
    else:
        assert data.startswith(b"\x89PNG") and struct.unpack(">I", data[16:20])[0] == 2 * WIDTH


def test_a_hugging_face_directorys_figures_are_written_too(tmp_path):
    from fixtures.hf_models import save_marian

    sentences = ["the red dog runs", "a small cat sits on the ball", "le chien rouge court"] * 4
    directory = save_marian(tmp_path, sentences, sentences)
    done = run_cli(
        "figures", "--checkpoint", directory, "--text", "the red dog", "--out", tmp_path / "out", "--steps", "4"
    )
    assert done.returncode == 0, done.stderr
    assert len(list((tmp_path / "out").glob("*.svg"))) == 6 and "head 4" in " ".join(
        svg_texts(tmp_path / "out" / "02-encoder-self-attention.svg")
    )


def test_a_cause_grid_asked_without_its_target_is_refused_in_one_line(tmp_path):
    done = run_cli("figures", "--text", CLEAN, "--out", tmp_path, "--corrupt", CORRUPT)
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "--token" in done.stderr
    assert not any(tmp_path.iterdir())
