"""Attention maps: one head, a layer's heads, the whole model, the mean over heads, or the encoder's rollout and flow."""

import numpy as np
import streamlit as st

from transformer.analysis.rollout import FlowTooLong, attention_flow, rollout
from transformer.analysis.views import attention_view, content_only
from transformer.io.export import attention_csv, to_npz
from transformer.model.kinds import AttentionKind
from transformer.viz.attention import attention_grid, attention_heatmap, fit_colour_scale, heads_or_means
from transformer.viz.report import REPORT_FIGURES
from ui.services import models
from ui.state import keys, url
from ui.widgets.charts import show
from ui.widgets.controls import content_toggle, kind_layer_head, words_toggle
from ui.widgets.controls import step as controls_step
from ui.widgets.progress import ProgressBar
from ui.widgets.sidebar import page_frame

VIEWS = keys.ATTENTION_VIEWS

explored = page_frame("Attention maps")
result = explored.result
session = st.session_state

controls = st.columns([3, 4, 1, 1])
kind, layer, head = kind_layer_head(result, [controls[0], controls[2], controls[3]])
views = [v for v in VIEWS if v not in ("rollout", "flow") or kind is AttentionKind.ENCODER]
if session.get("view") not in views:
    session.view = "head"
view_name = controls[1].radio("View", views, format_func=VIEWS.get, horizontal=True, **keys.shared("view"))
step = None
if not kind.queries_from_source:
    chosen = controls_step(result, "Rows up to decoding step", last_until_stepped=True)
    step = chosen if session.get("stepped") else None  # opened directly: every row, not the first step's one
toggles = st.columns(2)  # each label whole beside the other, at every width
words = words_toggle(toggles[0])
# a row of its own: a third beside them cut a label at 1024 pixels
content = content_toggle(st.columns(2)[0], note=" Rollout and flow keep every token.")

view = attention_view(result, kind, step, words)
kind_title = kind.title
if content and view_name not in ("rollout", "flow"):
    view = content_only(view)
    kind_title = f"{kind.title}, content only (</s>, <s> and punctuation dropped, rows renormalised)"
layers = view.maps.shape[0]
title = f"{kind_title}, layer {layer + 1}"
layer_names = [f"layer {i + 1}" for i in range(layers)]
map_for_export, exported = view.maps[layer, head], f"layer {layer + 1}, head {head + 1}"

if view_name == "head":
    figure = attention_heatmap(
        view.maps[layer, head], view.query_pieces, view.key_pieces, f"{title}, head {head + 1}", view.mask
    )
elif view_name == "mean":
    figure = attention_grid(
        view.mean_over_heads()[:, None],
        view.query_pieces,
        view.key_pieces,
        layer_names,
        ["mean over heads"],
        kind_title,
        view.mask,
    )
    map_for_export, exported = view.mean_over_heads()[layer], f"layer {layer + 1}, mean over heads"
elif view_name in ("layer", "model"):
    maps, rows, name = (
        (view.maps[layer][None], [""], title) if view_name == "layer" else (view.maps, layer_names, kind_title)
    )
    figure, fell_back = heads_or_means(maps, view.query_pieces, view.key_pieces, rows, name, view.mask)
    if fell_back:
        st.info(
            f"This input gives {view.maps[0, 0].size:,} cells per map, too many to draw every head at once without "
            "slowing the page; showing the mean over heads instead. Pick one head to see it alone."
        )
        map_for_export, exported = view.mean_over_heads()[layer], f"layer {layer + 1}, mean over heads"
else:
    try:
        flows = attention_flow(view.maps) if view_name == "flow" else None
    except FlowTooLong as error:
        st.info(f"Showing rollout: {error}.")
        flows = None
    if flows is None:
        flows, name = rollout(view.maps), "rollout"
        title = "attention rollout over the encoder layers"
    else:
        name, title = "flow", "attention flow over the encoder layers (maximum flow, residual mixed in as rollout)"
    figure = attention_heatmap(flows, view.query_pieces, view.key_pieces, title)
    map_for_export, exported = flows, name
fitted = toggles[1].toggle(
    "Fit the colours to these weights",
    **keys.shared("attention_fit"),
    help="Near-uniform attention is one pale colour on the 0-1 scale; fitted, its differences show.",
)
if fitted:
    low, high = fit_colour_scale(figure)
    scale = f"Colour: weight from {low:.4f} (white) to {high:.4f} (dark blue), fitted to the weights drawn: read it off the bar"
else:
    scale = "Colour: weight from 0 (white) to 1 (dark blue), one scale for every map"
show(figure, key="attention_chart")
st.caption(f"{scale}. Grey: masked, the model could not look there.")

downloads = st.columns([3, 2, 2])  # the first names the map it exports: room for its label
several = view_name in ("layer", "model", "mean")  # several maps drawn: the button names the one it exports
downloads[0].download_button(
    f"CSV of {exported}" if several else "This map as CSV",
    attention_csv(np.asarray(map_for_export), view.query_pieces, view.key_pieces),
    file_name=f"attention-{kind}-{exported.replace(', ', '-').replace(' ', '')}.csv",
    mime="text/csv",
    on_click="ignore",
    key="csv_download",
)
downloads[1].download_button(
    "Every map as .npz",
    lambda: to_npz(result, explored.checkpoint.tokenizer),
    file_name="attention.npz",
    mime="application/octet-stream",
    on_click="ignore",
    key="npz_download",
)
report = (explored.identity, explored.text, explored.checkpoint_name, words)
if session.get("report_built") != report and downloads[2].button("Build the HTML report", key="report_build"):
    progress = ProgressBar("Building the report", REPORT_FIGURES, "figures")
    models.report_cached(explored.checkpoint, *report, _result=result, _progress=progress)
    progress.close()
    session.report_built = report
if session.get("report_built") == report:  # built: the download takes it from the shared cache (or builds it again)
    downloads[2].download_button(
        "HTML report (offline)",
        lambda: models.report_cached(explored.checkpoint, *report, _result=result),
        file_name="attention-report.html",
        mime="text/html",
        on_click="ignore",
        key="report_download",
    )
url.write_url()
