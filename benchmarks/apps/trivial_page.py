"""The cold-start floor: a Streamlit page with a sidebar text box and one Plotly heatmap, and no model.

`python -m benchmarks` starts it as `streamlit run benchmarks/apps/trivial_page.py` to measure what any
Streamlit + Plotly page costs on this machine, against the app's own cold start in the same run.
"""

import plotly.graph_objects as go
import streamlit as st

st.set_page_config(page_title="Trivial page", layout="wide")
with st.sidebar:
    st.text_area("Sentence", "A man in a red shirt is riding a bicycle down the street.")
st.title("Trivial page")
st.plotly_chart(go.Figure(go.Heatmap(z=[[0.1, 0.9], [0.6, 0.4]])), theme=None)
