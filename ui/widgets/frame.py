"""The app's pages and the frame around each: the page's setup, its title, the shared sidebar and, where there is
nothing to show, the first steps.

app.py builds the menu from `PAGES`; each page's script calls `draw(__file__)` first and draws on what the sidebar
decoded. The frame is drawn from inside the page's run, not before it in app.py, so that the sidebar's controls keep
one identity however Streamlit reached the page: Streamlit names a control by the page whose run drew it, and runs a
page's script alone where it reads the pages/ folder itself (a server's first visit by a page's URL; every run of
its AppTest).
"""

from __future__ import annotations

from pathlib import Path

import streamlit as st
from streamlit.navigation.page import StreamlitPage
from streamlit.runtime.pages_manager import PagesManager

from ui.services.explorer import Explored
from ui.state import url
from ui.widgets import sidebar
from ui.widgets.charts import svg_buttons
from ui.widgets.presentation import presentation_style, sidebar_state
from ui.widgets.welcome import first_steps

ICON = str(Path(__file__).parents[1] / "static" / "icon.png")  # served by the app: an emoji or :material: icon is not
# The menu: each section's pages, as (script, title); the first page is the landing page. Pages have no icon:
# Streamlit fetches a :material: page icon as the favicon from a public host, and emoji need a font a classroom may
# lack.
PAGES = {
    "Explore": (
        ("pages/explorer.py", "Decode explorer"),
        ("pages/attention.py", "Attention maps"),
        ("pages/attribution.py", "Attribution"),
    ),
    "Learn": (
        ("pages/positional.py", "Positional encoding"),
        ("pages/masks.py", "Masks"),
        ("pages/computation.py", "Attention, step by step"),
        ("pages/learned.py", "How it learned"),
    ),
    "Research": (
        ("pages/checkpoints.py", "Checkpoints"),
        ("pages/compare.py", "Compare checkpoints"),
        ("pages/heads.py", "Head statistics"),
        ("pages/corpus.py", "Corpus"),
        ("pages/alignment.py", "Alignment"),
        ("pages/cause.py", "Cause"),
        ("pages/sets.py", "Pair sets"),
    ),
}
LANDING_SCRIPT = PAGES["Explore"][0][0]  # the page a visitor lands on (app.py's navigation: its default)
TITLES = {Path(script).name: title for pages in PAGES.values() for script, title in pages}


def menu() -> dict[str, list[StreamlitPage]]:
    """PAGES as st.navigation takes them."""
    return {
        section: [st.Page(script, title=title, default=script == LANDING_SCRIPT) for script, title in pages]
        for section, pages in PAGES.items()
    }


def draw(script: str) -> Explored:
    """Draws the frame around the page whose script is `script` (its __file__); what the page draws on. Where there
    is nothing to show (an empty sentence, say), the page says why, offers sentences to try and names no sentence in
    its link (its own choices kept there), then stops."""
    if PagesManager.uses_pages_directory and not st.session_state.get("url_read"):
        # A server's first visitor opened a page by its URL: Streamlit ran the page alone, as its old pages/-folder
        # apps, with file names for a menu. Run app.py's navigation instead (on a session's first run only, where a
        # rerun loses no click).
        PagesManager.uses_pages_directory = False
        st.rerun()
    st.set_page_config(
        page_title="Transformer Explorer", page_icon=ICON, layout="wide", initial_sidebar_state=sidebar_state()
    )
    st.title(TITLES[Path(script).name])
    shown, session = Path(script).name, st.session_state
    navigated, session.page_shown = session.get("page_shown") not in (None, shown), shown
    explored = sidebar.render(navigated)
    presentation_style()
    svg_buttons()
    if explored is None:
        first_steps(st.session_state.get("checkpoint", ""))
        url.write_url({name: value for name, value in st.query_params.items() if name in url.PAGE_PARAMETERS})
        st.stop()
    return explored
