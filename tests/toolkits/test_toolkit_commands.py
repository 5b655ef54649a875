"""The command line's analyses on every toolkit's model opened in place (`--checkpoint DIR`): `inspect` writes maps
that hold the attention the toolkit itself returned, `contributions` and `heads` run on it."""

from __future__ import annotations

import re

import numpy as np
import pandas as pd
import pytest
from fixtures.toolkit_outputs import FIXTURES, recorded

from transformer.cli import main
from transformer.toolkits.opening import load_any_checkpoint

# What each toolkit returns as its attention: the last decoder layer's cross-attention, mean over heads (fairseq) or
# head 0 (Marian's soft alignment, eole's and OpenNMT-py's predictors).
RETURNED = {
    "fairseq-joined": "mean",
    "fairseq-separate": "mean",
    "marian-tied": "head 0",
    "marian-untied": "head 0",
    "marian-prenorm": "head 0",
    "eole-shared.en-fr": "head 0",
    "eole-separate.en-fr": "head 0",
    "opennmt.en-fr": "head 0",
}


@pytest.mark.parametrize("name", sorted(RETURNED))
def test_inspect_contributions_and_heads_run_on_it_and_inspect_holds_the_toolkits_attention(name, tmp_path):
    directory, sentences = str(FIXTURES / name), recorded(name)
    source, steps = sentences[0]["source"], len(sentences[0]["output_ids"])
    common = ["--checkpoint", directory, "--text", source, "--max-new-tokens", str(steps)]
    assert main(["inspect", *common, "--out", str(tmp_path / "maps.npz")]) == 0
    last = np.load(tmp_path / "maps.npz")["cross"][-1]  # (heads, outputs, source)
    returned = last.mean(0) if RETURNED[name] == "mean" else last[0]
    # Marian's translator reads a pre-norm decoder otherwise from its second step on (docs/marian.md): there, the
    # first step's attention alone is the same
    agree = 1 if name == "marian-prenorm" else len(returned)
    np.testing.assert_allclose(returned[:agree], np.array(sentences[0]["attention"])[:agree], atol=1e-5)

    assert main(["contributions", *common, "--out", str(tmp_path / "c.npz")]) == 0
    shares = np.load(tmp_path / "c.npz")["source_share"]
    assert len(shares) == steps and ((shares >= 0) & (shares <= 1)).all()

    (tmp_path / "src.txt").write_text("".join(s["source"] + "\n" for s in sentences[:3]), encoding="utf-8")
    (tmp_path / "ref.txt").write_text("".join(s["output"] + "\n" for s in sentences[:3]), encoding="utf-8")
    corpus = ["--src", str(tmp_path / "src.txt"), "--ref", str(tmp_path / "ref.txt"), "--sentences", "3"]
    assert main(["heads", "--checkpoint", directory, *corpus, "--out", str(tmp_path / "heads.csv")]) == 0
    config = load_any_checkpoint(directory).config
    assert (
        len(pd.read_csv(tmp_path / "heads.csv"))
        == (config.n_encoder_layers + 2 * config.n_decoder_layers) * config.n_heads
    )


def test_help_names_every_command_once_the_importers_among_them(capsys):
    """`--help` listed the commands twice (in the usage and above their lines) and its description's list missed the
    importers (issue 83, item 13)."""
    with pytest.raises(SystemExit):
        main(["--help"])
    said = capsys.readouterr().out
    for command in ("translate", "import-fairseq", "import-marian", "import-eole", "import-opennmt", "patch-set"):
        assert len(re.findall(rf"^    {command}\b", said, re.MULTILINE)) == 1, command
    assert "{translate," not in said  # no list of choices repeated in the usage
