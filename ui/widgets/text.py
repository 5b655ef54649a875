"""Showing visitors' text in Streamlit markdown as the literal characters they typed."""

from __future__ import annotations

import re

_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()<>#+\-.!|~$&:\"'=])")
# GitHub's autolinks (http://…, www.…, a@b.c) are found in the text after escapes are undone, so escaping
# cannot stop them: an invisible word joiner (U+2060) where each pattern needs its next character does.
_AUTOLINK_START = re.compile(r"(?i)\b(https?|ftp|mailto|xmpp)(?=:)|\bwww(?=\.)|@")
WORD_JOINER = "\u2060"


def literal(text: str) -> str:
    """Text for st.markdown: every markdown or HTML character escaped, control characters made visible, and
    nothing turned into a link."""
    visible = "".join(c if c.isprintable() or c == " " else f"\\u{ord(c):04x}" for c in text)
    unlinked = _AUTOLINK_START.sub(lambda match: match.group(0) + WORD_JOINER, visible)
    return _MARKDOWN_SPECIAL.sub(r"\\\1", unlinked)
