"""Drawing a figure builder's output on a page, the same way everywhere."""

from __future__ import annotations

import textwrap

import plotly.graph_objects as go
import streamlit as st

from transformer.viz.style import FIGURE_CONFIG
from ui.state.url import link_flag

PRESENTATION_FONT = 18  # points, for a projector
PRESENTATION_TITLE_CHARACTERS = 60  # a line of title at that size on a 1024-pixel projector


def show(figure: go.Figure, key: str) -> None:
    """Our own styling (theme=None: Streamlit's theme pads heatmaps), and Plotly's toolbar with its PNG download."""
    if st.session_state.get("presentation"):
        _enlarge(figure)
    st.plotly_chart(figure, theme=None, config=FIGURE_CONFIG, key=key)


def _enlarge(figure: go.Figure) -> None:
    """Bigger text and figures; a title too long for one line is wrapped (Plotly cuts it at the figure's edge)."""
    lines = textwrap.wrap(figure.layout.title.text or "", PRESENTATION_TITLE_CHARACTERS, break_long_words=False)
    top = figure.layout.margin.t if figure.layout.margin.t is not None else 80
    figure.update_layout(font_size=PRESENTATION_FONT, height=int((figure.layout.height or 450) * 1.3))
    if len(lines) > 1:
        figure.update_layout(title_text="<br>".join(lines), margin_t=top + 26 * (len(lines) - 1))


PRESENTATION_CSS = """
<style>
[data-testid="stMarkdownContainer"] p, [data-testid="stMarkdownContainer"] li,
[data-testid="stWidgetLabel"] p, [data-testid="stCaptionContainer"] { font-size: 1.35rem !important; }
[data-baseweb="select"] div, [data-testid="stSelectbox"] input, [data-testid="stTextArea"] textarea,
[data-testid="stTextInput"] input, [data-testid="stNumberInput"] input, [data-testid="stSliderThumbValue"],
[data-testid="stSliderTickBarMin"], [data-testid="stSliderTickBarMax"], [data-testid="stMultiSelectTagsContainer"] span,
[data-testid="stFileUploaderDropzoneInstructions"] span { font-size: 1.2rem !important; }
[data-testid="stTable"] th, [data-testid="stTable"] td, [data-testid="stMarkdownContainer"] code {
  font-size: 1.2rem !important;
}
.katex { font-size: 1.7rem !important; }  /* its sub- and superscripts, at 0.7 of it, still 19 px, */
.katex .reset-size3.size1 { font-size: 0.95em !important; }  /* and a subscript's subscript too */
[data-testid="stMainMenu"], [data-testid="stAppDeployButton"] { display: none; }
[data-testid="stHorizontalBlock"] { flex-wrap: wrap; }
[data-testid="stHorizontalBlock"] > [data-testid="stColumn"] { min-width: min(15rem, 100%); }
[data-testid="stHorizontalBlock"]:has(.js-plotly-plot) > [data-testid="stColumn"] { flex: 1 1 100% !important; }
</style>
"""  # text sizes only: changing the root font size would resize the layout under already drawn figures.
# Columns too narrow for the big text wrap onto the next line, and columns of figures stack, each the page's width.


def table(data, **dataframe_options) -> None:
    """A table: interactive (sortable) as a rule; in presentation mode plain HTML, whose text the presentation
    style sheet enlarges (the interactive table draws on a canvas, at its own small size)."""
    if st.session_state.get("presentation"):
        st.table(data)
    else:
        st.dataframe(data, **dataframe_options)


def sidebar_state() -> str | None:
    """Collapses the sidebar when presentation mode comes on (once: the visitor may open it again), else leaves it."""
    from_link = (
        not st.session_state.get("url_read") and link_flag("presentation") is True
    )  # asked before render() reads the link
    presenting = bool(st.session_state.get("presentation")) or from_link
    collapse = presenting and not st.session_state.get("sidebar_collapsed")
    st.session_state.sidebar_collapsed = presenting
    return "collapsed" if collapse else None


# Translate in presentation mode closes the sidebar again (open, it covers a third of a projector's width): a
# component that draws nothing and presses the sidebar's own collapse button, once, in the run after Translate.
_SIDEBAR_CLOSER = st.components.v2.component(
    "sidebar_closer",
    js="""export default function ({ parentElement }) {
  const page = (parentElement.getRootNode().host ?? parentElement).ownerDocument;
  if (page.querySelector('[data-testid="stSidebar"]')?.dataset.collapsed === "false") {
    page.querySelector('[data-testid="stSidebarCollapseButton"] button')?.click();
  }
}""",
)


def close_sidebar_if_presenting(translated: bool) -> None:
    """After Translate in presentation mode, the sidebar closes so that the result has the projector's width."""
    if translated and st.session_state.get("presentation"):
        with st.sidebar:
            _SIDEBAR_CLOSER(key="sidebar_closer")


def presentation_style() -> None:
    """Bigger text and less chrome when presentation mode is on (a fixed style sheet, no user text)."""
    if st.session_state.get("presentation"):
        st.html(PRESENTATION_CSS)
