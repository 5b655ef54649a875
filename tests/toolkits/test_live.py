"""The toolkits themselves, run live on the models they trained: what they write now is what they recorded, which the
fairseq, Marian, eole and OpenNMT-py readers' tests hold our decode to. Not in the default run (pymarian is a 600 MB
wheel, the others want environments of their own): `pytest -m toolkit`, with MARIAN_PYTHON, FAIRSEQ_PYTHON,
EOLE_PYTHON and OPENNMT_PYTHON naming the Python of each toolkit's environment (tests/fixtures/toolkits/make_*.py say
how to make them)."""

from __future__ import annotations

import gzip
import json
import os
import subprocess

import pytest
from fixtures.toolkit_outputs import FIXTURES

TOOLKITS = {  # the models each toolkit made, its environment's variable, the script that made them
    "MARIAN_PYTHON": ("make_marian.py", ["marian-tied", "marian-untied", "marian-prenorm"]),
    "FAIRSEQ_PYTHON": ("make_fairseq.py", ["fairseq-joined", "fairseq-separate"]),
    "EOLE_PYTHON": ("make_eole.py", ["eole-shared.en-fr", "eole-separate.en-fr"]),
    "OPENNMT_PYTHON": ("make_opennmt.py", ["opennmt.en-fr"]),
}
CASES = [(variable, script, name) for variable, (script, names) in TOOLKITS.items() for name in names]


def largest_difference(now: list, then: list) -> float:
    """The largest difference of two lists of numbers (or of rows of numbers) of the same shape."""
    flat_now, flat_then = flat(now), flat(then)
    assert len(flat_now) == len(flat_then)
    return max((abs(a - b) for a, b in zip(flat_now, flat_then)), default=0.0)


def flat(values: list) -> list[float]:
    return [x for value in values for x in (flat(value) if isinstance(value, list) else [value])]


@pytest.mark.toolkit
@pytest.mark.parametrize("variable, script, name", CASES, ids=[case[2] for case in CASES])
def test_the_toolkit_run_live_writes_what_it_recorded(variable, script, name, tmp_path):
    python = os.environ.get(variable)
    assert python, f"{variable} must name the Python of an environment with the toolkit: see {script}'s docstring"
    run = subprocess.run(
        [python, str(FIXTURES / script), "--outputs-of", str(FIXTURES / name)],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    assert run.returncode == 0, run.stderr[-2000:]
    assert not list(tmp_path.iterdir())  # nothing left where it ran (OpenNMT-py's translator wrote pred.txt there)
    live = json.loads(run.stdout)
    recorded = json.loads(gzip.decompress((FIXTURES / name / "outputs.json.gz").read_bytes()))["sentences"]
    assert len(live) == len(recorded) == 20
    for now, then in zip(live, recorded, strict=True):
        assert (now["source_ids"], now["output_ids"], now["output"]) == (
            then["source_ids"],
            then["output_ids"],
            then["output"],
        )
        assert largest_difference(now["log_probabilities"], then["log_probabilities"]) < 1e-5
        assert largest_difference(now["attention"], then["attention"]) < 1e-5
        if "scored" in then:  # Marian's scorer on the same translation
            assert now["scored"]["target_ids"] == then["scored"]["target_ids"]
            assert largest_difference(now["scored"]["log_probabilities"], then["scored"]["log_probabilities"]) < 1e-5
