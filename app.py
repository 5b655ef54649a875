"""Transformer Explorer: type a sentence, step through its decoding, see every layer's and head's attention.

Run with `streamlit run app.py`. Each page draws the shared sidebar (checkpoint, sentence,
decoding) itself; this script only lists the pages. Pages have no icon: Streamlit fetches a
:material: page icon as the favicon from a public host, and emoji need a font a classroom may lack.
"""

import streamlit as st

from ui.server.wiring import wire
from ui.services.work import page_run

wire()
with page_run():  # at most a few page runs compute at once (ui/services/work.py says why)
    st.navigation(
        {
            "Explore": [
                st.Page("pages/explorer.py", title="Decode explorer", default=True),
                st.Page("pages/attention.py", title="Attention maps"),
                st.Page("pages/attribution.py", title="Attribution"),
            ],
            "Learn": [
                st.Page("pages/positional.py", title="Positional encoding"),
                st.Page("pages/masks.py", title="Masks"),
                st.Page("pages/computation.py", title="Attention, step by step"),
                st.Page("pages/learned.py", title="How it learned"),
            ],
            "Research": [
                st.Page("pages/checkpoints.py", title="Checkpoints"),
                st.Page("pages/compare.py", title="Compare checkpoints"),
                st.Page("pages/heads.py", title="Head statistics"),
                st.Page("pages/corpus.py", title="Corpus"),
                st.Page("pages/alignment.py", title="Alignment"),
            ],
        }
    ).run()
