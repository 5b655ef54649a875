"""The README's notebook example runs as written, with the shipped model."""

from __future__ import annotations

import re

from helpers import REPO


def test_the_notebook_example_runs_and_prints_what_it_says(monkeypatch):
    readme = (REPO / "README.md").read_text()
    code = re.search(r"## From a notebook.*?```python\n(.*?)```", readme, re.S).group(1)
    monkeypatch.chdir(REPO)
    namespace: dict = {}
    exec(code.replace(".show()", ""), namespace)
    promised = re.search(r"result\.text\s+# '(.*)'", code).group(1)
    assert namespace["result"].text == promised
    assert namespace["view"].maps.shape[:2] == (3, 8)
