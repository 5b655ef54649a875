"""End to end in Debian's Chromium: the README's app, typed into, stepped through, its heatmaps drawn."""

from __future__ import annotations

import re
from urllib.parse import urlencode

import pytest
from fixtures.browser import (
    ARTIFACTS,
    PLAYER,
    REPORT_ALL_DRAWN,
    REPORT_SCREEN_DRAWN,
    app_server,
    chromium,
    count_frames_sent,
    step_view_position,
    wait_for_heatmaps,
    wait_for_step_view,
    wait_idle,
)
from fixtures.patching_pair import CLEAN, CORRUPT

from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint
from transformer.io.timeline_file import load_timeline, timeline_path

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def server():
    with app_server(ARTIFACTS / "server.log") as running:
        yield running.url


@pytest.fixture(scope="module")
def browser():
    with chromium() as browser:
        yield browser


def test_type_translate_step_and_see_every_head(server, browser):
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.goto(server)
    wait_for_step_view(page)  # the step's cross- and self-attention, drawn in the browser
    page.get_by_text("Step 1 of").wait_for()

    page.get_by_label("Sentence").fill("Two dogs are playing in the snow.")
    page.get_by_role("button", name="Translate").click()
    page.get_by_text("Deux chiens jouent dans la neige").first.wait_for()
    page.get_by_text("Step 1 of 9").wait_for()  # the new sentence's step view, not the one it replaces
    wait_idle(page)
    page.get_by_role("button", name="Next").click()
    page.get_by_text("Step 2 of 9").wait_for()
    wait_for_step_view(page, 2)
    page.screenshot(path=ARTIFACTS / "explorer.png", full_page=True)

    page.get_by_role("link", name="Attention maps").click()
    wait_for_heatmaps(page, 1)
    page.get_by_text("whole model").click()
    wait_for_heatmaps(page, 24)  # 3 layers x 8 heads
    page.screenshot(path=ARTIFACTS / "attention-model-view.png", full_page=True)

    assert page.locator('[data-testid="stException"]').count() == 0
    log = (ARTIFACTS / "server.log").read_text()
    assert "Traceback" not in log, log


def test_a_stepped_map_shows_the_weights_of_the_step_on_screen(server, browser):
    """The cross-attention map is recoloured in place from step to step (its rows and keys stay): after each click
    every cell holds the weight of the step on screen, as the model computed it."""
    import numpy as np

    from transformer.decoding.greedy import decode_with_chooser
    from transformer.io.checkpoint import load_checkpoint
    from transformer.viz.attention import with_layer_means

    sentence = "The black cat sleeps on the red chair."
    checkpoint = load_checkpoint(DEFAULT_CHECKPOINT)
    result = decode_with_chooser(checkpoint.model, checkpoint.tokenizer, sentence)
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.goto(f"{server}/?text={sentence.replace(' ', '%20')}")
    wait_for_step_view(page, 1)
    cells = f"[...{PLAYER}.querySelector('.right .map .grid').querySelectorAll('.cell')].map(c => c.title)"
    for step in (2, 3, 5, 4):
        shown, _ = step_view_position(page)
        name = "Next" if step > shown else "Previous"
        for _ in range(abs(step - shown)):
            page.get_by_role("button", name=name).click()
        wait_for_step_view(page, step)
        titles = page.evaluate(cells)
        weights = np.array([float(title.rsplit("weight ", 1)[1]) for title in titles])
        expected = with_layer_means(result.cross[:, :, step - 1].numpy())  # (L, H + 1, S): the rows on screen
        np.testing.assert_allclose(weights, expected.reshape(-1), atol=1.5e-3, err_msg=f"step {step}")


def test_script_in_the_sentence_is_shown_as_text_never_run(server, browser):
    page = browser.new_page()
    dialogs = []
    page.on("dialog", lambda dialog: (dialogs.append(dialog.message), dialog.dismiss()))
    page.goto(server)
    wait_for_step_view(page)
    page.get_by_label("Sentence").fill("<script>alert('x')</script><img src=x onerror=alert('y')> a dog")
    page.get_by_role("button", name="Translate").click()
    page.get_by_text("<script>alert('x')</script>", exact=False).first.wait_for()
    wait_for_step_view(page)
    page.wait_for_timeout(500)
    assert dialogs == []
    assert page.locator("img[src=x]").count() == 0


def test_addresses_in_the_sentence_are_shown_as_text_not_links(server, browser):
    page = browser.new_page()
    page.goto(f"{server}/?text=see%20(http://127.0.0.1:9/x)%20and%20www.example.com%20now")
    wait_for_step_view(page)
    page.get_by_text("127.0.0.1:9/x", exact=False).first.wait_for()
    main = page.locator('[data-testid="stMain"]')
    assert main.locator('a[href*="127.0.0.1:9"]').count() == 0 and main.locator('a[href*="example.com"]').count() == 0


def test_the_html_report_draws_its_first_screen_then_the_rest_as_they_near_it_offline(browser, tmp_path):
    from helpers import REPO

    from transformer.decoding.greedy import decode_with_chooser
    from transformer.io.checkpoint import load_checkpoint
    from transformer.viz.report import html_report

    shipped = load_checkpoint(REPO / "checkpoints" / "en-fr-captions.safetensors")
    sentence = "Two dogs are playing in the snow."
    (tmp_path / "report.html").write_text(
        html_report(decode_with_chooser(shipped.model, shipped.tokenizer, sentence), sentence, "en-fr-captions")
    )
    page = browser.new_page(viewport={"width": 1200, "height": 900})
    outside = []
    page.route(
        "**/*",
        lambda route: (
            route.continue_()
            if route.request.url.startswith("file:")
            else (outside.append(route.request.url), route.abort())
        ),
    )
    page.goto((tmp_path / "report.html").as_uri())
    page.wait_for_function(REPORT_SCREEN_DRAWN)
    drawn = page.evaluate("document.querySelectorAll('.figure.js-plotly-plot').length")
    assert 1 <= drawn < 5  # the first screen, not every figure
    for holder in page.locator(".figure").all():  # a reader scrolling down the page
        holder.scroll_into_view_if_needed()
    page.wait_for_function(REPORT_ALL_DRAWN, timeout=60_000)
    assert page.evaluate("document.querySelectorAll('.figure.js-plotly-plot').length") == 5 and outside == []


@pytest.mark.parametrize(
    ("link", "figures"),
    [("Positional encoding", 4), ("Masks", 13), ("Attention, step by step", 13), ("Attribution", 4)],
)
def test_teaching_pages_draw_in_chromium(server, browser, link, figures):
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.goto(server)
    wait_for_step_view(page)
    page.get_by_role("link", name=link).click()
    wait_for_heatmaps(page, figures)
    wait_idle(page)
    page.screenshot(path=ARTIFACTS / f"{link.split(',')[0].lower().replace(' ', '-')}.png", full_page=True)
    assert page.locator('[data-testid="stException"]').count() == 0


# What a screen would show wrongly, read from the elements' boxes: a control's label cut (a word split over
# two lines, or text past its box), a figure title past its figure's edge, an axis title over a tick label;
# on a projector (narrow: true), also
# figures narrower than half the content.
VIEW_PROBLEMS = """(narrow) => {
  const main = document.querySelector('[data-testid="stMainBlockContainer"]');
  const style = getComputedStyle(main);
  const content = main.clientWidth - parseFloat(style.paddingLeft) - parseFloat(style.paddingRight);
  const cut = (element) => {
    if (element.scrollWidth > element.clientWidth + 1) return true;
    const texts = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
    for (let node = texts.nextNode(); node; node = texts.nextNode()) {
      for (const word of node.textContent.matchAll(/\\S+/g)) {
        const range = document.createRange();
        range.setStart(node, word.index);
        range.setEnd(node, word.index + word[0].length);
        if (new Set([...range.getClientRects()].map(r => Math.round(r.top))).size > 1) return true;
      }
    }
    return false;
  };
  const problems = [];
  for (const plot of main.querySelectorAll('.js-plotly-plot')) {
    const box = plot.getBoundingClientRect();
    if (box.width === 0) continue;  // in a closed expander or another tab
    if (narrow && box.width < content / 2) problems.push(`figure ${Math.round(box.width)} px wide of ${Math.round(content)}`);
    for (const title of plot.querySelectorAll('.gtitle, .g-xtitle text, .g-ytitle text')) {
      const r = title.getBoundingClientRect();
      if (r.width && (r.left < box.left - 1 || r.right > box.right + 1)) problems.push(`title cut: ${title.textContent}`);
    }
    const overlap = (a, b) => a.width && b.width && a.left < b.right && b.left < a.right && a.top < b.bottom && b.top < a.bottom;
    const bars = [...plot.querySelectorAll('.colorbar')].map(bar => bar.getBoundingClientRect());
    if (bars.some((a, i) => bars.some((b, j) => j < i && overlap(a, b)))) problems.push('colour bars over each other');
    const legend = plot.querySelector('.legend')?.getBoundingClientRect();
    for (const title of plot.querySelectorAll('.gtitle')) {
      if (legend && overlap(title.getBoundingClientRect(), legend)) problems.push(`title over the legend: ${title.textContent}`);
    }
    for (const title of plot.querySelectorAll('.annotation-text')) {  // a projector's subplot titles: 18 px too
      const size = parseFloat(getComputedStyle(title).fontSize);
      if (narrow && size < 18) problems.push(`subplot title ${size} px: ${title.textContent}`);
    }
    for (const title of plot.querySelectorAll('.annotation-text')) {  // a subplot's title over the labels above it
      const t = title.getBoundingClientRect();
      const under = [...plot.querySelectorAll('.xtick text')].find(tick => overlap(t, tick.getBoundingClientRect()));
      if (under) problems.push(`map title over a label: ${title.textContent} / ${under.textContent}`);
    }
    for (const [titles, ticks] of [['.g-xtitle text', '.xtick text'], ['.g-ytitle text', '.ytick text']]) {
      for (const title of plot.querySelectorAll(titles)) {
        const t = title.getBoundingClientRect();
        for (const tick of plot.querySelectorAll(ticks)) {
          const k = tick.getBoundingClientRect();
          if (k.width && t.left < k.right && k.left < t.right && t.top < k.bottom && k.top < t.bottom) {
            problems.push(`axis title over a label: ${title.textContent} / ${tick.textContent}`);
          }
        }
      }
    }
  }
  for (const formula of main.querySelectorAll('.katex-display')) {  // a part drawn past its box: cut at the edge
    const box = formula.getBoundingClientRect();
    const parts = [...formula.querySelectorAll('.katex-html .base')].map(part => part.getBoundingClientRect());
    if (box.width > 0 && parts.some(r => r.right > box.right + 1 || r.left < box.left - 1)) {
      problems.push(`formula cut: ${formula.querySelector('.katex-html').textContent.slice(0, 40)}`);
    }
  }
  const right = main.getBoundingClientRect().right;
  for (const tab of main.querySelectorAll('[role="tab"]')) {  // scrolled past the page's edge, its label out of view
    const r = tab.getBoundingClientRect();
    if (r.width && r.right > right + 1) problems.push(`tab past the edge: ${tab.textContent}`);
  }
  const labels = '[data-testid="stWidgetLabel"] p, [data-testid="stWidgetLabel"] [data-testid="stMarkdownContainer"], button p, ' +
    '[data-baseweb="checkbox"] [data-testid="stMarkdownContainer"]';  // a toggle's label too ("Merge pieces into wor…")
  for (const label of main.querySelectorAll(labels)) {  // a toggle's label clips in its container, with an ellipsis
    if (label.getBoundingClientRect().width > 0 && cut(label)) problems.push(`label cut: ${label.textContent}`);
  }
  return problems;
}"""


def test_every_figures_toolbar_downloads_it_as_svg_with_text_as_text_and_as_png_at_twice_its_size(server, browser):
    """For papers and slides (issue 85): beside Plotly's camera (a PNG at 2x), an SVG button, Plotly's own export
    in the browser; the SVG's tokens and titles are <text> a vector editor reads, and every page has it."""
    import struct

    page = browser.new_page(viewport={"width": 1440, "height": 900}, accept_downloads=True)
    page.goto(f"{server}/attention")
    wait_for_heatmaps(page, 1)
    wait_idle(page)
    figure = page.locator(".js-plotly-plot").first
    figure.hover()
    svg_button = figure.locator(".modebar-btn.svg-download")
    svg_button.wait_for()
    assert figure.locator(".modebar-btn.svg-download").count() == 1  # once, however often the page redraws
    with page.expect_download() as svg:
        svg_button.click()
    assert svg.value.suggested_filename.endswith(".svg")
    text = open(svg.value.path(), encoding="utf-8").read()
    assert text.lstrip().startswith("<svg") and {"black", "cat"} <= set(re.findall(r"<text[^>]*>([^<]*)</text>", text))
    with page.expect_download() as png:
        figure.locator('.modebar-btn[data-title="Download plot as a PNG"]').click()
    header = open(png.value.path(), "rb").read(24)
    width = struct.unpack(">I", header[16:20])[0]
    assert header.startswith(b"\x89PNG") and width == 2 * round(figure.bounding_box()["width"])
    page.goto(f"{server}/positional")  # another page: its figures have it too
    wait_for_heatmaps(page, 1)
    page.locator(".js-plotly-plot").first.hover()
    page.locator(".js-plotly-plot").first.locator(".modebar-btn.svg-download").wait_for()


def test_no_label_or_title_is_cut_on_a_laptop_screen(server, browser):
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    problems = {}
    for path, figures in [
        ("", 0),
        ("attention", 1),
        ("attribution", 4),
        ("masks", 8),
        ("computation", 8),
        ("compare", 3),
        ("heads", 1),
        ("positional", 4),
    ]:
        page.goto(f"{server}/{path}")
        if path:
            wait_for_heatmaps(page, figures)
        else:
            wait_for_step_view(page)
        wait_idle(page)
        page.wait_for_timeout(500)  # Plotly's redraw at the column's final width
        problems[path or "explorer"] = page.evaluate(VIEW_PROBLEMS, False)
    assert problems == {name: [] for name in problems}


def test_attributions_controls_and_figures_fit_beside_the_open_sidebar_at_1024(server, browser):
    """At 1024x768 with the sidebar open, Layer and Head were empty slivers and the toggles read "Mean …" and
    "Merge piec…"."""
    page = browser.new_page(viewport={"width": 1024, "height": 768})
    page.goto(f"{server}/attribution")
    wait_for_heatmaps(page, 4, timeout=120_000)
    wait_idle(page)
    page.wait_for_timeout(500)
    assert page.locator('[data-testid="stSidebar"]').get_attribute("data-collapsed") == "false"
    widths = [page.locator('[data-testid="stSelectbox"]').nth(i).bounding_box()["width"] for i in (0, 1, 2)]
    assert min(widths[1:]) > 100, widths  # the sidebar's checkpoint first, then Layer and Head with room for a value
    assert page.evaluate(VIEW_PROBLEMS, True) == []


def test_the_alignment_page_scores_the_example_and_draws_a_pairs_links(server, browser):
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(f"{server}/alignment")
    page.get_by_text("Use the example instead").click()
    page.get_by_role("button", name="Align and score").click()
    wait_for_heatmaps(page, 3, timeout=120_000)  # an AER grid per convention, and the first pair's matrix
    wait_idle(page)
    page.get_by_text("Squares: sure gold links").scroll_into_view_if_needed()
    page.wait_for_timeout(500)
    page.screenshot(path=ARTIFACTS / "alignment.png")
    markers = page.locator(".js-plotly-plot").nth(2).locator(".scatterlayer .point")
    assert markers.count() > 8  # gold squares and circles, and the extracted crosses
    assert page.evaluate(VIEW_PROBLEMS, False) == []
    assert page.locator('[data-testid="stException"]').count() == 0


# Text in the page (not a figure's: Plotly sizes its own) smaller than a room can read from the back, as
# computed: labels, values of selects, sliders and inputs, tags, captions, formulas and their subscripts, and
# the text of the views drawn in the browser (the step view's maps, lens and beam tree, in their shadow roots).
SMALL_TEXT = """() => {
  const small = new Set();
  const tooSmall = (element, text) => {
    const box = element.getBoundingClientRect();
    const size = parseFloat(getComputedStyle(element).fontSize);
    if (box.width > 0 && box.height > 0 && size < 18) small.add(`${text.trim().slice(0, 30)} (${size} px)`);
  };
  const read = (root) => {
    const texts = document.createTreeWalker(root, NodeFilter.SHOW_TEXT);
    for (let node = texts.nextNode(); node; node = texts.nextNode()) {
      const element = node.parentElement;
      if (!node.textContent.replace(/[\\s\\u200b]/g, '') || element.closest('.js-plotly-plot, style, script, title, '
          + '[data-testid="stIconMaterial"], .katex-mathml')) continue;  // figures, icon glyphs, hidden MathML
      if (element.closest('svg') && !element.closest('.tree')) continue;  // an icon's; the beam tree's are read
      tooSmall(element, node.textContent);
    }
    for (const input of root.querySelectorAll('input:not([type=checkbox]):not([type=radio]):not([type=range]), textarea')) {
      if (input.value) tooSmall(input, input.value);  // a select's or a box's value, drawn by the browser
    }
    for (const host of root.querySelectorAll('*')) if (host.shadowRoot) read(host.shadowRoot);
  };
  read(document.querySelector('[data-testid="stMain"]'));
  return [...small];
}"""


# Cause's example, as its link names it
CAUSE = {"text": CLEAN, "corrupt": CORRUPT, "target": "il", "against": "elle"}


@pytest.mark.parametrize("size", [(1024, 768), (1280, 720)], ids=["1024x768", "1280x720"])
def test_presentation_mode_fits_a_projector(server, browser, size):
    page = browser.new_page(viewport={"width": size[0], "height": size[1]})
    page.goto(server)
    wait_for_step_view(page)
    font = "parseFloat(getComputedStyle(document.querySelector('[data-testid=stMarkdownContainer] p')).fontSize)"
    before = page.evaluate(font)
    page.get_by_text("Presentation mode").click()
    page.wait_for_function(f"{font} > {before}")
    page.locator('[data-testid="stExpandSidebarButton"]').wait_for()  # collapsed, and the way to reopen it shown
    pages = [
        ("", 0),
        ("attention", 1),
        ("attention?view=mean", 1),
        ("attention?view=model", 1),
        ("attribution", 4),
        ("masks", 8),
        ("computation", 8),
        ("compare", 3),
        ("positional", 4),
        ("heads", 1),
        ("learned", 0),
        ("checkpoints", 0),
        ("alignment", 0),
        (f"cause?{urlencode(CAUSE)}", 5),
    ]
    if size != (1024, 768):  # the wider, shorter projector: the pages whose layout depends on the width
        pages = [entry for entry in pages if entry[0] in ("", "attention", "attribution", "learned")]
    drawn = {
        "learned": f"{PLAYER}?.querySelector('.epoch-map .map-title')",
        "checkpoints": "document.querySelectorAll('.js-plotly-plot').length >= 2",
        "alignment": "[...document.querySelectorAll('button')].some(b => b.textContent === 'Align and score')",
        f"cause?{urlencode(CAUSE)}": "[...document.querySelectorAll('button')].some(b => b.textContent.includes('CSV'))",
    }
    for path, figures in pages:
        if path:  # the other pages as a shared link opens them
            page.goto(f"{server}/{path}{'&' if '?' in path else '?'}presentation=1")
            wait_for_heatmaps(page, figures)
            page.wait_for_function(drawn.get(path, "true"), timeout=60_000)
        else:
            stacked = f"(() => {{ const maps = {PLAYER}.querySelectorAll('.map:not(.contributions) > .map-title'); return maps.length == 2 && maps[0].getBoundingClientRect().width > 0.9 * maps[0].closest('.body').getBoundingClientRect().width; }})()"
            page.wait_for_function(stacked)  # the step view's maps take the whole width, as the figures do
            starts = f"new Set([...{PLAYER}.querySelectorAll('.bar-track')].map(t => Math.round(t.getBoundingClientRect().left))).size"
            assert page.evaluate(starts) == 1  # the top-10 bars start at one x, whatever their labels' lengths
            cut = f"[...{PLAYER}.querySelectorAll('.lens-table > span')].filter(c => c.scrollWidth > c.clientWidth + 1).map(c => c.textContent)"
            assert page.evaluate(cut) == []  # each guess within its own column of the lens table
        wait_idle(page)
        page.wait_for_timeout(500)  # Plotly's redraw at the column's final width
        name = re.sub(r"\W", "-", path) or "explorer"
        page.screenshot(path=ARTIFACTS / f"presentation-{size[0]}x{size[1]}-{name}.png")
        assert page.evaluate(VIEW_PROBLEMS, True) == [], path
        assert page.evaluate(SMALL_TEXT) == [], path
        if path in ("computation", "attribution"):  # token labels apart ("sleepingon": two ran together at an angle)
            assert [f["overlapping"] for f in page.evaluate(FIGURES_READ) if f["overlapping"]] == [], path
        assert page.locator('[data-testid="stDataFrame"]').count() == 0, path  # a canvas: its text unread above
        assert page.locator('[data-testid="stSidebar"]').get_attribute("data-collapsed") == "true", path


def test_decoderlens_draws_each_encoder_layers_translation_in_the_lens_on_a_projector(server, browser):
    """What each encoder layer already says, opened by its link in presentation mode at 1024x768: a translation an
    encoder layer, the words the last layer's lacks underlined, each layer's guesses at the step; readable, uncut."""
    page = browser.new_page(viewport={"width": 1024, "height": 768})
    page.goto(f"{server}/?{urlencode({'text': CLEAN, 'dlens': '1', 'presentation': '1'})}")
    wait_for_step_view(page, 1)
    lens = page.locator(".lens")
    assert lens.locator(".map-title").text_content() == "what each encoder layer already says, read at step 1"
    layers = load_checkpoint(DEFAULT_CHECKPOINT).model.config.n_encoder_layers
    assert lens.locator(".layer-translation").count() == layers
    assert lens.locator(".layer-translation").nth(layers - 1).locator(".word.differs").count() == 0
    assert lens.get_by_role("button", name="the encoder's layers").get_attribute("aria-pressed") == "true"
    assert lens.locator(".lens-table .lens-layer").first.text_content() == "encoder layer 1"
    lens.get_by_role("button", name="the logit lens").click()  # the decoder's layers, one click away
    assert lens.locator(".map-title").text_content() == "what each decoder layer would predict at step 1"
    lens.get_by_role("button", name="the encoder's layers").click()
    wait_idle(page)
    cut = f"[...{PLAYER}.querySelectorAll('.lens-table > span')].filter(c => c.scrollWidth > c.clientWidth + 1).map(c => c.textContent)"
    assert page.evaluate(cut) == []
    page.screenshot(path=ARTIFACTS / "presentation-1024x768-decoderlens.png")
    assert page.evaluate(VIEW_PROBLEMS, True) == [] and page.evaluate(SMALL_TEXT) == []


def test_a_pair_set_runs_from_its_link_and_reads_on_a_projector(server, browser):
    """The Pair sets page (issue 82) as a class sees it at 1024x768 in presentation mode: a built-in set opened by its
    link, run, its grids, tables and links within the view, no text too small."""
    page = browser.new_page(viewport={"width": 1024, "height": 768})
    page.goto(f"{server}/sets?set=pronoun-gender&pairs=3&method=both&presentation=1")
    page.get_by_role("button", name="Run", exact=True).click()
    wait_for_heatmaps(page, 5, timeout=180_000)
    page.wait_for_function("[...document.querySelectorAll('a')].some(a => a.href.includes('/cause?'))", timeout=60_000)
    wait_idle(page)
    page.wait_for_timeout(500)  # Plotly's redraw at the column's final width
    page.screenshot(path=ARTIFACTS / "presentation-1024x768-sets.png", full_page=True)
    assert "3 of 3 pairs are correct" in page.inner_text('[data-testid="stMain"]')
    assert page.evaluate(VIEW_PROBLEMS, True) == []
    assert page.evaluate(SMALL_TEXT) == []
    assert page.locator('[data-testid="stDataFrame"]').count() == 0  # plain tables, which the room can read


# Each figure on screen as a room reads it: its tick labels' smallest size, the pairs of labels of one axis over each
# other, and its widest map's share of the figure's width.
FIGURES_READ = """() => [...document.querySelectorAll('.js-plotly-plot')].filter(p => p.getBoundingClientRect().width > 0)
  .map(plot => {
    const width = plot.getBoundingClientRect().width;
    const overlapping = [];
    for (const axis of ['.xtick text', '.ytick text']) {
      const ticks = [...plot.querySelectorAll(axis)].filter(t => t.getBoundingClientRect().width > 0);
      ticks.forEach((a, i) => ticks.slice(0, i).forEach(b => {
        const r = a.getBoundingClientRect(), q = b.getBoundingClientRect();
        if (r.left < q.right && q.left < r.right && r.top < q.bottom && q.top < r.bottom) {
          overlapping.push(`${b.textContent}/${a.textContent}`);
        }
      }));
    }
    const maps = [...plot.querySelectorAll('.heatmaplayer image')].map(m => m.getBoundingClientRect().width);
    const fonts = [...plot.querySelectorAll('.xtick text, .ytick text')].map(t => parseFloat(getComputedStyle(t).fontSize));
    return {title: plot.querySelector('.gtitle')?.textContent, smallest: Math.min(...fonts), overlapping,
            map: maps.length ? Math.max(...maps) / width : 1};
  })"""


def test_attribution_reads_on_a_projector(server, browser):
    """Tried as a new user would: at 1024x768 the five measures' map was 181 px of an 864 px figure, its 15 source
    labels over each other in 14 pairs, and the "Over every step" shares blue, the colour that says "lowered" there.
    Every figure of the tired/wide lesson's page, each tab's too: labels of 18 px or more, none over another, maps
    using the width."""
    page = browser.new_page(viewport={"width": 1024, "height": 768})
    page.goto(f"{server}/attribution?{urlencode({'text': CLEAN, 'step': 17, 'presentation': 1})}")
    wait_for_heatmaps(page, 4, timeout=180_000)
    wait_idle(page, timeout=180_000)
    tabs = page.get_by_role("tab")
    for tab in range(tabs.count()):
        tabs.nth(tab).click()
        page.wait_for_timeout(800)  # Plotly draws a tab's figure as it opens
        for figure in page.evaluate(FIGURES_READ):
            assert figure["smallest"] >= 18 and figure["overlapping"] == [] and figure["map"] > 0.55, figure
        scales = page.evaluate(
            "[...document.querySelectorAll('.js-plotly-plot')].filter(p => p.getBoundingClientRect().width > 0)"
            ".flatMap(p => p.data.filter(t => t.type === 'heatmap').map(t => JSON.stringify(t.colorscale)))"
        )
        assert not any("Blues" in scale or "rgb(8,48,107)" in scale for scale in scales), (tab, scales)
        assert page.evaluate(VIEW_PROBLEMS, True) == [], tab


# The beam tree's box: the steps said to be in view, and whether the current step's and the last column lie in it.
TREE_BOX = f"""() => {{
  const scroller = {PLAYER}.querySelector('.tree-scroller');
  const box = scroller.getBoundingClientRect();
  const inside = (r) => r.left >= box.left - 1 && r.right <= box.right + 1;
  const steps = [...{PLAYER}.querySelectorAll('.tree .tree-step')];
  const tracks = [...{PLAYER}.querySelectorAll('.tree .eos-track')].map(t => t.getBoundingClientRect().height);
  return {{inView: {PLAYER}.querySelector('.tree-in-view').textContent,
           nowInView: inside({PLAYER}.querySelector('.tree .tree-now').getBoundingClientRect()),
           lastInView: inside(steps.at(-1).getBoundingClientRect()), track: Math.min(...tracks)}};
}}"""


def test_the_beam_tree_on_a_projector_is_readable_scrolls_and_opens_a_branch_in_view(server, browser):
    """At 1024x768 in presentation mode the tree's text was 15 px, its last column cut with no scrollbar in view,
    P(</s>) hairlines without a scale; a click on a hypothesis left the visitor at the bottom, the tree gone."""
    page = browser.new_page(viewport={"width": 1024, "height": 768})
    page.goto(f"{server}/?strategy=beam&beam_width=4&presentation=1&step=9")
    wait_for_step_view(page, 9)
    wait_idle(page)
    page.locator(".tree").first.wait_for(state="attached")
    tree = page.evaluate(TREE_BOX)
    shown = re.fullmatch(r"steps (\d+)–(\d+) of (\d+) in view", tree["inView"])
    assert shown and int(shown[1]) <= 9 <= int(shown[2]) < int(shown[3])  # wider than the page, and it says so
    assert tree["nowInView"] and not tree["lastInView"] and tree["track"] >= 30  # P(</s>) read off a track
    later = page.locator(".tree-nav").get_by_role("button", name="later steps")
    while later.is_enabled():
        later.click()
    tree = page.evaluate(TREE_BOX)
    assert tree["lastInView"] and tree["inView"].endswith(f"–{shown[3]} of {shown[3]} in view")
    page.evaluate(f"{PLAYER}.querySelector('.tree-scroller').scrollIntoView()")
    page.wait_for_timeout(300)
    page.screenshot(path=ARTIFACTS / "presentation-1024x768-beam-tree.png")
    assert page.evaluate(SMALL_TEXT) == []
    assert page.evaluate(VIEW_PROBLEMS, True) == []
    page.evaluate(f"{PLAYER}.querySelector('.tree .node.dropped').dispatchEvent(new MouseEvent('click'))")
    showing = page.get_by_text("what-if branch:").first
    showing.wait_for(timeout=60_000)
    page.wait_for_function(f"{PLAYER} && !{PLAYER}.querySelector('.tree')")  # the branch's own step view
    page.wait_for_timeout(500)
    box = showing.bounding_box()
    assert box is not None and 0 <= box["y"] and box["y"] + box["height"] <= 768  # the branch and the way back


def test_the_beam_tree_of_a_short_output_fits_a_projector_without_scrolling(server, browser):
    """The tree of "I love you." (six steps, beam 4) scrolled sideways at 1024x768 in presentation mode: its boxes were
    made for ten characters whatever the labels (tried as a new user would)."""
    page = browser.new_page(viewport={"width": 1024, "height": 768})
    page.goto(f"{server}/?strategy=beam&beam_width=4&presentation=1&text=I+love+you.")
    wait_for_step_view(page, 1)
    wait_idle(page)
    page.locator(".tree").first.wait_for(state="attached")
    fit = page.evaluate(
        f"() => {{ const s = {PLAYER}.querySelector('.tree-scroller'); return [s.scrollWidth, s.clientWidth]; }}"
    )
    assert fit[0] <= fit[1], f"the tree is {fit[0]} px wide in a {fit[1]} px box: it scrolls"
    tree = page.evaluate(TREE_BOX)
    assert tree["lastInView"] and tree["nowInView"]
    assert page.evaluate(SMALL_TEXT) == []


def test_stepping_and_playing_ask_nothing_of_the_server_and_actions_carry_the_step(server, browser):
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    sent = count_frames_sent(page)
    page.goto(server)
    wait_for_step_view(page, 1)
    wait_idle(page)
    _, steps = step_view_position(page)
    assert steps > 10, "the default sentence is too short to step ten times"
    page.wait_for_timeout(500)
    before = len(sent)
    page.get_by_label("Sentence").press("ArrowRight")  # in a text box the keys move the caret, not the step
    page.wait_for_timeout(300)
    assert step_view_position(page)[0] == 1
    page.get_by_role("heading", name="Decode explorer").click()  # the focus out of the text box, off the step view
    page.keyboard.press("ArrowRight")  # no click in the step view first (it took one): the keys step the view
    wait_for_step_view(page, 2)
    page.keyboard.press("ArrowLeft")
    wait_for_step_view(page, 1)
    lens, words_made = page.locator(".lens"), []
    for step in range(2, 12):
        page.get_by_role("button", name="Next").click()
        wait_for_step_view(page, step)
        assert lens.locator(".map-title").text_content() == f"what each decoder layer would predict at step {step}"
        assert lens.locator(".strip .cell.now").count() == lens.locator(".lens-layer").count() > 1  # its column
        words_made += page.locator(".bar-label .word-made").all_text_contents()
    assert words_made and all(made.startswith(" → ") for made in words_made)  # a piece's word beside it
    assert page.locator(".bar-track").first.bounding_box()["width"] > 150  # bars beside the labels, not squeezed
    assert "step=11" in page.url  # the address bar names the step, for a copied link
    lens.locator(".strip .cell").nth(2).click()  # the lens strip's third column opens step 3
    wait_for_step_view(page, 3)
    assert lens.locator(".lens-plain").text_content().startswith("What each layer would write at this step")
    assert not lens.locator(".lens-note").is_visible()  # nats, KL and papers for researchers: one click away
    lens.get_by_role("button", name="the tuned lens").click()  # read with the lens fitted to the default
    assert "lens=tuned" in page.url  # a copied link opens the same lens
    linked = browser.new_page(viewport={"width": 1500, "height": 1100})
    linked.goto(page.url)
    wait_for_step_view(linked, 3)
    assert linked.locator(".lens").get_by_role("button", name="the tuned lens").get_attribute("aria-pressed") == "true"
    linked.close()
    lens.get_by_text("How the lens reads a layer").click()
    assert lens.locator(".lens-note").is_visible()
    assert "(the tuned lens, Belrose et al. 2023)" in lens.locator(".lens-note").text_content()
    page.get_by_role("button", name="Next").click()
    wait_for_step_view(page, 4)
    assert lens.locator(".lens-note").is_visible()  # still open at the next step
    assert lens.get_by_role("button", name="the tuned lens").get_attribute("aria-pressed") == "true"  # kept
    page.get_by_role("button", name="First").click()
    page.get_by_label("Steps a second when playing").select_option("10")
    page.get_by_role("button", name="Play").click()
    wait_for_step_view(page, steps, timeout=30_000)  # played to the end by itself
    page.get_by_role("button", name="Play").wait_for()  # and stopped there
    page.wait_for_timeout(500)
    assert sent[before:] == []  # not one websocket frame: every step was drawn in the browser

    page.get_by_role("button", name="First").click()
    page.get_by_label("Steps a second when playing").select_option("1")  # each step on screen for a second
    page.get_by_role("button", name="Play").click()
    page.get_by_text("Step 3 of").wait_for()
    page.get_by_role("button", name="Pause").click()
    held, _ = step_view_position(page)
    page.wait_for_timeout(1500)
    assert step_view_position(page)[0] == held  # Pause stops where it is

    page.get_by_role("button", name="First").click()
    page.get_by_role("button", name="Next").click()
    page.get_by_role("button", name="Next").click()  # step 3, known only to the browser until an action asks
    wait_for_step_view(page, 3)
    page.get_by_role("button", name="Continue from this token").click()
    page.get_by_text("what-if branch").wait_for(timeout=60_000)
    wait_idle(page)
    wait_for_step_view(page, 3)  # the branch opens at the step it was taken from
    page.get_by_role("button", name="Open Attention maps at this step").click()
    page.get_by_role("heading", name="Attention maps").wait_for(timeout=60_000)
    wait_for_heatmaps(page, 1)
    assert "step=3" in page.url
    assert page.locator('[data-testid="stException"]').count() == 0


def test_why_this_token_opens_cause_at_the_step_the_browser_shows(server, browser):
    """Issue 83, item 3: Cause one click from the step view, at the step stepped to in the browser alone, its token
    in the target's field."""
    page = browser.new_page(viewport={"width": 1024, "height": 768})
    page.goto(f"{server}/?{urlencode({'text': CLEAN, 'step': '16'})}&presentation=1")
    wait_for_step_view(page, 16)
    page.get_by_role("button", name="Next").click()  # step 17, "il": known only to the browser
    wait_for_step_view(page, 17)
    page.get_by_role("button", name="Why this token? Ask the Cause page").click()
    page.get_by_role("heading", name="Cause").wait_for(timeout=60_000)
    target = page.get_by_role("textbox", name="Target token")
    target.wait_for()
    assert target.input_value() == "il"
    assert page.locator('[data-testid="stException"]').count() == 0


def test_a_page_chosen_from_the_menu_in_presentation_mode_folds_the_sidebar_and_its_more_link_reads(server, browser):
    """Tried as a new user would (issue 83, item 3): in presentation mode the menu's "View 4 more" was 14 px, and
    the sidebar stayed open after a page was chosen from it, the page 724 px wide."""
    page = browser.new_page(viewport={"width": 1024, "height": 768})
    page.goto(f"{server}/?presentation=1")
    wait_for_step_view(page)
    wait_idle(page)
    page.locator('[data-testid="stExpandSidebarButton"]').click()
    page.wait_for_function("document.querySelector('[data-testid=stSidebar]').dataset.collapsed === 'false'")
    more = page.locator('[data-testid="stSidebarNavViewButton"]')
    assert float(more.evaluate("e => parseFloat(getComputedStyle(e).fontSize)")) >= 18
    page.get_by_role("link", name="Masks").click()
    page.get_by_role("heading", name="Masks").wait_for(timeout=60_000)
    page.wait_for_function("document.querySelector('[data-testid=stSidebar]').dataset.collapsed === 'true'")
    assert page.locator('[data-testid="stException"]').count() == 0


@pytest.mark.parametrize("path", ["", "attention"], ids=["explorer", "attention"])
def test_translate_in_presentation_mode_closes_the_sidebar_again(server, browser, path):
    """The sidebar, opened to type a sentence, stayed open after Translate, covering 30 % of a projector's width."""
    page = browser.new_page(viewport={"width": 1024, "height": 768})
    page.goto(f"{server}/{path}?presentation=1")
    sidebar = page.locator('[data-testid="stSidebar"]')
    # The first run sets the sidebar collapsed: a click before it ends (a loaded machine) is undone by it.
    sidebar.get_by_label(re.compile("Sentence")).wait_for(state="attached", timeout=60_000)
    wait_idle(page)
    page.locator('[data-testid="stExpandSidebarButton"]').click()
    page.wait_for_function("document.querySelector('[data-testid=stSidebar]').dataset.collapsed === 'false'")
    sidebar.get_by_label(re.compile("Sentence")).fill("Two dogs play in the park.")
    sidebar.get_by_role("button", name="Translate").click()
    page.get_by_text("Two dogs play in the park.").first.wait_for(timeout=60_000)
    page.wait_for_function("document.querySelector('[data-testid=stSidebar]').dataset.collapsed === 'true'")
    page.wait_for_timeout(1000)
    assert sidebar.get_attribute("data-collapsed") == "true"  # and it stays closed
    assert page.locator('[data-testid="stException"]').count() == 0


def test_every_page_loads_nothing_from_outside_the_app(server, browser):
    from urllib.parse import urlparse

    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    outside = []
    page.on(
        "request",
        lambda request: (
            outside.append(request.url)
            if urlparse(request.url).netloc != urlparse(server).netloc
            and not request.url.startswith(("data:", f"blob:{server}"))
            else None
        ),
    )
    page.goto(server)
    wait_for_step_view(page)
    for link in page.locator('[data-testid="stSidebarNavLink"]').all():
        link.click()
        wait_idle(page)
    page.wait_for_timeout(500)
    assert outside == []  # a classroom without internet: no stalled request, no missing icon


def test_a_link_opens_the_same_view_in_a_fresh_browser(server, browser):
    first = browser.new_context(viewport={"width": 1500, "height": 1100})
    page = first.new_page()
    page.goto(
        f"{server}/attention?text=Two%20dogs%20play%20in%20the%20snow.&strategy=beam&beam_width=3&view=model"
        "&words=1&kind=cross&presentation=1"
    )
    wait_for_heatmaps(page, 24)
    wait_idle(page)
    link = page.url
    assert "strategy=beam" in link and "view=model" in link and "presentation=1" in link
    drawn = page.locator(".js-plotly-plot .heatmaplayer image").count()
    labels = page.locator(".js-plotly-plot .xtick text").all_text_contents()
    second = browser.new_context(viewport={"width": 1500, "height": 1100})  # no cookie, no session: only the link
    other = second.new_page()
    other.goto(link)
    wait_for_heatmaps(other, drawn)
    wait_idle(other)
    assert other.locator(".js-plotly-plot .heatmaplayer image").count() == drawn
    assert other.locator(".js-plotly-plot .xtick text").all_text_contents() == labels
    first.close()
    second.close()


@pytest.mark.parametrize("size", [(1440, 900), (1024, 768)], ids=["1440", "1024"])
def test_a_newcomer_sees_how_to_translate_without_scrolling(server, browser, size):
    """Translate sat below the fold at 1440x900 (a sliver at y 890) and out of view at 1024x768."""
    page = browser.new_page(viewport={"width": size[0], "height": size[1]})
    page.goto(server)
    wait_for_step_view(page)
    wait_idle(page)
    label = page.locator('[data-testid="stSidebar"] [data-testid="stWidgetLabel"]', has_text="Sentence")
    assert "Ctrl+Enter translates" in label.text_content() and label.bounding_box()["y"] < size[1]
    if size[0] >= 1440:
        assert page.get_by_role("button", name="Translate").bounding_box()["y"] + 40 < size[1]  # the whole button
    box = page.get_by_label("Sentence")
    box.fill("Two dogs are playing in the snow.")
    box.press("Control+Enter")  # as the label says
    page.get_by_text("Deux chiens jouent dans la neige").first.wait_for()
    page.close()


def test_a_fresh_servers_first_visitor_by_a_page_link_gets_the_apps_menu(browser):
    with app_server(ARTIFACTS / "first-visit.log") as fresh:  # nobody has opened the app's root page yet
        page = browser.new_page()
        failed = []
        page.on("response", lambda response: failed.append(response.url) if response.status >= 400 else None)
        page.goto(f"{fresh.url}/attention?text=Two%20dogs.")
        wait_for_heatmaps(page, 1)
        wait_idle(page)
        assert failed == []  # the page names the app's root: no /attention/_stcore/health asked first, answered 404
        links = page.locator('[data-testid="stSidebarNavLink"]').all_text_contents()
        assert links[:2] == ["Decode explorer", "Attention maps"]  # not the pages/ folder's file names
        assert page.locator("h1").all_text_contents() == ["Attention maps"]
        page.close()


def test_the_step_chosen_in_the_browser_follows_the_visitor_to_every_page(server, browser):
    page = browser.new_page(viewport={"width": 1440, "height": 900})
    page.goto(server)
    wait_for_step_view(page, 1)
    wait_idle(page)
    page.get_by_role("button", name="Next").click()
    wait_for_step_view(page, 2)
    page.keyboard.press("ArrowRight")  # the keys step on after a click on Next (the button has the focus)
    page.keyboard.press("ArrowRight")
    wait_for_step_view(page, 4)

    sidebar = page.locator('[data-testid="stSidebarNavLink"]')
    sidebar.filter(has_text="Attribution").click()
    page.get_by_role("heading", name="Step 4:").wait_for(timeout=120_000)  # not step 1
    sidebar.filter(has_text="Attention maps").click()
    page.wait_for_url(re.compile(r"/attention\?.*\bstep=4\b"), timeout=120_000)  # rows up to step 4, not all
    sidebar.filter(has_text="Decode explorer").click()
    page.wait_for_url(re.compile(r"/\?.*\bstep=4\b"), timeout=120_000)
    wait_for_step_view(page, 4)
    wait_idle(page)
    assert step_view_position(page)[0] == 4
    page.keyboard.press("ArrowLeft")  # no focus in the view: the keys step the view on screen all the same
    wait_for_step_view(page, 3)
    page.get_by_role("button", name="Previous").click()
    wait_for_step_view(page, 2)
    sidebar.filter(has_text="Positional encoding").click()  # a page that has no step keeps it for the next
    page.get_by_role("heading", name="Positional encoding").wait_for()
    sidebar.filter(has_text="Decode explorer").click()
    wait_for_step_view(page, 2)
    assert page.locator('[data-testid="stException"]').count() == 0


LONG_SENTENCE = ("The old man who lives in the house at the end of the street walks his dogs along the "
                 "river every morning before the shops open and children go to school.")  # fmt: skip
MAPS_CUT_OFF = f"""() => [...{PLAYER}.querySelectorAll('.map')].filter(box => {{
  box.scrollLeft = box.scrollWidth;  // as far right as the visitor can scroll it (nothing, unless it scrolls)
  const last = [...box.querySelectorAll('.key-label')].at(-1).getBoundingClientRect();
  return last.right > box.getBoundingClientRect().right + 1 || last.width === 0;
}}).map(box => box.querySelector('.map-title').textContent)"""


@pytest.mark.parametrize("size,presentation", [((1440, 900), False), ((1024, 768), True)], ids=["1440", "projector"])
def test_a_long_sentences_maps_fit_or_scroll_never_cut(server, browser, size, presentation):
    assert len(LONG_SENTENCE.split()) == 31
    page = browser.new_page(viewport={"width": size[0], "height": size[1]})
    page.goto(f"{server}/?text={LONG_SENTENCE}{'&presentation=1' if presentation else ''}")
    wait_for_step_view(page)
    wait_idle(page)
    page.screenshot(path=ARTIFACTS / f"long-sentence-{size[0]}.png", full_page=True)
    assert page.evaluate(MAPS_CUT_OFF) == []  # every source token within reach
    steps = step_view_position(page)[1]
    page.get_by_role("button", name="Last").click()
    wait_for_step_view(page, steps)
    now_in_strip = f"""(() => {{
      const box = {PLAYER}.querySelector('.strip').closest('.map').getBoundingClientRect();
      const now = {PLAYER}.querySelector('.strip .cell.now').getBoundingClientRect();
      return now.left >= box.left - 1 && now.right <= box.right + 1;
    }})()"""
    assert page.evaluate(now_in_strip)  # the lens strip shows the step on screen, though wider than its box


TREE_LAYOUT = f"""() => {{
  const nodes = [...{PLAYER}.querySelectorAll('.tree .node')];
  const boxes = nodes.map((node) => node.querySelector('rect').getBoundingClientRect());
  const overlapping = boxes.filter((a, i) => boxes.some((b, j) => j < i && a.left < b.right && b.left < a.right
    && a.top < b.bottom && b.top < a.bottom)).length;
  const overflowing = nodes.filter((node) => node.querySelector('text').getBBox().width + 5
    > node.querySelector('rect').getBBox().width).map((node) => node.textContent);
  return {{drawn: nodes.length, overlapping, overflowing}};
}}"""


@pytest.mark.parametrize("width", [2, 8])
def test_the_beam_tree_stays_readable_and_a_hypothesis_opens_as_a_branch(server, browser, width):
    from urllib.parse import quote

    long = (
        "A man in a red shirt and a woman in a blue dress are riding their bicycles down the busy street "
        "while two small dogs run beside them."
    )
    page = browser.new_page(viewport={"width": 1500, "height": 1100})
    page.goto(f"{server}/?text={quote(long)}&strategy=beam&beam_width={width}")
    wait_for_step_view(page)
    wait_idle(page)
    tree = page.locator(".tree")
    tree.wait_for()
    show_dropped = page.get_by_label(re.compile(r"show the \d+ dropped hypotheses"))
    dropped = int(re.search(r"\d+", show_dropped.locator("xpath=..").text_content()).group())
    steps = int(tree.locator(".tree-step").last.text_content())
    layout = page.evaluate(TREE_LAYOUT)
    assert layout["drawn"] > 2 * steps and layout["overlapping"] == 0 and layout["overflowing"] == []
    if width == 8:  # a 40-step search of width 8: its dropped hypotheses start folded away
        assert steps >= 30 and not show_dropped.is_checked()
        folded = layout["drawn"]
        show_dropped.check()
        assert page.evaluate(TREE_LAYOUT)["drawn"] == folded + dropped
    else:
        assert show_dropped.is_checked()
    page.get_by_role("button", name="Next").click()
    column = f"""() => {{
      const now = {PLAYER}.querySelector('.tree .tree-now').getBBox();
      return [...{PLAYER}.querySelectorAll('.tree .tree-step')]
        .filter((t) => t.getBBox().x > now.x && t.getBBox().x < now.x + now.width).map((t) => t.textContent);
    }}"""
    page.wait_for_function(f"({column})().join() === '2'")  # the highlighted column follows the step
    tree.locator(".node.dropped").first.click()
    page.get_by_text("what-if branch:").first.wait_for(timeout=60_000)
    assert page.locator('[data-testid="stException"]').count() == 0


# The How it learned view (ui/players/epoch_player.js) in its shadow root: the caption's epoch, the map's title.
EPOCH_CAPTION = f"{PLAYER}?.querySelector('.epochs .caption b')?.textContent"
EPOCH_MAP = f"{PLAYER}?.querySelector('.epoch-map .map-title')?.textContent"
SNAPSHOTS = load_timeline(timeline_path(DEFAULT_CHECKPOINT)).snapshots  # the shipped timeline's, in order
# The height from the player's controls to the bottom of its map, and the screen's below the app's header.
CONTROLS_TO_MAP = f"""() => {{
  const top = {PLAYER}.querySelector('.controls').getBoundingClientRect().top;
  const header = document.querySelector('[data-testid="stHeader"]').getBoundingClientRect().bottom;
  return [{PLAYER}.querySelector('.epoch-map').getBoundingClientRect().bottom - top, innerHeight - header];
}}"""


@pytest.mark.parametrize(
    ("size", "presentation"), [((1440, 900), False), ((1024, 768), True)], ids=["1440x900", "presentation-1024x768"]
)
def test_how_it_learned_steps_and_plays_epochs_in_the_browser(server, browser, size, presentation):
    page = browser.new_page(viewport={"width": size[0], "height": size[1]})
    sent = count_frames_sent(page)
    page.goto(f"{server}/learned?epoch=1&layer=3&head=2" + ("&presentation=1" if presentation else ""))
    page.wait_for_function(f"{EPOCH_CAPTION} === 'epoch 1'")
    wait_idle(page)
    assert page.evaluate(EPOCH_MAP).startswith("epoch 1 · encoder-decoder attention, layer 3, head 2")
    if presentation:  # the controls and the map they step on one projector screen (the map was 130 px below it)
        player_height, screen_height = page.evaluate(CONTROLS_TO_MAP)
        assert player_height <= screen_height
    # Opened, the map starts on screen with Play above it (at 768 px it started below the fold, tried as a new user
    # would: the intro and the two sentence boxes one under the other pushed it down)
    assert page.evaluate(f"{PLAYER}.querySelector('.epoch-map').getBoundingClientRect().top < innerHeight - 20")
    page.wait_for_timeout(500)
    before = len(sent)
    page.get_by_role("button", name="Next ›").click()
    page.wait_for_function(f"{EPOCH_CAPTION} === '{SNAPSHOTS[2].label}'")  # the run's next snapshot
    page.get_by_role("heading", name="How it learned").click()
    page.keyboard.press("ArrowLeft")  # the arrow keys step the epochs on screen
    page.wait_for_function(f"{EPOCH_CAPTION} === 'epoch 1'")
    page.locator(".view-choice select").nth(2).select_option("all")
    assert page.locator(".small-maps > .map").count() == 8  # every head of the layer
    page.get_by_role("button", name="« First").click()
    page.wait_for_function(f"{EPOCH_CAPTION} === 'before training'")
    page.locator(".epochs .rate").select_option("2")
    page.get_by_role("button", name="▶ Play").click()  # Play runs to the last epoch and stops there
    page.wait_for_function(
        f"{EPOCH_CAPTION} === '{SNAPSHOTS[-1].label}' && "
        f"{PLAYER}.querySelector('.controls button:nth-child(5)').textContent.includes('Play')"
    )
    assert len(sent) == before  # stepping, choosing a head and playing asked nothing of the server
    assert f"epoch={SNAPSHOTS[-1].epoch}" in page.url and "head=all" in page.url and "layer=3" in page.url
    assert page.locator(".head-table .settled").count() == 8  # by the last epoch every head has settled
    page.screenshot(path=ARTIFACTS / f"learned-{size[0]}x{size[1]}.png")
    assert page.evaluate(VIEW_PROBLEMS, presentation) == []
    fresh = browser.new_page(viewport={"width": size[0], "height": size[1]})
    fresh.goto(page.url)  # the copied link opens the same view
    fresh.wait_for_function(f"{EPOCH_CAPTION} === '{SNAPSHOTS[-1].label}'")
    assert fresh.locator(".small-maps > .map").count() == 8
    fresh.get_by_role("combobox", name="Probe sentence").click()  # another probe:
    fresh.get_by_role("option", name="I love you.").click()  # the same epoch and heads, its maps
    fresh.wait_for_function(
        f"{PLAYER}?.querySelector('.outputs p:nth-child(2) .output-text')?.textContent === \"Je t'aime.\""
    )
    assert fresh.evaluate(EPOCH_CAPTION) == SNAPSHOTS[-1].label and fresh.locator(".small-maps > .map").count() == 8
