"""A toolkit's model that would not fit in the memory this process may still take is refused before its weights are
read, in one line naming the file: fairseq's and OpenNMT-py's pickled `.pt` files, eole's safetensors. (The memory
free counts the process's own limits, `ulimit -v` or a container's: tests/io/test_memory.py.)"""

from __future__ import annotations

import pytest
from fixtures.toolkit_outputs import FIXTURES

from transformer.cli import main
from transformer.hugging_face import files
from transformer.io.checkpoint import APP_ROOM_BYTES, CheckpointTooLarge
from transformer.toolkits import pickled
from transformer.toolkits.opening import load_any_checkpoint

# Each toolkit's fixture, the module whose check of the memory free it passes, and the refusal's words
REFUSALS = [
    ("fairseq-joined", pickled, r"^checkpoint_best\.pt is 0\.00 GB; 0\.00 GB opens now: not opened$"),
    ("opennmt.en-fr", pickled, r"^model\.pt is 0\.00 GB; 0\.00 GB opens now: not opened$"),
    ("eole-shared.en-fr", files, r"^eole-shared\.en-fr: its weights need 0\.\d+ GB of memory once laid out, .*"),
]


@pytest.mark.parametrize(("name", "module", "refusal"), REFUSALS)
def test_a_toolkits_model_that_does_not_fit_is_refused_naming_its_file_and_one_that_does_opens(
    name, module, refusal, monkeypatch
):
    monkeypatch.setattr(module, "memory_available", lambda: APP_ROOM_BYTES + 1000)  # a kilobyte past the app's room
    with pytest.raises(CheckpointTooLarge, match=refusal):
        load_any_checkpoint(FIXTURES / name)
    monkeypatch.setattr(module, "memory_available", lambda: APP_ROOM_BYTES + 10**9)
    assert load_any_checkpoint(FIXTURES / name).config.d_model > 0


def test_the_command_line_says_the_refusal_in_one_line(monkeypatch, capsys, tmp_path):
    monkeypatch.setattr(pickled, "memory_available", lambda: APP_ROOM_BYTES)
    out = tmp_path / "maps.npz"
    code = main(["inspect", "--checkpoint", str(FIXTURES / "opennmt.en-fr"), "--text", "The cat.", "--out", str(out)])
    error = capsys.readouterr().err.strip()
    assert code == 2 and error == "error: model.pt is 0.00 GB; 0.00 GB opens now: not opened" and not out.exists()
