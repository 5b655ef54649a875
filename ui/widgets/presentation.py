"""Presentation mode, for a projector: bigger text and less chrome, and the sidebar folded out of the way (on
entering the mode, and again after each Translate and each page chosen)."""

from __future__ import annotations

import streamlit as st

from ui.state.url import link_flag

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
[data-testid="stSidebarNavViewButton"] { font-size: 1.2rem !important; }  /* "View 4 more" was 14 px */
[data-testid="stMainMenu"], [data-testid="stAppDeployButton"] { display: none; }
[data-testid="stHorizontalBlock"] { flex-wrap: wrap; }
[data-testid="stHorizontalBlock"] > [data-testid="stColumn"] { min-width: min(15rem, 100%); }
[data-testid="stHorizontalBlock"]:has(.js-plotly-plot) > [data-testid="stColumn"] { flex: 1 1 100% !important; }
</style>
"""  # text sizes only: changing the root font size would resize the layout under already drawn figures.
# Columns too narrow for the big text wrap onto the next line, and columns of figures stack, each the page's width.


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
    """After Translate in presentation mode, or after going to another page, the sidebar closes so that the page has
    the projector's width (after a page chosen from its menu it stayed open: the page 724 px wide)."""
    if translated and st.session_state.get("presentation"):
        with st.sidebar:
            _SIDEBAR_CLOSER(key="sidebar_closer")


def presentation_style() -> None:
    """Bigger text and less chrome when presentation mode is on (a fixed style sheet, no user text)."""
    if st.session_state.get("presentation"):
        st.html(PRESENTATION_CSS)
