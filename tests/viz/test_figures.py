import json
import re

import numpy as np
import pytest

from transformer.decoding.greedy import decode_with_chooser
from transformer.io.export import attention_csv
from transformer.viz.attention import attention_grid, attention_heatmap, fit_colour_scale, step_attention
from transformer.viz.report import html_report
from transformer.viz.style import axis_labels


def test_repeated_tokens_keep_their_own_cells_and_html_is_escaped():
    labels = axis_labels(["▁a", "<script>", "▁a"])
    assert len(set(labels)) == 3
    assert labels[1] == "&lt;script&gt;"
    assert labels[0].strip("\u200b") == labels[2].strip("\u200b")
    # Plotly shows &quot; as typed: quotes stay quotes, only its tags are made inert (and & itself)
    assert axis_labels(['▁"', "'", "&"]) == ['"', "'", "&amp;"]


def test_pieces_read_as_words_with_the_rest_of_a_word_marked():
    pieces = ["<s>", "▁Deux", "▁chiens", "▁jou", "ent", "▁dans", "▁la", "▁neige", ".", "▁", "</s>"]
    assert axis_labels(pieces) == [
        "&lt;s&gt;",
        "Deux",
        "chiens",
        "jou",
        "·ent",
        "dans",
        "la",
        "neige",
        ".",
        "␣",
        "&lt;/s&gt;",
    ]
    assert axis_labels(["▁en → ▁robe", "▁jou → ent", "any query"]) == ["en → robe", "jou → ·ent", "any query"]
    assert axis_labels(["▁.", "."]) == [".", ".\u200b"]  # the same reading, still two cells


def test_every_token_keeps_its_label_however_many():
    pieces = [f"▁w{i}" for i in range(120)]
    figure = attention_heatmap(np.full((120, 120), 1 / 120), pieces, pieces).to_plotly_json()["layout"]
    for axis in (figure["xaxis"], figure["yaxis"]):
        assert (axis["tickmode"], axis["dtick"]) == ("linear", 1)  # Plotly would thin them otherwise
        assert 7 <= axis["tickfont"]["size"] < 12  # smaller, to keep them apart
    few = attention_heatmap(np.eye(3), pieces[:3], pieces[:3]).to_plotly_json()["layout"]
    assert few["xaxis"]["dtick"] == 1 and "tickfont" not in few["xaxis"]


def test_heatmap_draws_the_weights_and_greys_masked_cells():
    weights = np.array([[1.0, 0.0], [0.3, 0.7]], dtype=np.float32)
    mask = np.triu(np.ones((2, 2), dtype=bool), 1)
    fig = attention_heatmap(weights, ["<s>", "▁Un"], ["<s>", "▁Un"], "t", mask=mask)
    z = np.asarray(fig.data[0].z, dtype=float)
    assert np.isnan(z[0, 1]) and z[1, 1] == np.float32(0.7) and z[0, 0] == 1.0
    assert fig.layout.coloraxis.cmin == 0 and fig.layout.coloraxis.cmax == 1
    assert fig.layout.plot_bgcolor not in (None, "white")  # masked cells differ from zero weight (white)
    assert json.loads(fig.to_json())  # serialisable for the browser


def test_grid_has_one_trace_per_map_sharing_one_colour_scale():
    maps = np.random.default_rng(0).random((2, 3, 4, 5))
    fig = attention_grid(maps, list("abcd"), list("vwxyz"), ["L1", "L2"], ["H1", "H2", "H3"])
    assert len(fig.data) == 6
    assert {trace.coloraxis for trace in fig.data} == {"coloraxis"}
    assert np.allclose(np.asarray(fig.data[4].z), maps[1, 1])


def test_step_attention_has_a_row_per_head_and_a_mean_per_layer():
    rows = np.random.default_rng(1).random((2, 3, 4))
    fig = step_attention(rows, list("abcd"))
    z = np.asarray(fig.data[0].z)
    assert z.shape == (8, 4)
    assert np.allclose(z[3], rows[0].mean(0)) and np.allclose(z[4], rows[1, 0])
    assert fig.data[0].y[3] == "layer 1 · mean"


def test_csv_has_a_row_per_query_and_a_column_per_key():
    csv = attention_csv(np.array([[0.25, 0.75]]), ["▁a"], ["▁b", ","])
    assert csv.splitlines() == ['query,0:b,"1:,"', "0:a,0.25,0.75"]  # tokens as the figures show them


def test_report_is_self_contained_and_escapes_user_text(model, tokenizer):
    text = "<script>alert(1)</script> the dog"
    result = decode_with_chooser(model, tokenizer, text)
    page = html_report(result, text, "tiny <b>")
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page
    assert "tiny &lt;b&gt;" in page
    assert 'src="http' not in page and "cdn" not in page.lower()[:2000]
    assert page.count('<div class="figure"') == 5  # output probabilities, three kinds, rollout
    specs = re.findall(r'<script type="application/json">(.*?)</script>', page, re.S)
    figures = [json.loads(spec) for spec in specs]  # each figure whole, drawn when it nears the screen
    assert len(figures) == 5 and all(figure["data"] for figure in figures)
    assert all("<" not in spec for spec in specs)  # escaped: no text inside a figure can end its element


def test_the_reports_plotly_js_is_the_cartesian_bundle_of_the_packages_version_and_draws_its_traces(model, tokenizer):
    from plotly.offline import get_plotlyjs

    from transformer.viz.report import plotly_js, report_figures

    bundle, full = plotly_js(), get_plotlyjs()
    version = re.compile(r"plotly\.js (?:\(cartesian - minified\) )?v(\d+\.\d+\.\d+)")
    assert "(cartesian - minified)" in bundle[:200]
    assert version.search(bundle[:200]).group(1) == version.search(full[:200]).group(1)  # the JSON's own plotly.js
    drawn = set(re.findall(r'moduleType:"trace",name:"(\w+)"', bundle))
    used = {
        trace.type
        for _, figure in report_figures(decode_with_chooser(model, tokenizer, "the dog"))
        for trace in figure.data
    }
    assert used and used <= drawn
    assert len(bundle) < len(full) / 3
    assert bundle in html_report(decode_with_chooser(model, tokenizer, "the dog"), "the dog", "tiny")


def test_legends_sit_above_the_plot_clear_of_the_axis_titles():
    from transformer.viz.charts import curves, grouped_bars, lines

    for fig in (
        curves(np.zeros((5, 4)), [0, 1], "sinusoids"),
        grouped_bars(["a", "b"], {"x": [1, 2], "y": [2, 1]}, "t", "y"),
        lines({"a": ([1, 2], [3, 4]), "b": ([1, 2], [4, 3])}, "t", "x", "y"),
    ):
        legend = fig.layout.legend
        assert legend.orientation == "h" and legend.y >= 1 and legend.yanchor == "bottom"


def test_a_mask_says_what_its_two_colours_mean():
    from transformer.viz.matrices import mask_heatmap

    fig = mask_heatmap(np.tril(np.ones((3, 3), dtype=bool)), list("abc"), list("abc"), "look-ahead")
    heatmap, *legend = fig.data
    assert [trace.name for trace in legend] == ["may look", "masked (−∞ before the softmax)"]
    assert [trace.marker.color for trace in legend] == [heatmap.colorscale[1][1], heatmap.colorscale[0][1]]
    assert fig.layout.showlegend and fig.layout.legend.y >= 1


def test_grid_labels_sit_on_the_outer_edges_only():
    from transformer.viz.attention import attention_grid

    maps = np.full((2, 3, 4, 5), 0.2, dtype=np.float32)
    fig = attention_grid(maps, list("abcd"), list("vwxyz"), ["layer 1", "layer 2"], ["h1", "h2", "h3"])
    layout = fig.to_dict()["layout"]
    shown = {name: axis.get("showticklabels") for name, axis in layout.items() if name.startswith(("xaxis", "yaxis"))}
    assert [shown[f"yaxis{'' if i == 1 else i}"] for i in range(1, 7)] == [True, False, False, True, False, False]
    assert [shown[f"xaxis{'' if i == 1 else i}"] for i in range(1, 7)] == [False, False, False, True, True, True]


def test_maps_one_a_line_each_label_their_keys_in_a_gap_that_holds_them():
    """The mean over heads (a map a layer, one above the other) labelled its keys under the last layer only, and
    each map's title overprinted the labels of the map above."""
    from transformer.viz.attention import attention_grid

    keys = ["▁The", "▁black", "▁sleeping", "▁window", "</s>"]
    fig = attention_grid(np.full((3, 1, 4, 5), 0.2), list("abcd"), keys, ["layer 1", "layer 2", "layer 3"], ["mean"])
    layout = fig.to_dict()["layout"]
    assert [layout[f"xaxis{'' if i == 1 else i}"]["showticklabels"] for i in range(1, 4)] == [True, True, True]
    tops = sorted((layout[f"yaxis{'' if i == 1 else i}"]["domain"] for i in range(1, 4)), reverse=True)
    plot_height = layout["height"] - 70
    gaps = [(upper[0] - lower[1]) * plot_height for upper, lower in zip(tops, tops[1:])]
    assert all(gap >= 50 + 6 * len("▁sleeping") - 1 for gap in gaps)  # the rotated labels and the next title


def test_a_fitted_colour_scale_spans_the_weights_drawn_and_says_so():
    from helpers import REPO, start, translate
    from streamlit.testing.v1 import AppTest

    near_uniform = np.full((3, 4), 0.25) + np.array([0.01, -0.01, 0.004, -0.004])
    fig = attention_heatmap(near_uniform, ["a", "b", "c"], ["w", "x", "y", "z"])
    assert (fig.layout.coloraxis.cmin, fig.layout.coloraxis.cmax) == (0.0, 1.0)  # the default: one fixed scale
    low, high = fit_colour_scale(fig)
    assert (low, high) == pytest.approx((0.24, 0.26)) and fig.layout.coloraxis.cmax == pytest.approx(0.26)
    masked = np.zeros((2, 2, 3, 4), dtype=bool)
    masked[..., 0] = True  # a masked cell (drawn as NaN, grey) does not stretch the scale
    grid = attention_grid(
        np.stack([[near_uniform, near_uniform * 2]] * 2),
        ["a", "b", "c"],
        ["w", "x", "y", "z"],
        ["l1", "l2"],
        ["h1", "h2"],
        mask=masked[0, 0],
    )
    assert fit_colour_scale(grid) == pytest.approx((0.24, 0.508))  # column 0 (0.26, 0.52) masked
    at = translate(start(), "Two dogs play.").switch_page("pages/attention.py").run()
    at.toggle(key="widget_attention_fit").set_value(True).run()
    assert not at.exception
    assert any("fitted to the weights drawn" in caption.value for caption in at.caption)
    assert at.query_params["fit"] == "1"  # the link keeps the fitted colours
    linked = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    linked.query_params.update(dict(at.query_params))
    linked = linked.switch_page("pages/attention.py").run()
    assert linked.toggle(key="widget_attention_fit").value is True
    assert any("fitted to the weights drawn" in caption.value for caption in linked.caption)


def test_a_gradient_that_lowered_the_output_stays_negative_beside_attention():
    from transformer.viz.attribution import measures_over_tokens

    measures = {"cross-attention": np.array([0.6, 0.4]), "gradient × input": np.array([3.0, -1.0])}
    attention, gradient = measures_over_tokens(measures, ["▁a", "▁b"], "t", signed=("gradient × input",)).data
    np.testing.assert_allclose(attention.z[0], [0.6, 0.4])
    np.testing.assert_allclose(gradient.z[1], [0.75, -0.25])  # a share of the row's |value|, with its sign
    assert np.isnan(attention.z[1]).all() and np.isnan(gradient.z[0]).all()
    assert gradient.zmid == 0 and gradient.zmin == -0.75 and attention.zmin == 0
    # two scales side by side above the map, apart (beside it, they took half a projector's width from the map)
    (left_start, left_end), (right_start, right_end) = (
        (bar.x, bar.x + bar.len) for bar in (attention.colorbar, gradient.colorbar)
    )
    assert 0 <= left_start < left_end < right_start < right_end <= 1
    assert all(bar.orientation == "h" and bar.y >= 1 for bar in (attention.colorbar, gradient.colorbar))


def test_a_grid_too_narrow_for_its_key_labels_wraps_its_heads_onto_more_lines():
    from transformer.viz.attention import GRID_WIDTH, KEY_LABEL_SLOT

    maps = np.random.default_rng(2).random((2, 8, 15, 15))
    pieces = [f"▁w{i}" for i in range(15)]
    fig = attention_grid(maps, pieces, pieces, ["layer 1", "layer 2"], [f"head {h + 1}" for h in range(8)])
    layout = fig.to_dict()["layout"]
    domains = {tuple(axis["domain"]) for name, axis in layout.items() if name.startswith("xaxis")}
    assert len(domains) == 4  # two lines of four heads a layer, not eight maps of 6 px a label
    assert all((high - low) * GRID_WIDTH / 15 >= 0.9 * KEY_LABEL_SLOT for low, high in domains)
    assert np.allclose(np.asarray(fig.data[13].z), maps[1, 5])  # traces still layer by layer, head by head
    assert fig.data[13].xaxis == "x14" and [a["text"] for a in layout["annotations"]][13] == "head 6"
    short = attention_grid(maps[:, :, :4, :4], pieces[:4], pieces[:4], ["l1", "l2"], [f"h{h}" for h in range(8)])
    assert len({tuple(a["domain"]) for n, a in short.to_dict()["layout"].items() if n.startswith("xaxis")}) == 8


def test_the_report_merges_pieces_into_words_when_the_page_did():
    """The report showed "didn | ' | ·t" while the view and its CSV merged them into "didn't"."""
    from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint

    shipped = load_checkpoint(DEFAULT_CHECKPOINT)
    text = "The animal didn't cross the street."
    result = decode_with_chooser(shipped.model, shipped.tokenizer, text)

    def axes(page: str) -> list[list[str]]:
        specs = re.findall(r'<script type="application/json">(.*?)</script>', page, re.S)
        return [list(trace.get("x") or []) for spec in specs for trace in json.loads(spec)["data"]]

    pieces, words = axes(html_report(result, text, "default")), axes(html_report(result, text, "default", words=True))
    assert any("didn" in labels and "·t" in labels for labels in pieces)
    merged = [labels for labels in words if "didn't" in labels]
    assert merged and not any("·t" in labels for labels in words)
    assert "Maps over words" in html_report(result, text, "default", words=True)


def test_the_reports_probabilities_are_by_word_when_its_maps_are():
    """Tried as a new user would: the report merged pieces into words in its maps, but not in its table of token
    probabilities and their bars."""
    import html

    from transformer.analysis.words import word_spans
    from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint
    from transformer.text.pieces import readable
    from transformer.viz.report import report_figures

    shipped = load_checkpoint(DEFAULT_CHECKPOINT)
    text = "The animal didn't cross the street because it was too tired."
    result = decode_with_chooser(shipped.model, shipped.tokenizer, text)
    spans = word_spans(result.tgt_pieces)
    start, end = next(span for span in spans if span[1] - span[0] > 1)  # a word of several pieces
    word = readable("".join(result.tgt_pieces[start:end]))
    probability = float(np.prod(result.token_probs.numpy()[start:end]))
    page = html_report(result, text, "default", words=True)
    assert f"<tr><td>{start + 1}–{end}</td><td>{html.escape(word)}</td><td>{probability:.3f}</td></tr>" in page
    assert page.count("<tr><td>") == len(spans) < len(result.tgt_pieces)
    bars = next(figure for title, figure in report_figures(result, words=True) if title == "Output")
    assert len(bars.data[0].x) == len(spans) and np.isclose(bars.data[0].y[spans.index((start, end))], probability)
    assert html_report(result, text, "default").count("<tr><td>") == len(result.tgt_pieces)  # pieces: as before


def test_blue_means_one_thing_in_the_attribution_figure_and_each_scale_says_what():
    """Blue was a positive share in the attention rows and "lowered the probability" in the gradient rows."""
    from plotly.colors import hex_to_rgb, unlabel_rgb

    from transformer.viz.attribution import measures_over_tokens

    measures = {"cross-attention": np.array([0.6, 0.4]), "gradient × input": np.array([3.0, -1.0])}
    attention, gradient = measures_over_tokens(measures, ["▁a", "▁b"], "t", signed=("gradient × input",)).data

    def bluish(colour: str) -> bool:
        red, green, blue = hex_to_rgb(colour) if colour.startswith("#") else unlabel_rgb(colour)
        return blue > red + 40 and blue > green

    assert not any(bluish(colour) for _, colour in attention.colorscale)
    assert any(bluish(colour) for _, colour in gradient.colorscale)  # blue: lowered, there only
    assert "blue lowered" in gradient.colorbar.title.text and "never negative" in attention.colorbar.title.text


def test_the_patching_report_holds_every_grid_of_the_run_offline_and_escapes_user_text():
    """Cause's offline report: the encoder's stream, its heads of every layer (the page shows one at a time), the
    decoder's heads and stream, each grid's numbers the run's, the sentences escaped."""
    from helpers import array

    from transformer.analysis.interventions.sites import Patching
    from transformer.viz.report import patching_report

    rng = np.random.default_rng(0)
    found = Patching(
        encoder_residual=rng.normal(size=(3, 4)),
        encoder_heads=rng.normal(size=(2, 4, 4)),
        cross_heads=rng.normal(size=(2, 4)),
        decoder_self_heads=rng.normal(size=(2, 4)),
        decoder_residual=rng.normal(size=3),
        metric_clean=1.0,
        metric_corrupt=-1.0,
        noising=False,
    )
    lines = {"Corrupted sentence": "<script>alert(1)</script> wide"}
    page = patching_report(found, ["the", "<b>", "is", "tired"], "default", lines, "Patching “tired” restores 90%.")
    assert "&lt;script&gt;alert(1)&lt;/script&gt; wide" in page and "<script>alert(1)" not in page
    assert "Patching “tired” restores 90%." in page and 'src="http' not in page
    specs = re.findall(r'<script type="application/json">(.*?)</script>', page, re.S)
    figures = [json.loads(spec) for spec in specs]
    grids = [found.encoder_residual, *found.encoder_heads, found.cross_heads, found.decoder_self_heads]
    assert len(figures) == len(grids) + 1  # and the decoder's stream
    for figure, grid in zip(figures, [*grids, found.decoder_residual[None]]):
        assert np.allclose(array(figure["data"][0]["z"]), grid, atol=1e-6)
    assert all("<" not in spec for spec in specs)  # no label inside a figure can end its element
    assert "Encoder heads, layer 2" in page and "Cross-attention heads at the step" in page
