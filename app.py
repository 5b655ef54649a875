"""Transformer Explorer: type a sentence, step through its decoding, see every layer's and head's attention.

Run with `streamlit run app.py`. Each page draws the shared sidebar (checkpoint, sentence,
decoding) itself; this script only lists the pages.
"""

import streamlit as st

st.navigation(
    {
        "Explore": [
            st.Page("pages/explorer.py", title="Decode explorer", icon=":material/play_circle:", default=True),
            st.Page("pages/attention.py", title="Attention maps", icon=":material/grid_view:"),
        ],
        "Learn": [
            st.Page("pages/positional.py", title="Positional encoding", icon=":material/waves:"),
            st.Page("pages/masks.py", title="Masks", icon=":material/visibility_off:"),
            st.Page("pages/computation.py", title="Attention, step by step", icon=":material/calculate:"),
        ],
        "Research": [
            st.Page("pages/checkpoints.py", title="Checkpoints", icon=":material/inventory_2:"),
            st.Page("pages/compare.py", title="Compare checkpoints", icon=":material/compare:"),
            st.Page("pages/heads.py", title="Head statistics", icon=":material/analytics:"),
            st.Page("pages/corpus.py", title="Corpus", icon=":material/table_rows:"),
        ],
    }
).run()
