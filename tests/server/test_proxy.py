"""A classroom's setup, `bash scripts/serve.sh --replicas 2`: simulated visitors and Chromium through nginx,
sticky sessions, and a replica lost (last: it stops one of the two)."""

from __future__ import annotations

import asyncio
import functools
import gzip
import os
import signal
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from fixtures.browser import ARTIFACTS, chromium, proxy_server, wait_for_heatmaps, wait_idle
from fixtures.sessions import run_sessions
from fixtures.visitors import classroom, visit
from playwright.sync_api import Locator
from playwright.sync_api import TimeoutError as PlaywrightTimeout

pytestmark = pytest.mark.browser
RUN_DIR = ARTIFACTS / "proxy"
UPLOADER = '[data-testid="stFileUploaderDropzoneInput"]'


@pytest.fixture(scope="module")
def proxy():
    with proxy_server(2, RUN_DIR) as running:
        yield running


VISITOR_SENTENCES = (
    "Two dogs play in the snow.",
    "A man rides a bicycle.",
    "A girl reads a book.",
    "Three boys swim in the lake.",
    "A woman sings on a stage.",
    "Two men play chess.",
    "A child eats an apple.",
    "A dog runs on the beach.",
    "An old man reads a newspaper.",
    "Four girls dance in a park.",
    "A cat sleeps on a chair.",
    "A boy kicks a ball.",
)


def replica_logs() -> str:
    return "\n".join(path.read_text() for path in sorted(RUN_DIR.glob("replica-*.log")))


def test_simulated_visitors_speaking_streamlits_protocol_are_all_served_and_checked(proxy):
    visits = asyncio.run(classroom(proxy.url, visitors=12, ramp_seconds=3))
    assert [v.error for v in visits] == [None] * 12
    assert all(v.translate_ms and v.open_ms for v in visits)
    wrong = asyncio.run(visit(proxy.url, "Two dogs play in the snow.", "Un chat dort.", delay=0))
    assert "not the model's" in wrong.error  # the generator reads the page: a wrong translation is an error


def test_ten_browsers_at_once_each_get_their_own_result(proxy):
    reports = asyncio.run(run_sessions(proxy.url, 10))
    assert all(report.correct for report in reports), [r.sentence for r in reports if not r.correct]
    assert all(report.own_attention for report in reports), [r.sentence for r in reports if not r.own_attention]
    assert "Traceback" not in replica_logs()


def test_an_upload_through_nginx_reaches_the_visitors_own_replica(proxy, tmp_path):
    source = tmp_path / "two.en"
    source.write_text("Two dogs are playing in the snow.\nA man is riding a bicycle.\n")
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1400, "height": 1000})
        page.goto(f"{proxy.url}/corpus")
        wait_idle(page)
        page.locator(UPLOADER).first.set_input_files(source)
        page.get_by_text("two.en").wait_for()
        page.get_by_role("button", name="Translate the file").click()
        page.get_by_text("Click a column header to sort").wait_for(timeout=60_000)  # the table of translations
        page.locator('[data-testid="stDataFrame"]').first.wait_for()
        page.wait_for_function(
            "document.documentElement.innerHTML.includes('Deux chiens jouent dans la neige')", timeout=30_000
        )  # the grid's accessible copy of its cells, drawn after the canvas
        assert page.locator('[data-testid="stException"]').count() == 0


def test_arriving_visitors_are_served_while_one_visitor_runs_heavy_jobs_in_two_tabs(proxy, tmp_path):
    """Two tabs of one visitor on Which heads matter, each parsing gold parses, held both of a replica's page slots
    for minutes, and 20 of 30 arriving visitors timed out. Their jobs, the parsing included, now wait and compute
    in the heavy-job slot, leaving the replica's other page slot to the room, and stop once the visitor leaves."""
    word = "{}\tw\tw\tNOUN\t_\t_\t{}\tdep\t_\t_\n"
    treebank = tmp_path / "long.conllu.gz"  # 2,000 sentences of 256 words: a legitimate treebank, long to parse
    treebank.write_bytes(gzip.compress(("".join(word.format(i, i - 1) for i in range(1, 257)) + "\n").encode() * 2000))
    with chromium() as browser:
        visitor = browser.new_context(viewport={"width": 1400, "height": 1000})  # one cookie: one replica
        tabs = [visitor.new_page() for _ in range(2)]
        for number, tab in enumerate(tabs):
            sample = tmp_path / f"sample-{number}.en"  # two samples: two jobs, not one cached result awaited twice
            sample.write_text("\n".join(f"{s} ({number}, {i})" for i in range(5) for s in VISITOR_SENTENCES))
            tab.goto(f"{proxy.url}/heads")
            tab.wait_for_function(f"document.querySelectorAll('{UPLOADER}').length >= 4", timeout=120_000)
            for uploader, upload in ((1, sample), (3, treebank)):  # the first is Head statistics' sample
                tab.locator(UPLOADER).nth(uploader).set_input_files(upload)
                tab.get_by_text(upload.name, exact=True).first.wait_for(state="attached", timeout=60_000)
                wait_idle(tab)
            tab.get_by_text("also each head switched off").click()
            tab.get_by_text("Also the pruning curve").click()
            tab.get_by_role("button", name="Measure the heads").click()
        for tab in tabs:  # one computing, one in line
            busy(tab).first.wait_for(timeout=120_000)
        cookies = {c["name"]: c["value"] for c in visitor.cookies()}
        busy_port = proxy.replica_ports[int(cookies["te_replica"].rpartition("-")[2]) - 1]

        with ThreadPoolExecutor(1) as room:  # Playwright's loop runs in this thread; the room's in its own
            visits = room.submit(asyncio.run, classroom(proxy.url, visitors=12, ramp_seconds=3, seed=1)).result()
        assert [v.error for v in visits] == [None] * 12

        assert all(busy(tab).count() for tab in tabs), (
            "the heavy jobs ended before the room was served: the test showed nothing"
        )
        visitor.close()  # the visitor leaves: both jobs stop
    assert computing_stops(proxy.replica_pid(busy_port)), "the replica kept computing for a visitor who had left"
    assert "Traceback" not in replica_logs()


def busy(tab):
    """What a tab whose heads are being measured shows: a part's bar, or its place in line."""
    parts = [tab.get_by_text(text) for text in ("Reading the gold parses", "Switching each head off", "Pruning")]
    return functools.reduce(Locator.or_, parts, tab.get_by_text("in line"))


def computing_stops(pid: int, within: float = 60.0) -> bool:
    """Whether the process comes to use under a tenth of a core over a second, before `within` seconds pass."""
    clock_ticks = os.sysconf("SC_CLK_TCK")

    def cpu_seconds() -> float:
        fields = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()
        return (int(fields[11]) + int(fields[12])) / clock_ticks  # utime, stime

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        before = cpu_seconds()
        time.sleep(1)
        if cpu_seconds() - before < 0.1:
            return True
    return False


def test_the_room_gets_safe_headers_and_no_server_internals(proxy):
    import urllib.error
    import urllib.request

    with urllib.request.urlopen(proxy.url, timeout=30) as response:
        headers = response.headers
    assert headers["X-Frame-Options"] == "SAMEORIGIN" and "frame-ancestors 'self'" in headers["Content-Security-Policy"]
    assert headers["X-Content-Type-Options"] == "nosniff" and headers["Referrer-Policy"] == "same-origin"
    assert headers["Server"] == "nginx"  # no version
    with pytest.raises(urllib.error.HTTPError) as refused:
        urllib.request.urlopen(f"{proxy.url}/_stcore/metrics", timeout=30)
    assert refused.value.code == 404


def test_the_proxy_vouches_for_the_address_it_forwards_on_the_websocket_too_and_the_replicas_know_its_token(proxy):
    """The app reads a visitor's address from the websocket's request: its location set headers of its own, so it
    inherited none of the server's, and a client's own X-Forwarded-For passed through unchanged. The replicas trust
    the header only beside the proxy's token (ui/services/uploads.client_address)."""
    import re

    conf = (RUN_DIR / "nginx.conf").read_text()
    (token,) = set(re.findall(r"proxy_set_header X-Explorer-Proxy ([0-9a-f]{48});", conf))
    for block in conf.split("location")[1:]:
        if "proxy_pass" in block and "proxy_set_header" in block:
            assert "proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;" in block, block
            assert f"proxy_set_header X-Explorer-Proxy {token};" in block, block
    for port in proxy.replica_ports:
        environment = Path(f"/proc/{proxy.replica_pid(port)}/environ").read_bytes().split(b"\0")
        assert f"TRANSFORMER_EXPLORER_PROXY_TOKEN={token}".encode() in environment


def test_a_stopped_replica_moves_only_its_visitors_who_are_told_their_view_was_reset(proxy):
    with chromium() as browser:
        visitors = []
        for sentence in VISITOR_SENTENCES:
            if len(visitors) >= 4 and len({replica for _, replica, _ in visitors}) == 2:
                break  # the cookie is random, so four visitors share one replica one time in eight: open more
            context = browser.new_context(viewport={"width": 1400, "height": 1000})
            page = context.new_page()
            failed = []
            page.on(
                "response",
                lambda response, failed=failed: failed.append(response.url) if response.status >= 400 else None,
            )
            page.goto(f"{proxy.url}/attention?text={sentence.replace(' ', '%20')}")
            wait_for_heatmaps(page, 1)
            wait_idle(page)
            assert failed == []  # nor a page's own /attention/_stcore/health, which Streamlit alone answers 404
            replica = {c["name"]: c["value"] for c in context.cookies()}["te_replica"]
            visitors.append((page, replica, sentence))
        held = {replica for _, replica, _ in visitors}
        assert len(held) == 2, f"{len(visitors)} visitors, every one on the same replica: not spread by their cookies"
        stopped = visitors[0][1]
        assert stopped.startswith("replica-")  # a name: the cookie shows no internal address
        os.kill(proxy.replica_pid(proxy.replica_ports[int(stopped.rpartition("-")[2]) - 1]), signal.SIGKILL)
        for page, replica, sentence in visitors:
            notice = page.get_by_text("The server that held your session stopped")
            if replica == stopped:
                assert moved_at_a_click(page, notice)
                assert page.get_by_label("Sentence").input_value() == sentence  # the link brought it back
            else:
                page.get_by_text("decoder masked self-attention").click()
                wait_idle(page)
                page.wait_for_timeout(500)
                assert notice.count() == 0  # the other replica's visitors lost nothing
            wait_for_heatmaps(page, 1)
            assert page.locator('[data-testid="stException"]').count() == 0


def moved_at_a_click(page, notice, attempts: int = 8) -> bool:
    """Clicks as a visitor would until the page has reconnected (a click while the browser still finds its
    replica gone is not sent) and the moved session answers with its notice."""
    for attempt in range(attempts):
        page.get_by_text(("decoder masked self-attention", "encoder self-attention")[attempt % 2]).click()
        try:
            notice.wait_for(timeout=5_000)
            return True
        except PlaywrightTimeout:
            continue
    return False


def test_a_stopped_replica_is_started_again(proxy):
    import urllib.request

    deadline = time.monotonic() + 180  # the previous test killed one; its model loads again
    log = RUN_DIR / "serve.log"
    while "starting it again" not in log.read_text() or not all(proxy.replica_pid(p) for p in proxy.replica_ports):
        assert time.monotonic() < deadline, log.read_text()
        time.sleep(1)
    for port in proxy.replica_ports:
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=5)
                break
            except OSError:
                assert time.monotonic() < deadline, f"replica on {port} did not come back"
                time.sleep(1)
