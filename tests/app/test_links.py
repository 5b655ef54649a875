"""A copied link reopens the view it was copied from: on every page, each control that changes what the page shows is
changed, and the page opened afresh from the address bar shows every control as it was."""

from __future__ import annotations

import pytest
from helpers import REPO
from streamlit.testing.v1 import AppTest

SENTENCE = "The black cat sleeps."
PAGES = sorted(path.stem for path in (REPO / "pages").glob("*.py"))

# Controls that start work or take a visitor's own input rather than choose what is shown: a link does not carry
# them (an upload stays with its visitor; a computation is asked for by its button, not by opening a link).
NOT_IN_LINKS = {
    "widget_text",  # the sidebar's sentence: the link carries the sentence translated (text=), not the box's draft
    "target",  # teacher forcing's translation: typed, then run with its button
    # The settings of a run over a file (Head statistics, Corpus, Alignment): the file stays with its visitor, and a
    # run of a minute is asked for by its button, never by opening a link.
    "stats_sample",
    "matter_sample",
    "matter_measure",
    "matter_prune",
    "corpus_limit",
    "corpus_beam",
    "align_example",
    "align_counted",
    "align_threshold",
    "align_limit",
    "align_gradients",
    "align_flow",
}


def opened(page: str, query: dict[str, str]) -> AppTest:
    """The app as a browser opening a link to `page`: the first run is that page's, with the link's parameters."""
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=180)
    at.query_params.update(query)
    return at.switch_page(f"pages/{page}.py").run()


def controls(at: AppTest) -> dict[str, object]:
    """Every keyed control on the page (the sidebar's checkpoint, sentence and settings are linked already)."""
    found = {}
    for kind in ("selectbox", "multiselect", "radio", "toggle", "checkbox", "slider", "select_slider", "number_input"):
        for widget in at.main.get(kind):
            if widget.key and widget.key not in NOT_IN_LINKS:
                found[widget.key] = (kind, widget)
    return found


def changed(kind: str, widget) -> object | None:
    """Another value for the control than the one it shows (an option's index for a menu), or None."""
    value = widget.value
    if kind in ("toggle", "checkbox"):
        return not value
    if kind in ("selectbox", "radio"):
        others = [index for index in range(len(widget.options)) if index != widget.index]
        return others[-1] if others else None
    if kind == "select_slider":  # the app's are over positions (0-based, shown from 1)
        others = [index for index in range(len(widget.options)) if index != value]
        return others[-1] if others else None
    if kind == "multiselect":
        return [widget.options[-1]] if widget.options and value != [widget.options[-1]] else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None  # a range slider
    high = widget.max if widget.max is not None else value + 1
    return type(value)(high if value != high else widget.min)


@pytest.mark.parametrize("page", PAGES)
def test_every_control_of_the_page_is_carried_by_its_link(page):
    at = opened(page, {"text": SENTENCE})
    assert not at.exception, at.exception
    chosen = {}
    for key in list(controls(at)):
        present = controls(at)
        if key not in present:
            continue  # another control's change put it away
        kind, widget = present[key]
        value = changed(kind, widget)
        if value is None:
            continue
        at = set_control(at, kind, widget, value)
        assert not at.exception, (key, at.exception)
        chosen[key] = value
    shown = {key: widget.value for key, (kind, widget) in controls(at).items() if key in chosen}
    again = opened(page, dict(at.query_params))
    assert not again.exception, again.exception
    reopened = {key: widget.value for key, (kind, widget) in controls(again).items() if key in shown}
    assert reopened == shown, f"{page}: {dict(at.query_params)}"


def set_control(at: AppTest, kind: str, widget, value) -> AppTest:
    if kind in ("selectbox", "radio"):
        # A menu sends the browser's choice as the option's label; AppTest knows the labels, not the values the
        # page formats into them, so the option is picked by its place, as a click picks it.
        widget.__class__ = type("Picked", (type(widget),), {"index": property(lambda _: value)})
    else:
        widget.set_value(value)
    if widget.form_id:  # applied with its form's button
        next(b for b in at.main.button if b.form_id == widget.form_id and b.proto.is_form_submitter).click()
    return at.run()


def test_an_empty_sentence_keeps_the_pages_title_and_examples_and_its_link_names_no_sentence():
    """Tried as a new user would: Translate on an empty box left the previous sentence in the address bar, and the
    page lost its title, its help and the example buttons."""
    at = opened("explorer", {"text": "Ich habe Hunger."})
    assert at.query_params["text"] == "Ich habe Hunger."
    at.text_area(key="widget_text").input("   ")
    at = at.button(key="translate").click().run()
    assert not at.exception
    assert [title.value for title in at.title] == ["Decode explorer"]
    assert any("Nothing to show" in warning.value for warning in at.warning)
    assert "text" not in at.query_params  # the link names no sentence, not the one before it
    assert at.button(key="example_0").label and at.expander[0].label == "How to use this page"
    at = at.button(key="example_0").click().run()  # and the way out works
    assert not at.exception and at.session_state["result"].text


def test_a_set_of_most_of_many_heads_is_written_as_a_mask_that_fits_a_link():
    """461 of a model's 768 heads, named one by one, made an 8,413-character link (nginx answered 414); cut at 2,000
    characters it switched off 179 of them, silently."""
    import random

    from transformer.model.config import TransformerConfig
    from transformer.model.heads import every_head
    from ui.state.url import MAX_PAGE_VALUE, _mask_bits, choices_text

    config = TransformerConfig(8, 8, d_model=64, n_heads=16, n_encoder_layers=16, n_decoder_layers=16)
    choices = every_head(config)
    picked = set(random.Random(0).sample(choices, 461))
    chosen = [choice for choice in choices if choice in picked]
    text = choices_text(chosen, choices)
    assert text.startswith("~") and len(text) <= 130 < MAX_PAGE_VALUE
    assert [c for c, bit in zip(choices, _mask_bits(text[1:], len(choices))) if bit] == chosen
    assert choices_text(chosen[:3], choices) == ",".join(map(str, chosen[:3]))  # a few: readable
    assert not any(_mask_bits("not base64!", len(choices)))


def test_a_link_with_a_mask_of_heads_opens_with_them_switched_off():
    from helpers import markdown

    from transformer.io.checkpoint import DEFAULT_CHECKPOINT, file_model
    from transformer.model.heads import Head, every_head
    from ui.state.url import choices_text

    opened = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    opened.query_params["text"] = SENTENCE
    opened = opened.switch_page("pages/heads.py").run()
    choices = every_head(file_model(DEFAULT_CHECKPOINT)[0])  # the model a link without `ckpt` opens
    off = choices_text(choices[: len(choices) - 3], choices)
    assert off.startswith("~")
    again = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    again.query_params.update({"text": SENTENCE, "off": off})
    again = again.switch_page("pages/heads.py").run()
    assert not again.exception and f"{len(choices) - 3} heads off" in markdown(again)
    assert again.query_params["off"] == off  # the page writes the same link back
    assert all(isinstance(head, Head) for head in again.session_state["ablated"])  # the one value reaches the model


def test_one_head_switched_off_is_one_head_off():
    """Tried as a new user would: one head switched off by a link read "1 heads off"."""
    from helpers import markdown

    at = opened("heads", {"text": SENTENCE, "off": "cross.1.1"})
    assert not at.exception and "1 head off" in markdown(at) and "1 heads off" not in markdown(at)


def test_an_empty_sentence_keeps_the_pages_own_choices_in_its_link():
    """Tried as a new user would: an empty sentence on Compare dropped `with=` from the link."""
    at = opened("compare", {"text": SENTENCE, "with": "en-fr-general-epoch1"})
    assert at.query_params["with"] == "en-fr-general-epoch1"
    at.text_area(key="widget_text").input("   ")
    at = at.button(key="translate").click().run()
    assert not at.exception and "text" not in at.query_params
    assert at.query_params["with"] == "en-fr-general-epoch1"


def test_a_link_with_a_knockout_opens_the_translation_as_the_edited_model_writes_it():
    """The step view's knockout: "tired" and "it" blocked in every decoder layer at the step that writes il, and a
    head pinned; the page shows the decode the analysis gives for that edit, beside the original, and writes the
    same link back."""
    from helpers import markdown

    from transformer.analysis.interventions.knockout import AttentionEdit, Pin, edited_decode
    from transformer.analysis.interventions.patching import CLEAN_EXAMPLE
    from transformer.decoding.strategies import decode_text
    from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint

    shipped = load_checkpoint(DEFAULT_CHECKPOINT)
    original = decode_text(shipped.model, shipped.tokenizer, CLEAN_EXAMPLE)
    step = original.tgt_pieces.index("il")
    words = CLEAN_EXAMPLE.split()
    it, tired = words.index("it"), words.index("tired.")  # "tired." is one word of pieces "▁tired" "."
    link = {"text": CLEAN_EXAMPLE, "step": str(step + 1), "cut": f"{it + 1},{tired + 1}", "pin": "2.3"}
    at = opened("explorer", link | {"pin_to": "2"})
    assert not at.exception, at.exception
    tired_pieces = [p for p, piece in enumerate(original.src_pieces) if piece in ("▁tired", ".")]
    it_piece = original.src_pieces.index("▁it")
    edit = AttentionEdit((it_piece, *tired_pieces), (0, 1, 2), (Pin(1, 2, (1,)),))
    edited = edited_decode(shipped.model, shipped.tokenizer, original, step, edit)
    shown = markdown(at)
    assert f"**With the edit** · {edited.text}" in shown.replace("\\", "")
    assert f"**As it was** · {original.text}" in shown.replace("\\", "")
    assert edited.text != original.text  # the edit changes what the model writes (else the test shows nothing)
    assert {name: at.query_params[name] for name in link} | {"pin_to": at.query_params["pin_to"]} == link | {
        "pin_to": "2"
    }


def knockout_panel(at: AppTest):
    return next(e for e in at.expander if e.label.startswith("Knockout"))


def test_a_word_is_cut_without_the_full_stop_attached_to_it_and_the_link_keeps_the_words_numbers():
    """Tried as a new user would (issue 83, item 7): "tired." could be cut only with its full stop. Its letters alone
    are a choice of their own, listed after every word (a link's words keep their numbers), and the link names it."""
    from helpers import markdown

    from transformer.analysis.interventions.knockout import AttentionEdit, edited_decode
    from transformer.analysis.interventions.patching import CLEAN_EXAMPLE
    from transformer.analysis.words import word_spans
    from transformer.decoding.strategies import decode_text
    from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint

    shipped = load_checkpoint(DEFAULT_CHECKPOINT)
    original = decode_text(shipped.model, shipped.tokenizer, CLEAN_EXAMPLE)
    step = original.tgt_pieces.index("il")
    tired = CLEAN_EXAMPLE.split().index("tired.") + 1
    at = opened("explorer", {"text": CLEAN_EXAMPLE, "step": str(step + 1), "cut": f"{tired}w"})
    assert not at.exception, at.exception
    chooser = at.multiselect(key="knockout_words")
    assert chooser.options[-1] == "tired" and "tired." in chooser.options  # after every word, "tired." with them
    words = len(word_spans(original.src_pieces))  # the sentence's and the end token
    assert chooser.value == [words] and at.query_params["cut"] == f"{tired}w"
    edit = AttentionEdit((original.src_pieces.index("▁tired"),), (0, 1, 2))
    edited = edited_decode(shipped.model, shipped.tokenizer, original, step, edit)
    assert f"**With the edit** · {edited.text}" in markdown(at).replace("\\", "")


def test_the_knockout_says_what_changes_after_the_step_and_stays_open_when_its_edit_is_undone():
    """Tried as a new user would (issue 83, items 6 and 7): "At step 17 the model still writes il" while the rest of
    the translation had changed ("fatigué" dropped); and the panel folded, its controls gone, when the last blocked
    word was removed."""
    from helpers import markdown

    from transformer.analysis.interventions.knockout import AttentionEdit, edited_decode
    from transformer.analysis.interventions.patching import CLEAN_EXAMPLE
    from transformer.decoding.strategies import decode_text
    from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint

    shipped = load_checkpoint(DEFAULT_CHECKPOINT)
    original = decode_text(shipped.model, shipped.tokenizer, CLEAN_EXAMPLE)
    step = original.tgt_pieces.index("il")
    tired = CLEAN_EXAMPLE.split().index("tired.")
    at = opened("explorer", {"text": CLEAN_EXAMPLE, "step": str(step + 1), "cut": str(tired + 1)})
    pieces = tuple(p for p, piece in enumerate(original.src_pieces) if piece in ("▁tired", "."))
    edited = edited_decode(shipped.model, shipped.tokenizer, original, step, AttentionEdit(pieces, (0, 1, 2)))
    assert edited.tgt_pieces[step] == "il" and edited.tgt_ids[step + 1 :] != original.tgt_ids[step + 1 :]
    said = markdown(at).replace("\\", "")
    assert f"At step {step + 1} the model still writes **·il**; what follows changes (below)." in said  # of qu'il
    assert knockout_panel(at).proto.expanded
    at = at.multiselect(key="knockout_words").set_value([]).run()
    assert not at.exception and knockout_panel(at).proto.expanded  # open, its controls in view
    assert at.multiselect(key="knockout_words").value == []
