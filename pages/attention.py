"""Attention maps: one head, a layer's heads, the whole model, the mean over heads, or the encoder's rollout and flow."""

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go
import streamlit as st
from streamlit.delta_generator import DeltaGenerator

from transformer.analysis.rollout import FlowTooLong, attention_flow, rollout
from transformer.analysis.views import AttentionView, attention_view, content_only
from transformer.io.export import attention_csv, to_npz
from transformer.model.heads import head_name, layer_name, layer_names
from transformer.model.kinds import AttentionKind
from transformer.viz.attention import attention_grid, attention_heatmap, fit_colour_scale, heads_or_means
from transformer.viz.report import REPORT_FIGURES
from ui.services import models
from ui.services.explorer import Explored
from ui.state import keys, url
from ui.widgets import frame
from ui.widgets.charts import show
from ui.widgets.controls import content_toggle, kind_layer_head, words_toggle
from ui.widgets.controls import step as controls_step
from ui.widgets.progress import ProgressBar

VIEWS = keys.ATTENTION_VIEWS


@dataclass(frozen=True)
class Chosen:
    """What the visitor chose to see: the kind's maps (0-based layer and head) in one of VIEWS."""

    kind: AttentionKind
    layer: int
    head: int
    view_name: str
    words: bool
    content: bool  # content tokens only (never in rollout and flow, which keep every token)
    fit_column: DeltaGenerator  # where the colour-scale toggle goes, beside the words toggle


@dataclass(frozen=True)
class Drawn:
    """A figure drawn, and the one map of it that the CSV exports, with that map's name."""

    figure: go.Figure
    exported_map: np.ndarray
    exported: str


INTRO = (
    "Every head's attention, as the model computed it for the sidebar's sentence: choose the kind (the encoder's "
    "self-attention, the decoder's masked self-attention, or cross-attention from the translation to the source), a "
    "layer and a head; or a layer's heads side by side, every layer and head at once, rollout and attention flow. Each "
    "row is a query, each column a key it may look at, and each row sums to 1."
)


def choices(explored: Explored) -> tuple[Chosen, AttentionView]:
    """The page's controls, and the view of the result they choose."""
    session, result = st.session_state, explored.result
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
    content = content and view_name not in ("rollout", "flow")
    view = attention_view(result, kind, step, words)
    return Chosen(kind, layer, head, view_name, words, content, toggles[1]), content_only(view) if content else view


def drawn(chosen: Chosen, view: AttentionView) -> Drawn:
    """The figure of the chosen view."""
    kind, layer, head, view_name = chosen.kind, chosen.layer, chosen.head, chosen.view_name
    kind_title = kind.title
    if chosen.content:
        kind_title = f"{kind.title}, content only (</s>, <s> and punctuation dropped, rows renormalised)"
    title = f"{kind_title}, {layer_name(layer)}"
    layers_named = layer_names(view.maps.shape[0])
    mean_of_layer = f"{layer_name(layer)}, mean over heads"
    if view_name == "head":
        figure = attention_heatmap(
            view.maps[layer, head], view.query_pieces, view.key_pieces, f"{title}, {head_name(head)}", view.mask
        )
        return Drawn(figure, view.maps[layer, head], f"{layer_name(layer)}, {head_name(head)}")
    if view_name == "mean":
        means = view.mean_over_heads()
        labels = (view.query_pieces, view.key_pieces, layers_named, ["mean over heads"])
        return Drawn(attention_grid(means[:, None], *labels, kind_title, view.mask), means[layer], mean_of_layer)
    if view_name in ("layer", "model"):
        maps, rows, name = (
            (view.maps[layer][None], [""], title) if view_name == "layer" else (view.maps, layers_named, kind_title)
        )
        figure, fell_back = heads_or_means(maps, view.query_pieces, view.key_pieces, rows, name, view.mask)
        if not fell_back:
            return Drawn(figure, view.maps[layer, head], f"{layer_name(layer)}, {head_name(head)}")
        st.info(
            f"This input gives {view.maps[0, 0].size:,} cells per map, too many to draw every head at once without "
            "slowing the page; showing the mean over heads instead. Pick one head to see it alone."
        )
        return Drawn(figure, view.mean_over_heads()[layer], mean_of_layer)
    return encoder_flows(view, view_name)


def encoder_flows(view: AttentionView, view_name: str) -> Drawn:
    """Rollout, or attention flow where the sentence is short enough for it (rollout, said, where not)."""
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
    return Drawn(attention_heatmap(flows, view.query_pieces, view.key_pieces, title), flows, name)


def figure_with_its_scale(drawn_figure: go.Figure, fit_column: DeltaGenerator) -> None:
    """The figure, on the 0-1 scale or fitted to its weights as the visitor chose, and its caption."""
    fitted = fit_column.toggle(
        "Fit the colours to these weights",
        **keys.shared("attention_fit"),
        help="Near-uniform attention is one pale colour on the 0-1 scale; fitted, its differences show.",
    )
    if fitted:
        low, high = fit_colour_scale(drawn_figure)
        scale = (
            f"Colour: weight from {low:.4f} (white) to {high:.4f} (dark blue), fitted to the weights drawn: read it "
            "off the bar"
        )
    else:
        scale = "Colour: weight from 0 (white) to 1 (dark blue), one scale for every map"
    show(drawn_figure, key="attention_chart")
    st.caption(f"{scale}. Grey: masked, the model could not look there.")


def downloads(explored: Explored, chosen: Chosen, view: AttentionView, exported_map: np.ndarray, exported: str) -> None:
    """The shown map as CSV, every map as .npz, and the offline HTML report, built on request."""
    session, result = st.session_state, explored.result
    columns = st.columns([3, 2, 2])  # the first names the map it exports: room for its label
    several = chosen.view_name in ("layer", "model", "mean")  # several maps drawn: the button names the one exported
    columns[0].download_button(
        f"CSV of {exported}" if several else "This map as CSV",
        attention_csv(np.asarray(exported_map), view.query_pieces, view.key_pieces),
        file_name=f"attention-{chosen.kind}-{exported.replace(', ', '-').replace(' ', '')}.csv",
        mime="text/csv",
        on_click="ignore",
        key="csv_download",
    )
    columns[1].download_button(
        "Every map as .npz",
        lambda: to_npz(result, explored.checkpoint.tokenizer),
        file_name="attention.npz",
        mime="application/octet-stream",
        on_click="ignore",
        key="npz_download",
    )
    report = (explored.identity, explored.text, explored.checkpoint_name, chosen.words)
    if session.get("report_built") != report and columns[2].button("Build the HTML report", key="report_build"):
        progress = ProgressBar("Building the report", REPORT_FIGURES, "figures")
        models.report_cached(explored.checkpoint, *report, _result=result, _progress=progress)
        progress.close()
        session.report_built = report
    if session.get("report_built") == report:  # built: the download takes it from the shared cache (or builds it)
        columns[2].download_button(
            "HTML report (offline)",
            lambda: models.report_cached(explored.checkpoint, *report, _result=result),
            file_name="attention-report.html",
            mime="text/html",
            on_click="ignore",
            key="report_download",
        )


def page(explored: Explored) -> None:
    st.markdown(INTRO)
    chosen, view = choices(explored)
    shown = drawn(chosen, view)
    figure_with_its_scale(shown.figure, chosen.fit_column)
    downloads(explored, chosen, view, shown.exported_map, shown.exported)
    url.write_url()


page(frame.draw(__file__))
