"""Hostile uploads against one app server under a memory cap, each sent from a Chromium tab while another thread
asks the server's /_stcore/health every 0.1 s: how long the slowest answer took, and the server's peak memory.

    python -m benchmarks.serving.hostile_uploads [--memory-gb 8]

Loopback only. Each attack must end with its refusal (or its bounded result) on the page.
"""

from __future__ import annotations

import argparse
import base64
import gzip
import json
import os
import re
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from playwright.sync_api import Browser, Page
from tokenizers import Tokenizer
from tokenizers.models import WordLevel

from benchmarks.serving.hostile_visits import PROXY_TOKEN, UPLOAD_INPUT, VISITS, Placed, Visit, placed
from tests.fixtures.browser import ARTIFACTS, LAUNCH, HealthProbe, app_server, chromium, wait_idle
from tests.fixtures.crafted import with_header, with_metadata
from transformer.io.checkpoint import DEFAULT_CHECKPOINT
from transformer.io.header import read_header

PANICKING_CHARSMAP = bytes.fromhex("080000004a58b791df6af1d8")  # loads, then panics in the library on any text


@dataclass(frozen=True)
class Attack:
    name: str
    page: str  # the page's path in the app
    files: dict[str, bytes]  # one upload per file uploader on the page, in order
    button: str | None  # pressed after the uploads
    expected: str  # text the page shows when the attack has been answered
    first_uploader: int = 0  # the page's file uploader that takes the first file (the rest follow in order)


def word_level(**pipeline: dict) -> str:
    """A loadable word-level tokenizer.json with the special tokens every layout needs and these pipeline steps."""
    backend = Tokenizer(WordLevel({t: i for i, t in enumerate(["<s>", "<pad>", "</s>", "<unk>", "a"])}, "<unk>"))
    return json.dumps(json.loads(backend.to_str()) | pipeline)


def attacks(shipped: bytes) -> list[Attack]:
    backtracking = json.loads(read_header(shipped)["__metadata__"].get("tokenizer_json", "{}") or "{}") | {
        "pre_tokenizer": {
            "type": "Split",
            "pattern": {"Regex": "(?:a|a){1,22}!"},
            "behavior": "Isolated",
            "invert": False,
        },
    }
    # Its Translate of 2,000 "a" took 3.2 GB in the tokenizer library and aborted the process.
    multiplying = word_level(normalizer={"type": "Replace", "pattern": {"String": "a"}, "content": "a" * 100_000})
    charsmap = base64.b64encode(PANICKING_CHARSMAP).decode()
    panicking = word_level(normalizer={"type": "Precompiled", "precompiled_charsmap": charsmap})
    header = read_header(shipped)
    many_names = {f"extra.{i}": {"dtype": "F32", "shape": [0], "data_offsets": [0, 0]} for i in range(40_000)}
    tokenizer = header["__metadata__"]["tokenizer"]
    short_lines = gzip.compress(b"a\n" * (4 << 20), compresslevel=9) * 12  # 48 million lines in 100 KB
    return [
        Attack(
            "tokenizer.json with a backtracking Split",
            "checkpoints",
            {"regex.safetensors": with_metadata(shipped, tokenizer_json=json.dumps(backtracking))},
            None,
            "was refused",
        ),
        Attack(
            "tokenizer.json whose normalizer makes 100,000 characters of one",
            "checkpoints",
            {"grows.safetensors": with_metadata(shipped, tokenizer_json=multiplying)},
            None,
            "was refused",
        ),
        Attack(
            "tokenizer.json whose charsmap panics on every text",
            "checkpoints",
            {"panics.safetensors": with_metadata(shipped, tokenizer_json=panicking)},
            None,
            "was refused",
        ),
        Attack(
            "header of 40,000 tensor names",
            "checkpoints",
            {"names.safetensors": with_header(shipped, json.dumps(header | many_names).encode())},
            None,
            "was refused",
        ),
        Attack(
            "tokenizer text of 8 MB (what 1M tokens hold)",
            "checkpoints",
            {"words.safetensors": with_metadata(shipped, tokenizer=tokenizer + "A" * 8_000_000)},
            None,
            "was refused",
        ),
        Attack(
            "metadata number of 5,000 digits",
            "checkpoints",
            {"digits.safetensors": with_metadata(shipped, metadata='{"n": ' + "9" * 5000 + "}")},
            None,
            "was refused",
        ),
        Attack(
            "48 million short lines (100 KB gzip) on Corpus",
            "corpus",
            {"lines.txt.gz": short_lines},
            "Translate the file",
            "Click a column header to sort",
        ),
        Attack(
            "a 40 MB gold line on Alignment",
            "alignment",
            {"src.txt": b"a dog\n", "tgt.txt": b"un chien\n", "gold.txt": b"0-0 " * 10_000_000},
            "Align and score",
            "longer than 20,000 bytes",
        ),
        *treebank_attacks(),
    ]


def treebank_attacks() -> list[Attack]:
    """Gold parses on Which heads matter, each a few bytes to a few MB that would build gigabytes: a multiword
    range of 10^8 words (61 bytes killed the server past 8 GB), a 93-million-character sentence (294 KB gzipped),
    9,000 words with 9 KB of FEATS and MISC each, and 2,000 sentences of ranges that each took 0.05 s."""
    word = "{}\tx\tx\tX\t_\t{}\t0\troot\t_\t{}\n"
    cases = {
        "a treebank's multiword range of 10^8 words (61 bytes)": b"1-100000000\tx\t_\t_\t_\t_\t_\t_\t_\t_\n"
        + word.format(1, "_", "_").encode(),
        "a treebank sentence of 93 million characters (294 KB gzip)": gzip.compress(
            ("1\t" + "y" * 9_400 + "\tx\tX\t_\t_\t0\troot\t_\t_\n").encode() * 9_900, compresslevel=9
        ),
        "a treebank of 9,000 words with 9 KB of FEATS and MISC": gzip.compress(
            "".join(word.format(i, "F=" + "f" * 4_500, "M=" + "m" * 4_500) for i in range(1, 9_001)).encode()
        ),
        "a treebank of 2,000 ranges of 10^5 words (202 bytes gzip)": gzip.compress(
            b"1-100000\tx\t_\t_\t_\t_\t_\t_\t_\t_\n\n" * 2_000, compresslevel=9
        ),
    }
    sample = {"src.txt": b"The black cat is sleeping.\n", "ref.txt": b"Le chat noir dort.\n"}
    return [
        Attack(name, "heads", {**sample, "gold.conllu": data}, "Measure the heads", "The gold parses cannot be read", 1)
        for name, data in cases.items()  # the page's first uploader is Head statistics' sample
    ]


def one_page(attack: Attack, folder: Path) -> Visit:
    """The attack as a visit: a tab of its own, closed after."""

    def visit(browser: Browser, url: str, placed: Placed) -> str:
        page = browser.new_page(viewport={"width": 1440, "height": 900})
        run_attack(page, url, attack, folder)
        page.close()
        return attack.expected

    return visit


def run_attack(page: Page, url: str, attack: Attack, folder: Path) -> None:
    page.goto(f"{url}/{attack.page}")
    wait_idle(page)
    uploaders = attack.first_uploader + len(attack.files)  # the page drawn that far: an upload lands where it should
    page.wait_for_function(f"document.querySelectorAll('{UPLOAD_INPUT}').length >= {uploaders}", timeout=300_000)
    for index, (name, data) in enumerate(attack.files.items()):
        path = folder / name
        path.write_bytes(data)
        page.locator(UPLOAD_INPUT).nth(attack.first_uploader + index).set_input_files(path)
        page.get_by_text(name, exact=True).first.wait_for(state="attached", timeout=60_000)  # uploaded, not sending
        wait_idle(page)
    if attack.page == "corpus":
        page.get_by_label("Sentences (from the top)").fill("3")
    if attack.button:
        page.get_by_role("button", name=attack.button).click()
    page.get_by_text(attack.expected, exact=False).first.wait_for(state="attached", timeout=300_000)
    wait_idle(page, timeout=300_000)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.serving.hostile_uploads", description=__doc__)
    parser.add_argument("--memory-gb", type=float, default=8.0, help="the server's address-space cap")
    parser.add_argument("--only-visits", action="store_true", help="the hostile visits alone (hostile_visits)")
    parser.add_argument("--only", help="the attacks and visits whose names match this regular expression alone")
    args = parser.parse_args()
    shipped = DEFAULT_CHECKPOINT.read_bytes()
    os.environ["TRANSFORMER_EXPLORER_PROXY_TOKEN"] = PROXY_TOKEN  # the server's: the visits speak as the proxy
    capped = ["prlimit", f"--as={int(args.memory_gb * 2**30)}", *LAUNCH]
    print(
        "| attack | answered in s | slowest /_stcore/health in s | health failures | server peak over its start, MB "
        "| the page said |"
    )
    print("| --- | --- | --- | --- | --- | --- |")
    with (
        tempfile.TemporaryDirectory() as folder,
        placed(Path(folder), args.memory_gb) as files,
        app_server(ARTIFACTS / "hostile.log", launcher=capped) as server,
        chromium() as browser,
    ):
        single = (
            {} if args.only_visits else {attack.name: one_page(attack, Path(folder)) for attack in attacks(shipped)}
        )
        with HealthProbe(server.url, timeout=60) as watch:
            chosen = {name: visit for name, visit in (single | VISITS).items() if re.search(args.only or "", name)}
            for name, visit in chosen.items():
                watch.reset()
                before, started = server.reset_peak_mb(), time.monotonic()
                said = visit(browser, server.url, files)
                answered, grew = time.monotonic() - started, server.peak_memory_mb() - before
                print(
                    f"| {name} | {answered:.1f} | {watch.slowest:.2f} | {watch.failures} | {grew:.0f} | {said} |",
                    flush=True,
                )
        print(f"\nserver peak memory {server.peak_memory_mb():.0f} MB (address space capped at {args.memory_gb:g} GB)")
    log = (ARTIFACTS / "hostile.log").read_text()
    print("server log clean" if "Traceback" not in log else f"TRACEBACK in {ARTIFACTS / 'hostile.log'}")


if __name__ == "__main__":
    main()
