"""The explorer's first lines for a newcomer: what to do, sentences to try with one click, and what the model knows."""

from __future__ import annotations

import streamlit as st

from transformer.io.checkpoint import CHECKPOINT_DIR
from transformer.text.files import FileRefused, read_head
from ui.state import keys
from ui.widgets.text import literal

MAX_CARD_BYTES = 4096
# Sentences the shipped default translates right, each showing something in its cross-attention, for a first click.
EXAMPLES = (
    "The European Parliament voted against the new law.",  # two words for one, and a crossing
    "I do not understand the question.",  # one word for two: ne ... pas
    "Where is the train station?",  # two words for one: gare
)


def model_card(name: str) -> str | None:
    """The first paragraph of checkpoints/cards/NAME.md, the line that says what a shipped model knows; None when
    it has no card."""
    path = CHECKPOINT_DIR / "cards" / f"{name}.md"
    try:
        text = read_head(path, MAX_CARD_BYTES).decode("utf-8", errors="replace")
    except FileRefused:  # none, or not a regular file (a link to /dev/zero, a pipe): no card
        return None
    return " ".join(text.strip().split("\n\n")[0].split()) or None


def _try(sentence: str) -> None:
    """An example clicked: it becomes the sentence, translated with the sidebar's settings."""
    st.session_state.text = sentence
    st.session_state.applied_text = sentence


def first_steps(checkpoint_name: str) -> None:
    """How to use the page, open until the visitor translates a sentence of their own."""
    session = st.session_state
    newcomer = session.get("applied_text") == keys.DEFAULT_SENTENCE and not session.get("stepped")
    # Folded in presentation mode: a class sees the step view first, and the teacher knows the page.
    with st.expander("How to use this page", expanded=newcomer and not session.get("presentation")):
        st.markdown(
            "Type an English sentence in the sidebar and press **Translate** (or Ctrl+Enter in the box). The "
            "output is written one token at a time: step through it with **Previous** and **Next** (or the arrow "
            "keys, outside the text boxes) and see, for every layer and head, which source words the "
            "model looked at to write that token. Or try one of these:"
        )
        for index, sentence in enumerate(EXAMPLES):  # one a line: whole on a projector's 1024 pixels too
            st.button(sentence, key=f"example_{index}", on_click=_try, args=(sentence,))
        card = model_card(checkpoint_name)
        if card:
            st.markdown(f"**What {literal(checkpoint_name)} knows.** {literal(card)}")
