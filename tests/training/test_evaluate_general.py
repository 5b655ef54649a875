"""scripts/evaluate_general.sh: the figures a general model is judged by, on data made here."""

from __future__ import annotations

import gzip
import os
import subprocess
import sys

from helpers import REPO, make_sentences


def _write(path, lines: list[str]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(gzip.compress(("\n".join(lines) + "\n").encode()))


def test_the_report_card_scores_every_set_both_ways_and_shows_the_five_sentences_and_aer(checkpoint_path, tmp_path):
    data = tmp_path / "data"
    for stem in ("en-fr/flores.dev", "en-fr/newstest2013", "en-fr/tatoeba.train", "multi30k/test_2016_flickr"):
        sentences = make_sentences(1100 if "tatoeba" in stem else 12, seed=len(stem))
        _write(data / f"{stem}.en.gz", sentences)
        _write(data / f"{stem}.fr.gz", [" ".join(reversed(s.split())) for s in sentences])
    environment = os.environ | {"PYTHON": sys.executable}
    done = subprocess.run(
        ["bash", "scripts/evaluate_general.sh", str(checkpoint_path), "--data", str(data), "--limit", "5"],
        cwd=REPO,
        env=environment,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    rows = [line for line in done.stdout.splitlines() if line.startswith("| ") and "---" not in line][1:]
    assert [row.split(" | ")[:2] for row in rows] == [
        [f"| {name}", decoding]
        for name in ("flores.dev", "newstest2013", "tatoeba-dev", "multi30k-test2016")
        for decoding in ("greedy", "beam 5")
    ]
    assert all(float(row.split(" | ")[2]) >= 0 and float(row.split(" | ")[3].rstrip(" |")) >= 0 for row in rows)
    assert sum(" -> " in line for line in done.stdout.splitlines()) == 5
    assert "I love you. -> " in done.stdout and "best AER first" in done.stdout
