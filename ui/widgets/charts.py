"""Drawing a figure builder's output on a page, the same way everywhere."""

from __future__ import annotations

import textwrap

import plotly.graph_objects as go
import streamlit as st

from transformer.viz.style import FIGURE_CONFIG

PRESENTATION_FONT = 18  # points, for a projector
PRESENTATION_TITLE_CHARACTERS = 60  # a line of title at that size on a 1024-pixel projector


def show(figure: go.Figure, key: str) -> None:
    """Our own styling (theme=None: Streamlit's theme pads heatmaps), and Plotly's toolbar with its PNG download (an
    SVG one beside it: svg_buttons)."""
    if st.session_state.get("presentation"):
        _enlarge(figure)
    st.plotly_chart(figure, theme=None, config=FIGURE_CONFIG, key=key)


# Each figure's toolbar: Plotly's camera downloads a PNG at twice the size (FIGURE_CONFIG), and beside it a button
# for an SVG (text as text, for papers and slides), which clicks the camera with the SVG format set for that click:
# Plotly reads the format when its button is pressed, so the export stays Plotly's own, in the browser. A component
# that draws nothing, once a page (it watches the page for toolbars as figures come and go).
_SVG_BUTTONS = st.components.v2.component(
    "svg_buttons",
    isolate_styles=False,  # no shadow root: the step view's is the page's one (its tests and pages find it first)
    js="""export default function ({ parentElement }) {
  const page = (parentElement.getRootNode().host ?? parentElement).ownerDocument;
  if (page.defaultView.svgButtonsWatching) return;
  page.defaultView.svgButtonsWatching = true;
  const label = '<svg viewBox="0 0 30 16" width="1.9em" height="1em"><text x="0" y="13" font-size="13" ' +
    'font-family="sans-serif" font-weight="bold" fill="currentColor">SVG</text></svg>';
  const add = () => {
    for (const camera of page.querySelectorAll('.js-plotly-plot .modebar-btn[data-title^="Download plot"]')) {
      if (camera.parentElement.querySelector('.svg-download')) continue;
      const button = camera.cloneNode(false);
      button.classList.add('svg-download');
      button.setAttribute('data-title', 'Download plot as an SVG (vector)');
      button.style.color = 'rgba(68, 68, 68, 0.5)';
      button.innerHTML = label;
      button.addEventListener('click', (event) => {
        event.preventDefault();
        event.stopPropagation();
        const figure = camera.closest('.js-plotly-plot'), asked = figure._context.toImageButtonOptions;
        figure._context.toImageButtonOptions = { ...asked, format: 'svg', scale: 1 };
        try { camera.dispatchEvent(new MouseEvent('click', { bubbles: true })); }
        finally { figure._context.toImageButtonOptions = asked; }
      });
      camera.after(button);
    }
  };
  let queued = false;
  new MutationObserver(() => {
    if (!queued) { queued = true; requestAnimationFrame(() => { queued = false; add(); }); }
  }).observe(page.body, { childList: true, subtree: true });
  add();
}""",
)


def svg_buttons() -> None:
    """An SVG button on every figure's toolbar of the page (drawn in the sidebar, where it takes no room)."""
    with st.sidebar:
        _SVG_BUTTONS(key="svg_buttons", data={})  # no data but an empty one: every component sends JSON


def _enlarge(figure: go.Figure) -> None:
    """Bigger text and figures; a title too long for one line is wrapped (Plotly cuts it at the figure's edge);
    subplot titles (annotations, sized on their own) enlarged too; a legend above the plot moved beside it (at
    this size its lines grew up over the title)."""
    lines = textwrap.wrap(figure.layout.title.text or "", PRESENTATION_TITLE_CHARACTERS, break_long_words=False)
    top = figure.layout.margin.t if figure.layout.margin.t is not None else 80
    figure.update_layout(font_size=PRESENTATION_FONT, height=int((figure.layout.height or 450) * 1.3))
    figure.update_annotations(font_size=PRESENTATION_FONT)
    if figure.layout.legend.orientation == "h":
        figure.update_layout(legend=dict(orientation="v", x=1.02, xanchor="left", y=1, yanchor="top"))
    if len(lines) > 1:
        figure.update_layout(title_text="<br>".join(lines), margin_t=top + 26 * (len(lines) - 1))
        if figure.layout.title.yanchor == "bottom" and figure.layout.title.pad.b:  # above colour bars: kept clear
            figure.update_layout(title_pad_b=figure.layout.title.pad.b + 26 * (len(lines) - 1))


def table(data, **dataframe_options) -> None:
    """A table: interactive (sortable) as a rule; in presentation mode plain HTML, whose text the presentation
    style sheet enlarges (the interactive table draws on a canvas, at its own small size)."""
    if st.session_state.get("presentation"):
        st.table(data)
    else:
        st.dataframe(data, **dataframe_options)
