"""The decode explorer: step through the output token by token, branch with "what if", teacher-force a target."""

from dataclasses import replace

import streamlit as st

from transformer.analysis.decoder_lens import LayerTranslation
from transformer.analysis.interventions.knockout import AttentionEdit, Pin
from transformer.analysis.tuned_lens import TunedLens, TunedLensError
from transformer.analysis.views import attention_view
from transformer.analysis.words import punctuation_cores, word_labels, word_spans
from transformer.decoding.candidate_words import worked_out_at_open
from transformer.decoding.lens import LogitLens
from transformer.decoding.result import DecodeInputError, DecodeResult
from transformer.model.heads import head_names, layer_name
from transformer.text.pieces import CONTINUES_WORD, SPACE, WORD_START, is_special, readable
from transformer.text.tokenizer import TokenizerBase
from transformer.viz.attention import attention_heatmap
from transformer.viz.charts import token_probabilities
from ui.players.step_player import StepAction, layer_windows, step_player, window_name
from ui.services import checkpoints, models
from ui.services.explorer import Explored, take_branch, take_prefix
from ui.state import keys, url
from ui.widgets import frame
from ui.widgets.charts import show
from ui.widgets.controls import content_toggle, words_toggle
from ui.widgets.text import literal
from ui.widgets.welcome import MEAN_OVER_HEADS, first_steps

CandidateWords = list[list[str | None]]  # for each step, the word each candidate would make (None: no word yet)


def tuned_lens(explored: Explored) -> tuple[LogitLens, TunedLens] | None:
    """The tuned lens' guesses over this result where the checkpoint has a lens that fits it (said, where not)."""
    try:
        lens = checkpoints.tuned_lens(explored.checkpoint_name)
    except TunedLensError as error:
        st.caption(literal(f"The tuned lens beside this checkpoint is not used: {error}"))
        return None
    if lens is None:
        return None
    rows = models.tuned_lens_cached(explored.checkpoint, explored.identity, _result=explored.result, _tuned=lens)
    return rows, lens


def header(explored: Explored) -> None:
    """The newcomer's first steps, what to know of the input, the source, and the output shown."""
    session = st.session_state
    first_steps(explored.checkpoint_name)
    for note in explored.notes:
        st.warning(literal(note))
    st.markdown(f"**Source** · {literal(explored.text)}")
    if session.get("branch") is not None:
        shown = {False: "original: " + explored.original.text, True: "what-if branch: " + session.branch.text}
        st.radio("Showing", [False, True], format_func=shown.get, **keys.shared("show_branch"))
    st.markdown(f"**Output** ({literal(explored.result.strategy)}) · {literal(explored.result.text)}")


def layer_window(explored: Explored) -> tuple[list[int], str | None]:
    """The layers the step view shows (all of them where a step fits the page), and the name of their window where
    the link must carry it (not the last one, the default)."""
    session = st.session_state
    layers, heads = explored.result.cross.shape[:2]
    row_cells = len(explored.result.src_ids) + explored.result.steps  # a row's cells at the last step, both maps
    windows = {window_name(window): window for window in layer_windows(layers, heads, row_cells)}
    shown_layers = list(windows)[-1]  # the output's end of the model, until the visitor or a link picks others
    if len(windows) > 1:
        url.from_link("step_layers", "layers", list(windows))
        if session.get("step_layers") not in windows:  # first here, or another model's windows
            session.step_layers = shown_layers
        shown_layers = st.radio(
            f"The step view's layers ({heads} heads each; a step shows {len(next(iter(windows.values())))} layers at once)",
            list(windows),
            format_func=lambda name: f"layers {name}" if "-" in name else f"layer {name}",
            horizontal=True,
            key="step_layers",
        )
    last = list(windows)[-1]
    return windows[shown_layers], shown_layers if len(windows) > 1 and shown_layers != last else None


def asked_for(explored: Explored, candidate_words: CandidateWords | None) -> tuple[DecodeResult, CandidateWords | None]:
    """The result with each layer's guesses and the candidates' words where the visitor asked for them."""
    config = explored.checkpoint.model.config
    shown = explored.result
    lens_column, words_asked_column = st.columns(2) if not shown.lens.read or candidate_words is None else (st, st)
    # A large vocabulary: every layer's guesses, and the candidates' words, cost more than the decode and wait to be asked.
    if not shown.lens.read and lens_column.toggle(
        "Each layer's guesses",
        key="read_lens",
        help=f"The logit lens, read when asked: every decoder layer read over the {config.tgt_vocab_size:,} pieces costs "
        "more than the decode itself at this size.",
    ):
        with st.spinner("Reading what each decoder layer would predict at every step ..."):
            shown = replace(
                shown, lens=models.lens_read_cached(explored.checkpoint, explored.identity, _result=explored.result)
            )
    if candidate_words is None and words_asked_column.toggle(
        "Candidates' words",
        key="candidate_words",
        help=f"The word each step's candidates would make, worked out when asked: each continued over the "
        f"{config.tgt_vocab_size:,} pieces costs more than the decode itself at this size.",
    ):
        with st.spinner("Continuing each step's candidates into the words they would make ..."):
            candidate_words = models.candidate_words_cached(
                explored.checkpoint, explored.identity, _result=explored.result
            )
    return shown, candidate_words


def encoder_lens(explored: Explored) -> tuple[list[LayerTranslation], LogitLens] | None:
    """DecoderLens, where the visitor asks for it: what each encoder layer already says (a decode a layer), drawn in
    the step view's lens."""
    layers = explored.checkpoint.model.config.n_encoder_layers
    if not st.toggle(
        "What each encoder layer says",
        key="encoder_lens",
        help=f"DecoderLens: the decoder reads each of the {layers} encoder layers' output in place of the last one's "
        "and translates from it; the step view's lens then reads the encoder's layers at each step. A decode a layer.",
    ):
        return None
    with st.spinner(f"Translating from each of the {layers} encoder layers ..."):
        return models.decoder_lens_cached(explored.checkpoint, explored.identity, _result=explored.result)


def word_start_note(explored: Explored) -> None:
    """What the lone word start and the continuing piece mean, where either shows."""
    candidates = {explored.checkpoint.tokenizer.id_to_piece(i) for i in explored.result.topk_ids.flatten().tolist()}
    if WORD_START in {*explored.result.src_pieces, *explored.result.tgt_pieces, *candidates}:
        st.caption(
            f"{SPACE}: the start of a word alone, its letters to come as the next pieces (the vocabulary has "
            f"no piece that starts the word with them). {CONTINUES_WORD}: a piece that carries on the word "
            "before it."
        )


def answer(explored: Explored, action: StepAction) -> None:
    """What the visitor asked of the step view: another page at this step, a what-if branch, a beam hypothesis, why
    this token (Cause)."""
    session = st.session_state
    session.step, session.stepped = action.step, True
    if action.page is not None:
        st.switch_page(action.page)
    if action.name == "why":
        ask_cause(explored, action.step)
    if action.name == "what_if":
        taken = session.get("branch_from", ()) if explored.result is not explored.original else ()
        with st.spinner("Decoding the branch ..."):
            take_branch(explored.checkpoint, (*taken, (action.step, action.token)))
        st.rerun()
    if action.name == "beam_node":  # the tree is the original beam search's: its branches start from it
        with st.spinner("Decoding the branch ..."):
            take_prefix(explored.checkpoint, explored.result.beam_tree.prefix(action.node))
        session.scroll_to_output = True  # the tree, far down the page, is gone: the branch's output and "Showing"
        st.rerun()
    st.switch_page("pages/attention.py")


def teacher_forcing(explored: Explored) -> None:
    """The model run on a translation the visitor gives, beside its own: probabilities and cross-attention."""
    session = st.session_state
    with st.expander("Teacher forcing: run the model on a translation you give", expanded=bool(session.get("target"))):
        with st.form("teacher_forcing", border=False):
            st.text_input(
                "Target translation (a reference, or a wrong one)", key="target", max_chars=keys.MAX_CHARACTERS
            )
            st.form_submit_button("Run on this target")
        target = session.get("target", "")
        if target.strip():
            try:
                forced = models.teacher_force_cached(
                    explored.checkpoint, explored.checkpoint_key, explored.text, target
                )
            except DecodeInputError as error:
                st.warning(literal(str(error)))
            else:
                layer_column, head_column = st.columns(2)
                layers, heads = forced.cross.shape[:2]
                if not 1 <= session.get("tf_layer", layers) <= layers:  # the last layer first, or another model's
                    session.tf_layer = layers
                layer = layer_column.slider("Layer", 1, layers, key="tf_layer") - 1  # its value the session's alone
                choices = [MEAN_OVER_HEADS, *head_names(heads)]
                chosen = head_column.selectbox("Head", choices, key="tf_head")
                head = None if chosen == MEAN_OVER_HEADS else choices.index(chosen) - 1
                free_column, forced_column = st.columns(2)
                runs = ((free_column, explored.result, "free decoding"), (forced_column, forced, "teacher forcing"))
                for column, result, name in runs:
                    with column:
                        st.markdown(f"**{name}** · {literal(result.text)}")
                        probabilities = result.token_probs.numpy()
                        show(
                            token_probabilities(
                                result.tgt_pieces, probabilities, f"{name}: probability of each token", result.forced
                            ),
                            key=f"tf_probs_{name}",
                        )
                        view = attention_view(result, "cross", words=session.get("words", False))
                        title = f"{name}: cross-attention, {layer_name(layer)}, {chosen}"
                        weights = view.mean_over_heads()[layer] if head is None else view.maps[layer, head]
                        show(
                            attention_heatmap(weights, view.query_pieces, view.key_pieces, title),
                            key=f"tf_cross_{name}",
                        )


def edit_controls(explored: Explored) -> tuple[AttentionEdit, dict[str, str]]:
    """The step view's attention edit as the visitor sets it (a link's first), and the link's parameters for it."""
    session, result = st.session_state, explored.result
    config = explored.checkpoint.model.config
    spans = word_spans(result.src_pieces)
    # Each word, then the words with punctuation at their ends without it ("tired" cut, its "." left): after every
    # word, so that a link's words keep their numbers and masks
    cores = punctuation_cores(result.src_pieces, spans)
    names = [str(word + 1) for word in range(len(spans))] + [f"{word + 1}w" for word, _ in cores]
    spans += [span for _, span in cores]
    labels = [readable(label) for label in word_labels(result.src_pieces, spans)]
    words = list(range(len(spans)))

    def word_name(word: int) -> str:
        return labels[word] if labels.count(labels[word]) == 1 else f"{labels[word]} (word {word + 1})"

    layers = list(range(config.n_decoder_layers))
    heads = [None, *((layer, head) for layer in layers for head in range(config.n_heads))]
    if session.get("knockout_source") != (explored.checkpoint_key, tuple(result.src_ids)):  # another sentence or model
        session.knockout_source = (explored.checkpoint_key, tuple(result.src_ids))
        for name in ("knockout_words", "knockout_layers", "knockout_pin", "knockout_pin_word"):
            session.pop(name, None)
    url.many_from_link("knockout_words", "cut", words, name=names.__getitem__)
    if not url.many_from_link("knockout_layers", "cut_layers", layers, name=lambda layer: str(layer + 1)):
        session.setdefault("knockout_layers", layers)
    url.from_link("knockout_pin", "pin", heads, name=lambda pin: "" if pin is None else f"{pin[0] + 1}.{pin[1] + 1}")
    url.from_link("knockout_pin_word", "pin_to", words, name=names.__getitem__)
    step_column, blocked_column, layers_column = st.columns([1, 2, 1])
    steps = list(range(result.steps))
    piece = [readable(p) for p in result.tgt_pieces]
    step_column.selectbox("At step", steps, format_func=lambda s: f"{s + 1} · {piece[s]}", **keys.shared("step"))
    blocked = blocked_column.multiselect("Block these source words", words, format_func=word_name, key="knockout_words")
    chosen_layers = layers_column.multiselect(
        "in decoder layers", layers, format_func=lambda layer: f"{layer + 1}", key="knockout_layers"
    )
    pin_column, word_column = st.columns(2)
    pin = pin_column.selectbox(
        "Pin one cross-attention head",
        heads,
        format_func=lambda pin: "no head pinned" if pin is None else f"{layer_name(pin[0])}, head {pin[1] + 1}",
        key="knockout_pin",
    )
    pin_word = (
        None
        if pin is None
        else word_column.selectbox("to the word", words, format_func=word_name, key="knockout_pin_word")
    )
    positions = tuple(p for word in blocked for p in range(*spans[word]))
    pins = () if pin_word is None else (Pin(pin[0], pin[1], tuple(range(*spans[pin_word]))),)
    edit = AttentionEdit(positions, tuple(chosen_layers), pins)
    linked = {"cut": url.choices_text(blocked, words, name=names.__getitem__)} if blocked else {}
    if chosen_layers != layers:
        linked["cut_layers"] = url.choices_text(chosen_layers, layers, name=lambda layer: str(layer + 1))
    if pin_word is not None:
        linked |= {"pin": f"{pin[0] + 1}.{pin[1] + 1}", "pin_to": names[pin_word]}
    return edit, linked


def candidates_line(tokenizer: TokenizerBase, result: DecodeResult, step: int) -> str:
    """A step's five most probable next tokens with their probabilities, as a line."""
    pairs = zip(result.topk_ids[step].tolist()[:5], result.topk_probs[step].tolist()[:5])
    return " · ".join(f"{literal(readable(tokenizer.id_to_piece(i)))} {p:.2f}" for i, p in pairs)


def attention_edit(explored: Explored) -> dict[str, str]:
    """Knockout and pinning from the step view (Geva et al. 2023): the step's candidates and the rest of the
    translation as the model writes them with the decoder's cross-attention edited, beside the original; the
    link's parameters for the edit."""
    session = st.session_state
    linked_edit = {"cut", "pin"} & set(session.get("url_page", {}))
    asked = linked_edit or session.get("knockout_words") or session.get("knockout_pin") is not None
    # Once opened by an edit it stays open: the last word unblocked or the pin undone folded it mid-experiment
    session.knockout_opened = bool(asked or session.get("knockout_opened"))
    with st.expander(
        "Knockout: cut source words from the decoder, or pin a head to one word", expanded=session.knockout_opened
    ):
        st.caption(
            "A blocked word's attention score is set to −∞ before the softmax in every head of the layers chosen, "
            "so it gets no weight and the other words share what it had; a pinned head looks at its word only. "
            "The edit holds at every step; the output before the step is kept as it was, the rest decoded greedily."
        )
        edit, linked = edit_controls(explored)
        if edit.empty:
            st.caption("Choose source words to block, or a head to pin, to see what the model then writes.")
            return linked
        step = session.step
        with st.spinner("Decoding with the attention edited ..."):
            edited = models.knockout_cached(explored.checkpoint, explored.identity, step, edit, _result=explored.result)
        tokenizer, original = explored.checkpoint.tokenizer, explored.result
        before, after = (literal(readable(r.tgt_pieces[step])) if step < r.steps else "" for r in (original, edited))
        said = "still writes" if before == after else f"now writes **{after}** where it wrote"
        same_after = original.tgt_ids[step + 1 :] == edited.tgt_ids[step + 1 :]
        rest = "the rest of the translation is as it was" if same_after else "what follows changes (below)"
        st.markdown(f"At step {step + 1} the model {said} **{before}**; {rest}.")
        for column, result, name in zip(st.columns(2), (original, edited), ("As it was", "With the edit")):
            column.markdown(f"**{name}** · {literal(result.text)}")
            if step < result.steps:
                column.caption(f"Candidates at step {step + 1}: {candidates_line(tokenizer, result, step)}")
    return linked


def ask_cause(explored: Explored, step: int) -> None:
    """The Cause page opened from the step view asking why the step's token and not the likeliest other one, its
    fields filled in as far as they can be (the corrupted sentence is the visitor's to write): one click, where it
    took four in presentation mode (issue 83). The foil is left out where it is not in the target's form."""
    result, tokenizer, session = explored.result, explored.checkpoint.tokenizer, st.session_state
    chosen = int(result.tgt_ids[step])
    others = [int(i) for i in result.topk_ids[step] if int(i) != chosen]
    target = tokenizer.id_to_piece(chosen)
    foil = tokenizer.id_to_piece(others[0]) if others else ""
    if not foil or is_special(foil) or target.startswith(WORD_START) != foil.startswith(WORD_START):
        foil = ""  # a foil is read in the target's form: a word's first piece, or a piece inside a word
    session.cause_target, session.cause_foil = target.removeprefix(WORD_START), foil.removeprefix(WORD_START)
    session.cause_corrupt = session.get("cause_corrupt", "")  # the link's fields are not read over these
    st.switch_page("pages/cause.py")


def page(explored: Explored) -> None:
    config = explored.checkpoint.model.config
    # Computed before anything of the result is written, so that the new output and its step view appear together;
    # under a spinner, as the decode before it: after Translate the old page stood faded up to 12 s with no word.
    with st.spinner("Reading the translation: each step's candidates and how much each word drew on the source ..."):
        candidate_words = (
            models.candidate_words_cached(explored.checkpoint, explored.identity, _result=explored.result)
            if worked_out_at_open(config)
            else None
        )
        contributions = models.contributions_cached(explored.checkpoint, explored.identity, _result=explored.result)
    header(explored)
    words_column, content_column = st.columns(2)
    words = words_toggle(words_column)
    content = content_toggle(content_column, note=" Here: the step view's two maps.")
    layers, linked_layers = layer_window(explored)
    step = keys.clamp_index("step", explored.result.steps)
    shown, candidate_words = asked_for(explored, candidate_words)
    decoder_lens = encoder_lens(explored)
    presenting, lens = bool(st.session_state.get("presentation")), tuned_lens(explored)
    action = step_player(
        shown,
        explored.checkpoint.tokenizer,
        explored.identity,
        step,
        words,
        presenting,
        lens,
        candidate_words,
        contributions,
        content,
        layers,
        decoder_lens,
    )
    word_start_note(explored)
    if action is not None:
        answer(explored, action)
    linked = attention_edit(explored)
    url.write_url(linked | ({"layers": linked_layers} if linked_layers else {}))
    teacher_forcing(explored)


page(frame.draw(__file__))
