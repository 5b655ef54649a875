"""The README is a front page whose every link opens; the notebook example in the docs runs as written."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

from helpers import REPO

FRONT_PAGE_LINES = 120  # about two screens: what it is, the two commands, the pages, where the rest is


def _anchor(heading: str) -> str:
    """The anchor GitHub gives a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def test_the_front_page_is_short_and_every_document_is_one_link_from_it():
    readme = (REPO / "README.md").read_text()
    assert len(readme.splitlines()) <= FRONT_PAGE_LINES
    linked = set(re.findall(r"\]\((docs/[\w-]+\.md)\)", readme))
    assert linked == {f"docs/{path.name}" for path in (REPO / "docs").glob("*.md")}


def test_every_relative_link_in_the_docs_opens_a_file_and_heading_that_exist():
    for page in [REPO / "README.md", *(REPO / "docs").glob("*.md")]:
        for target in re.findall(r"\]\(([^)#:]*)(?:#([^)]*))?\)", page.read_text()):
            path = (page.parent / target[0]).resolve() if target[0] else page
            assert path.is_file(), f"{page.name} links to {target[0]}, which is not there"
            if target[1]:
                headings = re.findall(r"^#+ (.*)$", path.read_text(), re.M)
                assert target[1] in {_anchor(h) for h in headings}, (
                    f"{page.name}: no heading #{target[1]} in {path.name}"
                )


def test_the_notebook_example_runs_outside_the_repository_and_prints_what_it_says(tmp_path):
    readme = (REPO / "docs" / "command-line.md").read_text()
    code = re.search(r"## From a notebook.*?```python\n(.*?)```", readme, re.S).group(1)
    report = "\nimport json; print(json.dumps({'text': result.text, 'maps': list(view.maps.shape[:2])}))"
    done = subprocess.run(
        [sys.executable, "-c", code.replace(".show()", "") + report],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=300,
    )  # the installed package, not ./
    assert done.returncode == 0, done.stderr
    promised = re.search(r"result\.text\s+# '(.*)'", code).group(1)
    assert json.loads(done.stdout.splitlines()[-1]) == {"text": promised, "maps": [3, 8]}


def test_the_console_command_is_installed():
    command = Path(sys.executable).parent / "transformer-explorer"
    done = subprocess.run([command, "translate"], input="A dog runs.\n", capture_output=True, text=True, timeout=300)
    assert done.returncode == 0 and done.stdout == "Un chien court.\n", done.stderr
