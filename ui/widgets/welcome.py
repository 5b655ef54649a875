"""The explorer's first lines for a newcomer: what to do, sentences to try with one click, and what the model knows."""

from __future__ import annotations

from dataclasses import dataclass

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


MEAN_OVER_HEADS = "mean over heads"


@dataclass(frozen=True)
class TextbookSentence:
    """A sentence the papers and lectures show, with what this model shows of it and where: never a figure the
    model does not reproduce. `reference`, where the model's own output lacks what the figure shows, is
    teacher-forced with one click, at the cross-attention layer and head that show it."""

    sentence: str
    guide: str
    reference: str | None = None
    layer: int | None = None  # 1-based, as the page's slider
    head: int | None = None


# Measured on the shipped default (docs/command-line.md and docs/models-and-training.md say how); shown for it alone.
TEXTBOOK = {
    "en-fr-general": (
        TextbookSentence(
            "The agreement on the European Economic Area was signed in August 1992.",
            "Bahdanau et al.'s figure. This model writes \"L'accord sur l'Europe est signé en août 1992.\": "
            "it drops Economic Area, so its own output has no crossing to show. The button teacher-forces the "
            "paper's reference instead and opens *Teacher forcing* below the step view at layer 3, the mean of its "
            "heads, pieces merged into words. Read each row by the word it writes, as the paper does (a row is "
            'labelled "fed → written"): the row that writes *économique* looks most at Economic (0.39) and the one '
            "that writes *européenne* at European (0.41), the crossing; *zone* looks at Economic (0.27) more than at "
            "Area (0.13), so two of its three links. Layer 1's head 6 shows the crossing shifted by one row: the row "
            "*fed* *économique*, which writes *européenne*, looks at Economic (1.00).",
            reference="L'accord sur la zone économique européenne a été signé en août 1992.",
            layer=3,
        ),
        TextbookSentence(
            "The animal didn't cross the street because it was too tired.",
            "Writes *il* (the animal), and with *wide* instead of *tired* writes *elle* (the street), both right. "
            "The famous figure of an encoder head linking *it* to the animal is not in this model: no head puts "
            "more than 0.03 from *it* on *animal*, and the most on *street* is 0.39 (layer 1, head 6), the same "
            "for both sentences. Where the choice shows: *Attribution*, at the step that writes *il* or *elle*: "
            "integrated gradients put the most on *street* for *il* (0.16 of the row) and on *too* and *wide* for "
            "*elle* (0.21 each), while its cross-attention and its contributions (57 % and 55 % from the source) "
            "are alike for both.",
        ),
        TextbookSentence(
            "The animal didn't cross the street because it was too wide.",
            "The same sentence with *wide*: compare the step that writes *elle* with the one that writes *il*.",
        ),
    )
}


def _try_textbook(example: TextbookSentence) -> None:
    """A textbook sentence clicked: translated, and its reference teacher-forced where it has one."""
    _try(example.sentence)
    if example.reference is not None:
        st.session_state.target = example.reference
        st.session_state.words = True  # the figure's words, not the tokenizer's pieces
        st.session_state.tf_layer = example.layer
        st.session_state.tf_head = MEAN_OVER_HEADS if example.head is None else f"head {example.head}"


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
    textbook = TEXTBOOK.get(checkpoint_name, ())
    if textbook:  # folded: open, it would push the step view below a laptop's screen
        with st.expander("Sentences from the textbooks, and what this model shows of them"):
            for index, example in enumerate(textbook):
                label = example.sentence if example.reference is None else f"{example.sentence} (with its reference)"
                st.button(label, key=f"textbook_{index}", on_click=_try_textbook, args=(example,))
                st.caption(example.guide)
