"""Corpus mode: translate a file, score each sentence, and jump from any row to its attention."""

import pandas as pd
import sacrebleu
import streamlit as st
from sacrebleu.metrics import BLEU
from streamlit.runtime.uploaded_file_manager import UploadedFile

from transformer.analysis.attribution.measures import corpus_agreement
from transformer.decoding.strategies import DecodeSettings
from transformer.decoding.translate import translate_texts
from transformer.io.export import csv_text
from transformer.model.heads import head_name, layer_name
from ui.services import uploads
from ui.services.explorer import Explored
from ui.services.work import TRANSLATE_BATCH, heavy_job
from ui.state import keys, url
from ui.widgets import frame
from ui.widgets.progress import ProgressBar
from ui.widgets.text import literal

MAX_SENTENCES = 2000
MAX_AGREEMENT_SENTENCES = 200  # integrated gradients cost about two seconds a sentence

INTRO = (
    "Translate a file (a test set, say), with its references to score each sentence; pick a row to "
    "open that sentence in the decode explorer."
)


def the_form() -> tuple[bool, UploadedFile | None, UploadedFile | None, int, int]:
    """The file, its references, how many sentences and the beam; whether Translate was pressed."""
    with st.form("corpus"):
        # Any name (test.en, val.fr.gz, ...): the content is checked, as text or gzipped text, when it is read.
        source_file = st.file_uploader("Source sentences, one a line (any text file, or gzipped)", key="corpus_src")
        reference_file = st.file_uploader("References, line by line (optional)", key="corpus_ref")
        limit = st.number_input("Sentences (from the top)", 1, MAX_SENTENCES, 200, key="corpus_limit")
        beam = st.slider("Beam width (1 = greedy)", 1, 8, 1, key="corpus_beam")
        run = st.form_submit_button("Translate the file")
    return run, source_file, reference_file, int(limit), beam


def translate_file(
    explored: Explored, source_file: UploadedFile | None, reference_file: UploadedFile | None, limit: int, beam: int
) -> None:
    """The file translated, each sentence scored where references are given, kept in the session (said where the
    files cannot be used)."""
    session, checkpoint = st.session_state, explored.checkpoint
    try:
        sources = uploads.uploaded_lines(source_file, limit) if source_file else None
        references = uploads.uploaded_lines(reference_file, len(sources)) if reference_file and sources else None
    except ValueError as error:
        st.error(literal(str(error)))
        sources = None
    if sources is None:
        st.warning("Choose a source file.")
    elif not any(line.strip() for line in sources):
        st.warning(literal(f"{source_file.name} has no sentences: it is empty or only blank lines."))
    elif references is not None and len(references) != len(sources):
        st.error(f"The references have {len(references)} lines for {len(sources)} source lines: not a parallel pair.")
    else:
        # Sentences go shortest first in small batches; a sentence's cost grows with its length squared (its
        # steps, each reading all before it).
        # Blank lines are not translated (nor counted by translate_texts), so the bar counts only the others.
        costs = sorted(len(line) ** 2 for line in sources if line.strip())
        progress = ProgressBar("Translating", len(costs), "sentences", costs, stop_key="corpus_stop")
        done = [0]

        def advance(count: int) -> None:  # translate_texts reports sentences finished since the last call
            done[0] += count
            progress(done[0])

        outputs = translate_texts(
            checkpoint.model,
            checkpoint.tokenizer,
            sources,
            DecodeSettings.greedy_or_beam(beam),
            batch_size=TRANSLATE_BATCH,
            progress=advance,
        )
        progress.close()
        table = pd.DataFrame({"source": sources, "translation": outputs})
        if references is not None:
            table["reference"] = references
            table.insert(0, "BLEU", [sacrebleu.sentence_bleu(o, [r]).score for o, r in zip(outputs, references)])
            table.insert(1, "chrF", [sacrebleu.sentence_chrf(o, [r]).score for o, r in zip(outputs, references)])
            # the scores first: after three columns of sentences they sat past the table's right edge
            metric = BLEU()
            score = f"corpus BLEU {metric.corpus_score(outputs, [references]).score:.2f} ({metric.get_signature()})"
        else:
            score = None
        session.corpus_run = keys.CorpusRun(explored.checkpoint_key, table, score)


def results(stored: keys.CorpusRun) -> None:
    """The translated file's table, its download, and a row to open in the decode explorer."""
    session = st.session_state
    table = stored.table
    if stored.score:
        st.markdown(stored.score)
    st.caption("Click a column header to sort (e.g. BLEU, to find the worst sentences); select a row to explore it.")
    event = st.dataframe(
        table,
        width="stretch",
        height=420,
        on_select="rerun",
        selection_mode="single-row",
        key="corpus_rows",
        column_config={
            "BLEU": st.column_config.NumberColumn(format="%.1f"),
            "chrF": st.column_config.NumberColumn(format="%.1f"),
        },
    )
    st.download_button(
        "Table as CSV",
        csv_text(table, index=False),
        file_name="corpus.csv",
        mime="text/csv",
        on_click="ignore",
        key="corpus_csv",
    )
    selected = event.selection.rows
    row = (
        st.number_input(
            "Row to explore (selecting a row above fills it in)",
            1,
            len(table),
            selected[0] + 1 if selected else 1,
            key=f"corpus_row_{selected[:1]}",
        )
        - 1
    )
    if st.button(f"Explore row {row + 1} in the decode explorer", type="primary", key="corpus_open"):
        session.text = session.applied_text = table.iloc[row]["source"][: keys.MAX_CHARACTERS]
        session.step = 0
        st.switch_page("pages/explorer.py")


def agreement(explored: Explored, table: pd.DataFrame) -> None:
    """Each head's agreement with integrated gradients over the file's first sentences, computed on request."""
    session, checkpoint = st.session_state, explored.checkpoint
    st.subheader("Which heads agree with the gradients, over the file")
    st.caption(
        "For each sentence (decoded greedily): Spearman's rank correlation of each head's cross-attention row "
        "with |integrated gradients| over the source, averaged over its steps, then over the sentences. "
        "The bar says how long is left, from the pace of the sentences done."
    )
    sample = st.number_input(
        "Sentences (from the top)",
        1,
        min(MAX_AGREEMENT_SENTENCES, len(table)),
        min(20, len(table)),
        key="agreement_sentences",
    )
    if st.button("Compute the agreement", key="agreement_run"):
        sentences = table["source"].tolist()[: int(sample)]
        costs = [len(s) ** 2 for s in sentences]
        progress = ProgressBar("Integrated gradients", len(sentences), "sentences", costs, stop_key="agreement_stop")
        with heavy_job("attributions"):  # one of the server's slots; a visitor who leaves stops it
            try:
                values, used = corpus_agreement(checkpoint.model, checkpoint.tokenizer, sentences, progress=progress)
                session.corpus_agreement = keys.CorpusAgreement(explored.checkpoint_key, used, values)
            except ValueError as error:
                st.warning(literal(str(error)))
        progress.close()
    found = session.get("corpus_agreement")
    if found and found.checkpoint_key == explored.checkpoint_key:
        layers, heads = found.agreement.shape
        ranked = pd.DataFrame(
            {"agreement (Spearman)": found.agreement.reshape(-1)},
            index=pd.Index(
                [f"{layer_name(i)} · {head_name(h)}" for i in range(layers) for h in range(heads)], name="head"
            ),
        ).sort_values("agreement (Spearman)", ascending=False)
        st.caption(f"Over {found.sentences} sentences; click the column to sort.")
        st.dataframe(ranked.style.format("{:.2f}", na_rep="—"), width="stretch", height=320, key="agreement_ranked")


def page(explored: Explored) -> None:
    st.markdown(INTRO)
    run, source_file, reference_file, limit, beam = the_form()
    if run:
        translate_file(explored, source_file, reference_file, limit, beam)
    stored = st.session_state.get("corpus_run")
    if stored and stored.checkpoint_key == explored.checkpoint_key:
        results(stored)
        agreement(explored, stored.table)
    url.write_url()


page(frame.draw(__file__))
