"""Streamlit glue shared by the pages: session state, the sidebar, text display."""
