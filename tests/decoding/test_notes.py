"""The notes beside an output: another language than the model's, and sentences run together or left out."""

from __future__ import annotations

import pytest

from transformer.decoding.degenerate import decode_notes, dropped_sentences_note, foreign_note, sentence_count
from transformer.decoding.greedy import decode_with_chooser
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint


@pytest.mark.parametrize(
    "text, sentences",
    [
        ("Hello world.", 1),
        ("The weather was nice. We went to the beach. The children played!", 3),
        ("Mr. Smith met Dr. Jones at 5 p.m. in the U.S. yesterday.", 1),  # abbreviations end nothing
        ("J. K. Rowling wrote it. It sold well", 2),  # an initial; a last sentence without its stop
        ('He said "no." Then he left.', 2),
        ("Il pèse 3.5 kg.", 1),
        ("", 0),
    ],
)
def test_sentences_are_counted_by_their_ends(text, sentences):
    assert sentence_count(text) == sentences


def test_the_default_given_german_says_it_does_not_read_like_english():
    """German got "unsure" and no word that it is not English (tried as a new user would)."""
    checkpoint = load_checkpoint(DEFAULT_CHECKPOINT)
    result = decode_with_chooser(
        checkpoint.model, checkpoint.tokenizer, "Ich habe heute keine Zeit, weil ich arbeiten muss."
    )
    notes = " ".join(decode_notes(result, "</s>", -0.78, source_language="English"))
    assert "This does not read like English: its words fall into 3.0 pieces each" in notes
    english = decode_with_chooser(
        checkpoint.model, checkpoint.tokenizer, "The black cat is sleeping on the red chair near the window."
    )
    assert foreign_note(english.src_pieces[:-1], "English") is None
    assert foreign_note(["\u2581Ich", "\u2581hab", "e"], "English") is None  # too few words to say


def test_several_sentences_run_together_get_a_note_and_one_sentence_none():
    """A paragraph lost sentences with no word of why (tried as a new user would); here the default runs three
    sentences into two."""
    checkpoint = load_checkpoint(DEFAULT_CHECKPOINT)
    paragraph = "The train was late. We missed the meeting. Our boss was angry."
    result = decode_with_chooser(checkpoint.model, checkpoint.tokenizer, paragraph)
    notes = " ".join(decode_notes(result, "</s>", -0.78))
    assert sentence_count(result.text) < 3 and "The input has 3 sentences and the output" in notes
    assert dropped_sentences_note("I love you.", "Je t'aime.") is None
    assert dropped_sentences_note("One. Two.", "Un. Deux.") is None
