"""Transformer Explorer: type a sentence, step through its decoding, see every layer's and head's attention.

Run with `streamlit run app.py`. This script wires the app, holds a page-run slot around each run and runs the page
chosen from the menu (ui/widgets/frame.py lists the pages; each page's script draws the frame first). Under
ui.server.launch a run waits while the warm-up imports (ui/server/warming.py says why).
"""

from ui.server.warming import IMPORTS  # the standard library only: nothing of the app is imported before the wait

with IMPORTS.page_run():
    import streamlit as st

    from ui.server.wiring import wire
    from ui.services.work import page_run
    from ui.widgets import frame

    wire()
    with page_run():  # at most a few page runs compute at once (ui/services/work.py says why)
        st.navigation(frame.menu()).run()
