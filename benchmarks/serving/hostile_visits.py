"""Hostile visits that take more than one page or one visitor (python -m benchmarks.serving.hostile_uploads runs
them after its single-page attacks): a 200k-word vocabulary uploaded and then measured on Which heads matter, one
address's fresh cookies against the upload budget, sessions from loopback claiming addresses, F16 weights in the checkpoints folder that fit the machine but not
the server, a timeline of two 15 MB snapshots, a link that switches off 461 of a model's 768 heads, each hostile
toolkit folder of tests/fixtures/hostile_toolkits.py among the checkpoints (the list labels them all on every page)
opened by a link, and a model of 60 encoder layers decoding 1,000 words and patching 200.

Each visit drives Chromium until the server has answered and returns what the page said, in a few words."""

from __future__ import annotations

import contextlib
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass, replace
from pathlib import Path
from urllib.parse import urlencode

import numpy as np
import torch
from playwright.sync_api import Browser, Page
from tokenizers import Tokenizer
from tokenizers.decoders import WordPiece
from tokenizers.models import WordLevel
from tokenizers.pre_tokenizers import Whitespace

from benchmarks.app_on_device import linked_checkpoint
from tests.fixtures.browser import wait_idle
from tests.fixtures.crafted import deep_upload, write_with_sparse_tensor
from tests.fixtures.hf_models import save_marian
from tests.fixtures.hostile_toolkits import MADE, Made
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint, save_checkpoint
from transformer.io.timeline_file import load_timeline, save_timeline, timeline_path
from transformer.model.config import TransformerConfig
from transformer.model.encoder_decoder import Transformer
from transformer.model.heads import every_head
from transformer.text.json_tokenizer import JsonTokenizer
from ui.state.url import choices_text

UPLOAD_INPUT = '[data-testid="stFileUploaderDropzoneInput"]'
SENTENCE = "The black cat is sleeping."


@dataclass(frozen=True)
class Placed:
    """The visits' files: in the app's checkpoints folder (by the names it lists them) or to upload."""

    f16_directory: str
    timeline_checkpoint: str
    many_heads: str
    many_heads_off: str  # the link's `off=` for 461 of its 768 heads
    large_vocabulary: Path
    shipped: Path
    toolkit_folders: dict[str, str]  # each hostile toolkit folder (hostile_toolkits.MADE) by what it is: its name
    deep: str  # the deep upload's shape (fixtures.deep_upload), listed by this name


Visit = Callable[[Browser, str, Placed], str]


@contextlib.contextmanager
def placed(folder: Path, memory_gb: float) -> Iterator[Placed]:
    """Makes the visits' models in `folder` and lists those the server reads from its checkpoints folder there
    (links named benchmark-*) while the block runs: start the server inside it."""
    shipped = load_checkpoint(DEFAULT_CHECKPOINT)
    with contextlib.ExitStack() as links:
        many = many_headed(folder / "heads768.safetensors", shipped)
        heads = every_head(many)
        picked = set(random.Random(0).sample(heads, 461))
        toolkits = folder / "toolkits"
        toolkits.mkdir()
        made = {m.what: linked_checkpoint(m.make(toolkits), f"hostile-{i}") for i, m in enumerate(MADE)}
        deep, tokenizer = deep_upload()
        save_checkpoint(folder / "deep.safetensors", deep, tokenizer)
        yield Placed(
            toolkit_folders={what: links.enter_context(link) for what, link in made.items()},
            deep=links.enter_context(linked_checkpoint(folder / "deep.safetensors", "hostile-deep")),
            f16_directory=links.enter_context(linked_checkpoint(f16_directory(folder, memory_gb), "hostile-f16")),
            timeline_checkpoint=links.enter_context(linked_timeline(folder)),
            many_heads=links.enter_context(linked_checkpoint(folder / "heads768.safetensors", "hostile-heads")),
            many_heads_off=choices_text([head for head in heads if head in picked], heads),
            large_vocabulary=large_vocabulary(folder / "words200k.safetensors"),
            shipped=DEFAULT_CHECKPOINT,
        )


def f16_directory(folder: Path, memory_gb: float) -> Path:
    """A Marian directory whose F16 weights (sparse: no disk) take 0.3 of the cap in the file and 0.6 laid out in
    float32: within the machine's free memory, past the server's room under its cap."""
    directory = folder / "f16"
    directory.mkdir()
    english, french = "a dog cat runs sleeps the small red".split(), "un chien chat court dort le petit rouge".split()
    rng = random.Random(0)
    directory = save_marian(
        directory,
        [" ".join(rng.choices(english, k=6)) for _ in range(200)],
        [" ".join(rng.choices(french, k=6)) for _ in range(200)],
    )
    weights = directory / "model.safetensors"
    write_with_sparse_tensor(weights.read_bytes(), weights, int(0.15 * memory_gb * 2**30))
    return directory


@contextlib.contextmanager
def linked_timeline(folder: Path) -> Iterator[str]:
    """The shipped checkpoint listed again with a timeline of two snapshots of one 300-piece probe: 29 MB of maps."""
    timeline = load_timeline(timeline_path(DEFAULT_CHECKPOINT))
    two = timeline.at([0, len(timeline.snapshots) - 1])
    probe, pieces = two.probes[0], 300
    rng = np.random.default_rng(0)
    maps = {}
    for kind, kept in probe.maps.items():
        weights = rng.random((*kept.shape[:3], pieces, pieces), dtype=np.float32)
        maps[kind] = (weights / weights.sum(-1, keepdims=True)).astype(np.float16)
    long_probe = replace(
        probe,
        src_pieces=[f"▁s{i}" for i in range(pieces)],
        tgt_pieces=[f"▁t{i}" for i in range(pieces)],
        maps=maps,
        token_probs=np.full((2, pieces), 0.5, np.float32),
        lens_rank=np.ones((2, probe.lens_rank.shape[1], pieces), np.float32),
    )
    with linked_checkpoint(DEFAULT_CHECKPOINT, "hostile-timeline") as name:
        path = timeline_path(DEFAULT_CHECKPOINT.parent / f"{name}.safetensors")
        save_timeline(path, replace(two, probes=[long_probe]))
        try:
            yield name
        finally:
            path.unlink(missing_ok=True)


def many_headed(path: Path, shipped) -> TransformerConfig:
    """A model of 768 heads (16 of them in each of 16 encoder and 16 decoder layers, self and cross)."""
    config = replace(
        shipped.config, d_model=64, n_heads=16, d_ff=64, n_encoder_layers=16, n_decoder_layers=16, max_len=64
    )
    torch.manual_seed(0)
    save_checkpoint(path, Transformer(config).eval(), shipped.tokenizer, dtype=torch.float16)
    return config


def large_vocabulary(path: Path) -> Path:
    """An upload within every budget whose vocabulary has 200,000 words (4.6 MB of them killed a server past 8 GB
    on Which heads matter): a word-level tokenizer, 16-wide embeddings, F16."""
    words = ["<pad>", "<unk>", "<s>", "</s>", *SENTENCE.replace(".", " .").split(), "Le", "chat", "noir", "dort"]
    words += [f"w{i}" for i in range(200_000 - len(words))]
    backend = Tokenizer(WordLevel({word: i for i, word in enumerate(words)}, "<unk>"))
    backend.pre_tokenizer = Whitespace()
    backend.decoder = WordPiece(prefix="##")  # joins the words with spaces
    config = TransformerConfig(
        200_000, 200_000, d_model=16, n_heads=2, d_ff=32, n_encoder_layers=1, n_decoder_layers=1, max_len=128
    )
    save_checkpoint(path, Transformer(config).eval(), JsonTokenizer(backend.to_str()), dtype=torch.float16)
    return path


def upload(page: Page, index: int, path: Path) -> None:
    page.locator(UPLOAD_INPUT).nth(index).set_input_files(path)
    page.get_by_text(path.name, exact=True).first.wait_for(state="attached", timeout=120_000)
    wait_idle(page, timeout=300_000)


def upload_checkpoint(page: Page, url: str, path: Path) -> str:
    """Uploads a checkpoint on the Checkpoints page: 'taken' or the refusal's first words."""
    page.goto(f"{url}/checkpoints")
    wait_idle(page)
    page.get_by_text("Upload a checkpoint").first.click()
    page.wait_for_selector(UPLOAD_INPUT, state="attached")
    page.locator(UPLOAD_INPUT).first.set_input_files(path)  # taken: the page opens it, its expander closed
    answer = page.get_by_text(f"{path.stem} (uploaded)").or_(page.get_by_text("was refused")).first
    answer.wait_for(state="attached", timeout=300_000)
    text = answer.inner_text()
    return "taken" if "was refused" not in text else text.split("was refused: ", 1)[-1][:60]


def large_vocabulary_on_heads(browser: Browser, url: str, placed: Placed) -> str:
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    taken = upload_checkpoint(page, url, placed.large_vocabulary)
    if taken != "taken":
        return f"upload refused: {taken}"
    page.get_by_role("link", name="Head statistics").click()  # the app's own link: the same session
    wait_idle(page, timeout=300_000)
    page.wait_for_function(f"document.querySelectorAll('{UPLOAD_INPUT}').length >= 3", timeout=300_000)
    folder = placed.large_vocabulary.parent
    (folder / "src.txt").write_text(f"{SENTENCE}\n" * 10)
    (folder / "ref.txt").write_text("Le chat noir dort.\n" * 10)
    upload(page, 1, folder / "src.txt")  # the page's first uploader is Head statistics' sample
    upload(page, 2, folder / "ref.txt")
    page.get_by_role("button", name="Measure the heads").click()
    answer = page.get_by_text("measured against").or_(page.get_by_text("cannot")).first
    answer.wait_for(state="attached", timeout=600_000)
    said = answer.inner_text()[:70]
    page.close()
    return said


PROXY_TOKEN = "hostile-visits-proxy"  # the server is started with it: these visits speak as the classroom's nginx


def eight_then_another(browser: Browser, url: str, placed: Placed, claimed: list[str], other: dict[str, str]) -> str:
    """Eight visitors, each with a fresh cookie and the headers `claimed[i]` makes, uploading and keeping the shipped
    model, then one with `other`'s: how many of the eight were taken, and whether the other's was."""
    taken = []
    contexts = [browser.new_context(extra_http_headers=claimed[i]) for i in range(8)]
    for context in contexts:  # each keeps its upload open: its tab stays
        taken.append(upload_checkpoint(context.new_page(), url, placed.shipped) == "taken")
    last = browser.new_context(extra_http_headers=other)
    theirs = upload_checkpoint(last.new_page(), url, placed.shipped)
    for context in [*contexts, last]:
        context.close()
    return f"{sum(taken)} of 8 taken; the next one's: {theirs}"


def fresh_cookies(browser: Browser, url: str, placed: Placed) -> str:
    """Eight visitors from one address behind the proxy (a fresh cookie each, as one person can make them), then a
    visitor from another address."""
    proxied = {"X-Explorer-Proxy": PROXY_TOKEN}
    one = [proxied | {"X-Forwarded-For": "198.51.100.7"}] * 8
    return eight_then_another(browser, url, placed, one, proxied | {"X-Forwarded-For": "203.0.113.9"})


def claimed_addresses(browser: Browser, url: str, placed: Placed) -> str:
    """Eight visitors from loopback without the proxy's token, each claiming a new address (X-Forwarded-For), then
    a ninth: they are one address ("local"), which holds one share."""
    claims = [{"X-Forwarded-For": f"198.51.100.{i}"} for i in range(1, 10)]
    return eight_then_another(browser, url, placed, claims[:8], claims[8])


def f16_in_the_folder(browser: Browser, url: str, placed: Placed) -> str:
    return opened(browser, f"{url}/?{urlencode({'ckpt': placed.f16_directory})}", "is free now")


def long_timeline(browser: Browser, url: str, placed: Placed) -> str:
    """How it learned on the timeline of two 15 MB snapshots: the megabytes the server sent the tab, over its
    websocket and as the large messages Streamlit serves by their hash (/_stcore/message)."""
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    sent = []
    page.on("websocket", lambda socket: socket.on("framereceived", lambda frame: sent.append(len(frame))))
    page.on(
        "requestfinished",
        lambda request: "/_stcore/message" in request.url and sent.append(request.sizes()["responseBodySize"]),
    )
    page.goto(f"{url}/learned?{urlencode({'ckpt': placed.timeline_checkpoint})}")
    page.get_by_text("mean of the heads").first.wait_for(state="attached", timeout=300_000)
    wait_idle(page, timeout=300_000)
    page.close()
    return f"{sum(sent) / 1e6:.1f} MB sent to the tab"


def many_heads_link(browser: Browser, url: str, placed: Placed) -> str:
    query = {"ckpt": placed.many_heads, "text": SENTENCE, "off": placed.many_heads_off}
    link = f"{url}/heads?{urlencode(query)}"
    said = opened(browser, link, "461 heads off")
    return f"{said} (a link of {len(link) - len(url)} characters)"


def opened(browser: Browser, link: str, expected: str) -> str:
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(link)
    answer = page.get_by_text(expected).first
    answer.wait_for(state="attached", timeout=300_000)
    wait_idle(page, timeout=300_000)
    text = answer.inner_text()
    page.close()
    start = max(0, text.find(expected) - 40)
    return text[start : start + 90].replace("\n", " ")


def toolkit_folder(made: Made) -> Visit:
    """The hostile folder opened by a link: the page's refusal, in a few words."""
    return lambda browser, url, placed: opened(
        browser, f"{url}/?{urlencode({'ckpt': placed.toolkit_folders[made.what]})}", made.refusal
    )


def long_sentence_on_the_deep_model(browser: Browser, url: str, placed: Placed) -> str:
    """1,000 words decoded by the deep model (3.8 GB of encoder maps): the sidebar says how long a sentence fits."""
    return opened(browser, f"{url}/?{urlencode({'ckpt': placed.deep, 'text': ' '.join(['w1'] * 999)})}", "shorten")


def cause_on_the_deep_model(browser: Browser, url: str, placed: Placed) -> str:
    """The Cause page with 200 words on the deep model (3,200 passes): refused before the run."""
    query = {"ckpt": placed.deep, "text": " ".join(["w1"] * 200), "corrupt": " ".join(["w2"] * 200), "target": "w1"}
    return opened(browser, f"{url}/cause?{urlencode(query)}", "Cannot patch")


VISITS: dict[str, Visit] = {
    **{made.what: toolkit_folder(made) for made in MADE},
    "the deep model (60 encoder layers of 16 heads) linked with 1,000 words": long_sentence_on_the_deep_model,
    "Cause with 200 words on the deep model": cause_on_the_deep_model,
    "a 200,000-word vocabulary uploaded, then Which heads matter": large_vocabulary_on_heads,
    "8 fresh cookies from one address uploading, then another address": fresh_cookies,
    "8 sessions from loopback claiming 8 addresses, then a ninth": claimed_addresses,
    "F16 weights in the checkpoints folder past the server's room": f16_in_the_folder,
    "a timeline of two 15 MB snapshots on How it learned": long_timeline,
    "a link switching off 461 of 768 heads": many_heads_link,
}
