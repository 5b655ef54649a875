"""Showing visitors' text in Streamlit markdown as the literal characters they typed."""

from __future__ import annotations

import re

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~$&:\"'=])")


def literal(text: str) -> str:
    """Text for st.markdown: every markdown or HTML character escaped, control characters made visible."""
    visible = "".join(c if c.isprintable() or c == " " else f"\\u{ord(c):04x}" for c in text)
    return _MARKDOWN_SPECIAL.sub(r"\\\1", visible)
