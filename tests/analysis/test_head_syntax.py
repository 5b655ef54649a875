"""Syntactic heads against gold parses: the treebank read as the model reads its text, synthetic heads made for a
relation or a position, and the batched word maps against the explorer's own decode merged into words."""

from __future__ import annotations

import gzip
from collections import Counter

import conllu
import numpy as np
import pandas as pd
import pytest
from helpers import measured, run_cli

from transformer.analysis.heads.syntax import (
    READINGS,
    SyntaxCounts,
    add_parsed_sentence,
    parsed_sentence,
    read_treebank,
    roles_of,
    syntactic_roles,
)
from transformer.analysis.words import merge_words, word_spans
from transformer.decoding.greedy import decode_with_chooser
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint

COLUMNS = "ID FORM LEMMA UPOS XPOS FEATS HEAD DEPREL DEPS MISC".split()


def conllu_text(*sentences: list[tuple]) -> str:
    """CoNLL-U of sentences given as (id, form, upos, head, deprel[, misc]) rows."""
    blocks = []
    for rows in sentences:
        lines = []
        for row in rows:
            ident, form, upos, head, deprel, *misc = row
            lines.append(
                "\t".join([ident, form, form.lower(), upos, "_", "_", head, deprel, "_", misc[0] if misc else "_"])
            )
        blocks.append("\n".join(lines) + "\n")
    return "\n".join(blocks) + "\n"


# "The old man didn't sleep well, the cat was fed quickly." in UD's way: a multiword token, SpaceAfter=No, an empty
# node, subtyped relations.
SENTENCE = [
    ("1", "The", "DET", "3", "det"),
    ("2", "old", "ADJ", "3", "amod"),
    ("3", "man", "NOUN", "6", "nsubj"),
    ("4-5", "didn't", "_", "_", "_"),
    ("4", "did", "AUX", "6", "aux"),
    ("5", "n't", "PART", "6", "advmod"),
    ("6", "sleep", "VERB", "0", "root"),
    ("7", "well", "ADV", "6", "advmod", "SpaceAfter=No"),
    ("8", ",", "PUNCT", "12", "punct"),
    ("8.1", "was", "AUX", "_", "_"),
    ("9", "the", "DET", "10", "det"),
    ("10", "cat", "NOUN", "12", "nsubj:pass"),
    ("11", "was", "AUX", "12", "aux:pass"),
    ("12", "fed", "VERB", "6", "conj"),
    ("13", "quickly", "ADV", "12", "advmod", "SpaceAfter=No"),
    ("14", ".", "PUNCT", "6", "punct"),
]


def test_a_treebank_sentence_is_read_as_the_models_text_with_its_arcs_between_whitespace_words():
    parsed = parsed_sentence(conllu.parse(conllu_text(SENTENCE))[0])
    assert parsed.text == "The old man didn't sleep well, the cat was fed quickly."
    # whitespace words: The(0) old(1) man(2) didn't(3) sleep(4) well,(5) the(6) cat(7) was(8) fed(9) quickly.(10)
    assert set(parsed.arcs) == {
        ("amod", 1, 2),
        ("nsubj", 2, 4),
        ("advmod", 5, 4),  # "well," holds punctuation beside its word: kept
        ("nsubj", 7, 9),  # nsubj:pass is nsubj
        ("advmod", 10, 9),
    }  # n't → sleep is left out: "didn't" holds two words


def test_read_treebank_takes_a_gzipped_file_and_a_limit(tmp_path):
    path = tmp_path / "tiny.conllu.gz"
    path.write_bytes(gzip.compress(conllu_text(SENTENCE, SENTENCE, SENTENCE).encode()))
    assert len(read_treebank(path)) == 3 and len(read_treebank(path, 2)) == 2


# Three sentences as whitespace words and arcs; each head word has one dependent, so that a head reading either
# direction perfectly exists.
ARCS = [
    [("amod", 1, 2), ("nsubj", 2, 3), ("advmod", 4, 5)],
    [("nsubj", 0, 1), ("obj", 3, 2), ("amod", 2, 3)],
    [("advmod", 0, 1), ("nsubj", 1, 2), ("obj", 5, 4), ("amod", 4, 6)],
]
WORDS = [6, 5, 7]


def one_hot_rows(size: int, targets: dict[int, int]) -> np.ndarray:
    rows = np.full((size, size), 0.01)
    for query in range(size):
        rows[query, targets.get(query, query)] = 1.0
    return rows / rows.sum(-1, keepdims=True)


def test_synthetic_heads_made_for_the_relations_score_one_and_a_previous_word_head_scores_its_offsets_share():
    counts = SyntaxCounts.empty(1, 3)
    for arcs, size in zip(ARCS, WORDS):
        to_head = one_hot_rows(size, {dependent: governor for _, dependent, governor in arcs})
        from_head = one_hot_rows(size, {governor: dependent for _, dependent, governor in arcs})
        previous = one_hot_rows(size, {query: query - 1 for query in range(1, size)})
        add_parsed_sentence(counts, np.stack([to_head, from_head, previous])[None], arcs)
    roles = roles_of(counts)
    for reading in READINGS:
        relation, direction = reading.split("_", 1)
        offsets = Counter(
            (g - d) if direction == "to_head" else (d - g) for arcs in ARCS for r, d, g in arcs if r == relation
        )
        assert roles.arcs[reading] == sum(offsets.values())
        made_for = 0 if direction == "to_head" else 1
        assert roles.accuracy[reading][0, made_for] == 1.0, reading
        assert roles.accuracy[reading][0, 2] == pytest.approx(offsets[-1] / roles.arcs[reading]), reading
        assert roles.baseline[reading] == pytest.approx(max(offsets.values()) / roles.arcs[reading]), reading
        if roles.baseline_offset[reading] == -1:  # the previous word is this relation's best position
            assert roles.accuracy[reading][0, 2] == pytest.approx(roles.baseline[reading])
    heads = {(reading, head) for reading, _, head, _, _ in roles.syntactic()}
    assert all(
        (reading, 0 if reading.endswith("to_head") else 1) in heads
        for reading in READINGS
        if roles.baseline[reading] <= 0.9
    )
    assert not any(head == 2 for _, head in heads)  # a positional head is no syntactic one


def test_the_batched_word_maps_give_the_accuracy_of_the_explorers_own_maps_merged_into_words():
    """syntactic_roles pads sentences into batches and merges pieces with alignment.word_rows; against it, each
    sentence decoded alone as the explorer does, merged with the word view's merge_words, argmax by hand."""
    checkpoint = load_checkpoint(DEFAULT_CHECKPOINT)
    texts = [
        "The old man sleeps.",
        "My sister quickly bought a very expensive car yesterday.",
        "They watched the red sunset.",
    ]
    arcs = [
        (("amod", 1, 2), ("nsubj", 2, 3)),
        (("nsubj", 1, 3), ("advmod", 2, 3), ("advmod", 5, 6), ("amod", 6, 7), ("obj", 7, 3)),
        (("nsubj", 0, 1), ("amod", 3, 4), ("obj", 4, 1)),
    ]
    from transformer.analysis.heads.syntax import ParsedSentence

    found = syntactic_roles(checkpoint.model, checkpoint.tokenizer, [ParsedSentence(t, a) for t, a in zip(texts, arcs)])
    config = checkpoint.model.config
    hits = {reading: np.zeros((config.n_encoder_layers, config.n_heads)) for reading in READINGS}
    for text, sentence_arcs in zip(texts, arcs):
        result = decode_with_chooser(checkpoint.model, checkpoint.tokenizer, text, max_new_tokens=1)
        spans = word_spans(result.src_pieces)[:-1]  # the words, without </s>
        words = merge_words(result.encoder_self.numpy(), spans, spans)  # (L, H, W, W), over the words only
        for relation, dependent, governor in sentence_arcs:
            hits[f"{relation}_to_head"] += words[..., dependent, :].argmax(-1) == governor
            hits[f"{relation}_from_head"] += words[..., governor, :].argmax(-1) == dependent
    for reading in READINGS:
        total = sum(1 for a in arcs for r, _, _ in a if r == reading.split("_")[0])
        np.testing.assert_allclose(found.accuracy[reading], hits[reading] / total, err_msg=reading)


def test_heads_command_writes_each_encoder_heads_syntactic_accuracy_and_baseline(tmp_path):
    treebank, src, out = tmp_path / "tiny.conllu", tmp_path / "src.txt", tmp_path / "heads.csv"
    treebank.write_text(conllu_text(SENTENCE, SENTENCE))
    src.write_text("The cat sleeps.\nThe dog runs.\n")
    done = run_cli("heads", "--src", str(src), "--measure", "gradient", "--treebank", str(treebank), "--out", str(out))
    assert done.returncode == 0, done.stderr
    table = pd.read_csv(out)
    encoder = table[table.kind == "encoder"]
    for reading in READINGS:
        assert (
            encoder[f"syntactic_{reading}"].between(0, 1).all()
            and encoder[f"syntactic_baseline_{reading}"].between(0, 1).all()
        )
        assert table[table.kind != "encoder"][f"syntactic_{reading}"].isna().all()
    assert "syntactic accuracy over 2 treebank sentences" in done.stdout and "amod_to_head: 2 arcs" in done.stdout
    missing = run_cli("heads", "--src", str(src), "--treebank", str(tmp_path / "none.conllu"), "--out", str(out))
    assert missing.returncode == 2 and "none.conllu" in missing.stderr


@pytest.mark.parametrize(
    ("lines", "said"),
    [
        (["a sentence of plain text, not CoNLL-U"], "not CoNLL-U at sentence 1"),
        (["1\tThe\tthe\tDET\t_\t_\tx\tdet\t_\t_"], "not CoNLL-U at sentence 1"),
        (
            ["1\tcats\tcat\tNOUN\t_\t_\t0\troot\t_\t_", "", "1\tThe\tthe\tDET\t_\t_\t5\tnsubj\t_\t_"],
            "sentence 2: word 1's head 5",
        ),
    ],
)
def test_lines_that_are_not_a_treebank_are_refused_saying_where(lines, said):
    from transformer.analysis.heads.syntax import TreebankError, parse_treebank

    with pytest.raises(TreebankError, match=said):
        parse_treebank(lines)


def word_line(ident: str, form: str, head: str = "0", misc: str = "_") -> str:
    return "\t".join([ident, form, form, "NOUN", "_", "_", head, "root" if head == "0" else "dep", "_", misc])


# Each a few bytes to a few MB of text whose sentence would build far more than it holds: a multiword token over 10^7
# words built a dict of that many (+960 MB; 10^8 was killed past 8 GB), FEATS of 9 KB a word held 4 GB over 9,000.
HOSTILE_SENTENCES = {
    "a multiword range past its words": (
        [word_line("1-10000000", "x").replace("NOUN", "_"), word_line("1", "x")],
        "the multiword token 1-10000000 spans more than its 1 words",
    ),
    "a word's line of 9 KB": ([word_line("1", "x", misc="A=" + "b" * 9_000)], "a word's line is over 4,000"),
    "600 words": ([word_line(str(i), "x", str(i - 1)) for i in range(1, 601)], "over 512 words"),
    "a text of 22,800 characters": (
        [word_line(str(i), "y" * 1_900, str(i - 1)) for i in range(1, 13)],
        "its text is over 20,000 characters",
    ),
    "a megabyte of comments": (["# " + "c" * 19_000] * 60 + [word_line("1", "x")], "or 1,048,576 characters"),
}


@pytest.mark.parametrize("name", HOSTILE_SENTENCES)
def test_a_treebank_sentence_past_its_bounds_is_refused_in_one_line_before_it_is_built(name):
    from transformer.analysis.heads.syntax import TreebankError, parse_treebank

    lines, said = HOSTILE_SENTENCES[name]
    good = [word_line("1", "cats"), ""]
    with measured() as cost, pytest.raises(TreebankError) as refused:
        parse_treebank(good + lines)
    message = str(refused.value)
    assert message.startswith("sentence 2: ") and said in message and len(message) < 100, message
    assert cost.peak_growth_mb < 50, cost


def test_a_treebank_is_read_only_as_far_as_the_sentences_asked_for(tmp_path):
    """A gzip of a million sentences (about 100 MB of text) costs what the first few hold: it was read whole."""
    path = tmp_path / "bomb.conllu.gz"
    sentence = conllu_text(SENTENCE).encode()
    path.write_bytes(gzip.compress(sentence * 1_000_000, compresslevel=9))
    with measured() as cost:
        assert len(read_treebank(path, 5)) == 5
    assert cost.peak_growth_mb < 30, cost
