"""Word alignments from the model, scored against gold ones: AER by hand, conventions, pieces to words, the CLI."""

from __future__ import annotations

import csv
import json
import random
from pathlib import Path

import numpy as np
import pytest
from helpers import array, figure, markdown, start

from transformer.analysis.alignment import (
    Counts,
    GoldAlignment,
    GoldError,
    Method,
    aer_grid,
    align_corpus,
    argmax_links,
    counts,
    format_pharaoh,
    parse_pharaoh,
    reversed_gold,
    threshold_links,
    with_intersection,
    word_rows,
)
from transformer.cli import main
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint
from transformer.io.export import csv_text
from transformer.training.synthetic import WORDS

DATA = Path(__file__).parents[1] / "data" / "alignment"  # 24 caption pairs aligned by hand, sure and possible links


@pytest.fixture(scope="module")
def captions():
    """The caption model: the hand-aligned pairs are captions, and the pieces below are its vocabulary's."""
    return load_checkpoint(DEFAULT_CHECKPOINT.with_name("en-fr-captions.safetensors"))


@pytest.fixture(scope="module")
def default():
    """The model the app opens on."""
    return load_checkpoint(DEFAULT_CHECKPOINT)


@pytest.fixture(scope="module")
def reversal():
    return load_checkpoint(DEFAULT_CHECKPOINT.with_name("reverse.safetensors"))


def gold(sure: set, possible: set = frozenset()) -> GoldAlignment:
    return GoldAlignment(frozenset(sure), frozenset(sure | possible))


def test_aer_of_a_three_sentence_example_equals_the_hand_computed_value():
    golds = [gold({(0, 0), (1, 1)}, {(2, 1)}), gold({(0, 1)}, {(1, 0)}), gold({(0, 0), (1, 1), (2, 2)})]
    predicted = [{(0, 0), (2, 1), (1, 2)}, {(0, 1)}, set()]
    total = sum((counts(frozenset(p), g) for p, g in zip(predicted, golds)), Counts())
    # |A| = 3 + 1 + 0, |S| = 2 + 1 + 3, |A ∩ S| = 1 + 1 + 0, |A ∩ P| = 2 + 1 + 0
    assert total.astuple() == (4, 6, 2, 3)
    assert total.aer == pytest.approx(1 - (2 + 3) / (4 + 6))  # 0.5
    assert (total.precision, total.recall) == (pytest.approx(3 / 4), pytest.approx(2 / 6))


def test_pharaoh_links_sure_and_possible_counted_from_zero_or_one():
    lines = ["0-0 1p1 2?0", "1-2"]
    golds, one_based = parse_pharaoh(lines, [3, 2], [2, 3])
    assert not one_based  # word 0 is named
    assert golds[0] == gold({(0, 0)}, {(1, 1), (2, 0)}) and golds[1] == gold({(1, 2)})
    shifted, one_based = parse_pharaoh(["1-1 2p2 3?1", "2-3"], [3, 2], [2, 3])
    assert one_based and shifted == golds  # detected: no link names word 0
    given, _ = parse_pharaoh(["1-1"], [2], [2], one_based=False)
    assert given[0] == gold({(1, 1)})
    assert parse_pharaoh(["", ""], [1, 1], [1, 1])[0] == [gold(set())] * 2  # no links at all: 0-based, empty


@pytest.mark.parametrize(
    "lines, lengths, message",
    [
        (
            ["0-0", "0-5"],
            ([2, 2], [2, 2]),
            "line 2: target word 5 is out of range: the target line has 2 words, counted from 0",
        ),
        (["0-0"], ([1, 1], [1, 1]), "the gold file has 1 lines and the texts 2"),
        (["0-0 zero-one"], ([1], [1]), "line 1: 'zero-one' is not a link"),
        (["0:0"], ([1], [1]), "line 1: '0:0' is not a link"),
        (["3-1"], ([2], [2]), "line 1: source word 3 is out of range: the source line has 2 words, counted from 1"),
        (["0-" + "9" * 5000], ([1], [1]), "line 1: '0-99999999999999999999999999999999999999' is not a link"),
    ],
)
def test_a_gold_file_that_does_not_fit_gets_one_line_naming_where(lines, lengths, message):
    with pytest.raises(GoldError) as raised:
        parse_pharaoh(lines, *lengths)
    assert message in str(raised.value) and "\n" not in str(raised.value)


def test_pieces_meet_the_words_of_the_file_exactly(captions, reversal):
    tokenizer = captions.tokenizer
    text = "Un skateboarders , très noir: l'élève  mange « ça » 世界."
    ids, words = tokenizer.encode_words(text)
    assert ids == tokenizer.encode(text)
    pieces = [tokenizer.id_to_piece(i) for i in ids]
    by_word = [[p for p, w in zip(pieces, words) if index in w] for index in range(len(text.split()))]
    assert by_word[1] == ["▁skateboarder", "s"] and by_word[4] == ["▁noir", ":"]  # several pieces; punctuation glued on
    assert by_word[5] == ["▁l", "'", "é", "l", "è", "ve"] and by_word[2] == ["▁", ","]  # a lone mark: the next word's
    assert all(len(w) == 1 for w in words)
    ids, words = reversal.tokenizer.encode_words("six ten five ten ten")  # unknown words in a row: one piece
    assert ids == reversal.tokenizer.encode("six ten five ten ten") and words[-1] == range(3, 5)


def anti_diagonal_rows(words_per_piece: list[range], n_words: int, shift: int) -> np.ndarray:
    """Piece-level rows (decoder input positions x source pieces, end tokens included) whose row for target word j
    (row t + shift for each of its pieces t) is all on the first piece of source word n - 1 - j."""
    first_piece = {w: min(p for p, ws in enumerate(words_per_piece) if w in ws) for w in range(n_words)}
    size = len(words_per_piece) + 1
    rows = np.full((size, size), 0.01)
    for t, ws in enumerate(words_per_piece):
        rows[t + shift, first_piece[n_words - 1 - ws[0]]] = 1.0
    return rows / rows.sum(-1, keepdims=True)


@pytest.mark.parametrize("convention, shift", [("output", 0), ("input", 1)])
def test_a_reversing_map_aligns_word_i_with_n_minus_i_under_its_own_convention_only(captions, convention, shift):
    text = "skateboarders photographed unbelievably picturesque waterfalls ."  # words of several pieces
    ids, words = captions.tokenizer.encode_words(text)
    assert len(ids) > 8
    n = len(text.split())
    rows = anti_diagonal_rows(words, n, shift)
    reference = gold({(n - 1 - j, j) for j in range(n)})
    ends = [*words, range(0)]
    right = word_rows(rows, ends, ends, convention)
    other = word_rows(rows, ends, ends, "input" if convention == "output" else "output")
    assert counts(argmax_links(right), reference).aer == 0
    assert counts(threshold_links(right, 0.5), reference).aer == 0
    assert counts(argmax_links(other), reference).aer >= 1 / 3  # off by a piece: a word's other pieces stay in it
    assert np.allclose(right.sum(-1), 1)  # shares of the source words, the end token left out


def reversal_pairs(count: int, seed: int) -> tuple[list[str], list[str], list[GoldAlignment]]:
    """Number words (the reversal model's vocabulary), their reversal, and the gold linking word i to n - 1 - i."""
    rng = random.Random(seed)
    sources = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 7))) for _ in range(count)]
    targets = [" ".join(reversed(s.split())) for s in sources]
    return sources, targets, [gold({(i, len(s.split()) - 1 - i) for i in range(len(s.split()))}) for s in sources]


def test_the_reversal_models_best_head_aligns_under_one_convention_and_not_the_other(reversal):
    sources, targets, golds = reversal_pairs(30, seed=0)
    report = align_corpus(reversal.model, reversal.tokenizer, sources, targets, golds)
    best = report.scores[0]
    assert best.counts.aer < 0.12 and best.method.head is not None  # one head all but aligns
    flipped = Method(
        best.method.measure,
        best.method.layer,
        best.method.head,
        "output" if best.method.convention == "input" else "input",
        best.method.extraction,
    )
    scores = {score.method: score.counts.aer for score in report.scores}
    assert scores[flipped] > 0.75  # the same head read with the other convention is off by a word
    assert [row["aer"] for row in report.table()] == sorted(row["aer"] for row in report.table())
    assert len(report.links[best.method]) == len(sources) == len(report.aligned)


def reversal_files(directory: Path, count: int) -> list[str]:
    """reversal_pairs written as the three files `align` reads: their paths."""
    sources, targets, golds = reversal_pairs(count, seed=1)
    files = {"src.txt": sources, "tgt.txt": targets, "gold.txt": [format_pharaoh(g.sure) for g in golds]}
    for name, lines in files.items():
        (directory / name).write_text("\n".join(lines) + "\n")
    return [str(directory / name) for name in files]


def test_links_both_directions_agree_on_are_a_method_of_their_own(reversal):
    sources, targets, golds = reversal_pairs(20, seed=2)
    forward = align_corpus(reversal.model, reversal.tokenizer, sources, targets, golds)
    reverse = align_corpus(reversal.model, reversal.tokenizer, targets, sources, [reversed_gold(g) for g in golds])
    best, best_reverse = forward.scores[0], reverse.scores[0]  # reversing is its own reverse direction
    both = with_intersection(forward, reverse, golds)
    agreed = forward.links[both]
    for line, links in enumerate(agreed):
        assert links <= forward.links[best.method][line]
        assert links == forward.links[best.method][line] & {(i, j) for j, i in reverse.links[best_reverse.method][line]}
    score = next(s.counts for s in forward.scores if s.method == both)
    assert score.precision >= best.counts.precision and score.predicted <= best.counts.predicted
    assert [s.counts.aer for s in forward.scores] == sorted(s.counts.aer for s in forward.scores)


def test_align_with_a_reverse_model_on_the_command_line(tmp_path, capsys):
    src, tgt, links = reversal_files(tmp_path, 12)
    reverse = str(DEFAULT_CHECKPOINT.with_name("reverse.safetensors"))
    table = tmp_path / "t.json"
    assert (
        main(
            [
                "align",
                "--checkpoint",
                reverse,
                "--reverse-checkpoint",
                reverse,
                "--src",
                src,
                "--tgt",
                tgt,
                "--gold",
                links,
                "--table",
                str(table),
            ]
        )
        == 0
    )
    assert "both directions (" in capsys.readouterr().err
    assert sum(row["method"] == "both directions" for row in json.loads(table.read_text())) == 1


def align_example(*options: str, gold: Path = DATA / "gold.txt") -> list[str]:
    """`align` over the example pairs and their gold links, with more options."""
    return ["align", "--src", str(DATA / "en.txt"), "--tgt", str(DATA / "fr.txt"), "--gold", str(gold), *options]


def test_align_on_the_command_line_prints_the_ranking_and_writes_table_and_pharaoh(tmp_path, capsys):
    table, out = tmp_path / "table.csv", tmp_path / "links.txt"
    code = main(align_example("--limit", "6", "--table", str(table), "--out", str(out), "--top", "5"))
    printed = capsys.readouterr()
    assert code == 0 and "words counted from 0 (detected)" in printed.err
    lines = printed.out.splitlines()
    assert lines[0].split() == ["rank", "AER", "prec.", "recall", "method"] and len(lines) >= 7
    rows = list(csv.DictReader(table.open()))
    # conventions x extractions x (three measures x (heads + means): attention, its content only, value-weighted;
    # and ALTI+)
    assert len(rows) == 2 * 2 * (3 * (3 * 8 + 3) + 1)
    assert sum(row["method"] == "ALTI+" for row in rows) == 4
    assert [float(r["aer"]) for r in rows] == sorted(float(r["aer"]) for r in rows)
    assert lines[1].split()[1] == f"{float(rows[0]['aer']):.3f}"
    written = out.read_text().splitlines()
    assert len(written) == 6 and all(written)
    sources = (DATA / "en.txt").read_text().splitlines()[:6]
    parsed, _ = parse_pharaoh(
        written,
        [len(s.split()) for s in sources],
        [len(t.split()) for t in (DATA / "fr.txt").read_text().splitlines()[:6]],
        False,
    )
    assert all(
        len(links.sure) == len(t.split()) for links, t in zip(parsed, (DATA / "fr.txt").read_text().splitlines())
    )
    json_table = tmp_path / "table.json"
    assert main(align_example("--limit", "2", "--table", str(json_table))) == 0
    assert json.loads(json_table.read_text())[0]["rank"] == 1


def test_align_refuses_a_bad_gold_file_in_one_line(tmp_path, capsys):
    bad = tmp_path / "gold.txt"
    lines = (DATA / "gold.txt").read_text().splitlines()
    bad.write_text("\n".join([*lines[:2], "0-0 1-99", *lines[3:]]) + "\n")
    code = main(align_example(gold=bad))
    err = capsys.readouterr().err.strip().splitlines()
    assert code == 2 and err == [
        "error: line 3: target word 99 is out of range: the target line has 9 words, counted from 0"
    ]


def submit(at):
    return at.button(key="align_run").click().run(timeout=300)


def test_the_alignment_page_ranks_the_example_draws_the_grids_and_a_pairs_gold_links(default):
    at = start().switch_page("pages/alignment.py").run()
    at.checkbox(key="align_example").check()
    at = submit(at)
    assert not at.exception and not at.error
    sources, targets, lines = ((DATA / name).read_text().splitlines() for name in ("en.txt", "fr.txt", "gold.txt"))
    golds, _ = parse_pharaoh(lines, [len(s.split()) for s in sources], [len(t.split()) for t in targets])
    report = align_corpus(default.model, default.tokenizer, sources, targets, golds)
    expected = report.table()
    assert not [button for button in at.button if button.label == "Stop"]  # the work is done: nothing to stop
    shown = at.dataframe[0].value
    assert len(shown) == len(expected) and shown.iloc[0]["aer"] == pytest.approx(expected[0]["aer"])
    grids = [figure(at, index) for index in (0, 1)]
    assert [array(g["data"][0]["z"]).shape for g in grids] == [(3, 9), (3, 9)]  # layers x (heads + mean)
    assert "output convention" in grids[0]["layout"]["title"]["text"] and "input" in grids[1]["layout"]["title"]["text"]
    at.number_input(key="align_pair").set_value(3)
    at = at.run()
    pair = figure(at, 2)
    traces = {trace.get("name"): trace for trace in pair["data"]}
    assert len(traces["gold: sure"]["x"]) == len(golds[2].sure) and len(traces["gold: possible"]["x"]) == len(
        golds[2].possible - golds[2].sure
    )
    best = report.scores[0].method
    assert len(traces["extracted"]["x"]) == len(report.links[best][report.aligned.index(2)])  # the best method's
    if (best.convention, best.extraction) == ("output", "argmax"):
        assert len(traces["extracted"]["x"]) == len(targets[2].split())  # one link per target word
    assert "Le chat noir dort sur le canapé rouge" in markdown(at)

    at = at.switch_page("pages/heads.py").run()  # cross-attention by default: each head's AER beside its statistics
    frame = at.dataframe[0].value
    run = at.session_state["alignment_run"]
    for convention in ("output", "input"):
        expected_grid = aer_grid(run.report, "attention", convention, "argmax")[:, :-1]
        np.testing.assert_allclose(frame[f"aligns words (AER, {convention})"].to_numpy(), expected_grid.reshape(-1))
    assert any("alignment error rate on the example" in caption.value for caption in at.caption)


def test_the_alignment_page_names_the_line_of_a_bad_gold_file_and_a_pair_that_is_not_one():
    at = start().switch_page("pages/alignment.py").run()
    lines = (DATA / "gold.txt").read_text().splitlines()
    for key, content in (
        ("align_src", (DATA / "en.txt").read_bytes()),
        ("align_tgt", (DATA / "fr.txt").read_bytes()),
        ("align_gold", "\n".join([*lines[:4], "0-0 seven", *lines[5:]]).encode()),
    ):
        at.file_uploader(key=key).set_value((key + ".txt", content, "text/plain"))
    at = submit(at)
    shown = at.error[0].value  # as literal text: Markdown's characters escaped
    assert not at.exception and all(part in shown for part in ("line 5", "seven", "is not a link"))
    at.file_uploader(key="align_tgt").set_value(("fr.txt", b"une ligne\n", "text/plain"))
    at = submit(at)
    assert "not a parallel pair" in at.error[0].value and not at.dataframe


def test_the_ranked_tables_layers_are_whole_numbers_and_alti_plus_has_none(tmp_path, reversal):
    """ALTI+ is read from no layer: the layer column became floats ("2.0") in the CSV and on the page."""
    sources, targets, golds = reversal_pairs(4, seed=3)
    report = align_corpus(reversal.model, reversal.tokenizer, sources, targets, golds)
    frame = report.frame()
    assert str(frame["layer"].dtype) == "Int64"
    assert frame.loc[frame["method"] == "ALTI+", "layer"].isna().all()
    assert "2.0" not in csv_text(frame, index=False)


def test_content_only_heads_read_the_maps_content_only_view_over_words(default):
    """Every head is scored a second time without its sink keys: its word matrix is the Attention maps page's content
    only view of the same teacher-forced map (sinks dropped, rows renormalised), merged into words."""
    from transformer.analysis.alignment import CONTENT_ONLY, Method, pair_matrix, word_rows
    from transformer.analysis.views import attention_view, content_only
    from transformer.decoding.forcing import teacher_force_ids

    source, target = "A dog runs on the beach.", "Un chien court sur la plage."
    method = Method(CONTENT_ONLY, 1, 5, "output", "argmax")
    found = pair_matrix(default.model, default.tokenizer, source, target, method)
    src_ids, src_words = default.tokenizer.encode_words(source)
    tgt_ids, tgt_words = default.tokenizer.encode_words(target)
    src_ids, tgt_ids = [*src_ids, 3], [*tgt_ids, 3]
    view = content_only(attention_view(teacher_force_ids(default.model, default.tokenizer, src_ids, tgt_ids), "cross"))
    kept = [i for i, piece in enumerate(default.tokenizer.id_to_piece(i) for i in src_ids) if piece in view.key_pieces]
    assert len(kept) < len(src_ids)  # the end token and the full stop are dropped
    rows = np.zeros((len(tgt_ids), len(src_ids)))
    rows[:, kept] = view.maps[1, 5]
    expected = word_rows(rows, [*src_words, range(0)], [*tgt_words, range(0)], "output")
    np.testing.assert_allclose(found, expected, atol=1e-5)
    np.testing.assert_allclose(found.sum(-1), 1.0, atol=1e-5)


def test_the_alignment_report_scores_every_head_with_and_without_its_sinks(reversal):
    from transformer.analysis.alignment import ATTENTION, CONTENT_ONLY

    sources, targets, golds = reversal_pairs(3, seed=5)
    report = align_corpus(reversal.model, reversal.tokenizer, sources, targets, golds)
    plain = {(s.method.layer, s.method.head) for s in report.scores if s.method.measure == ATTENTION}
    assert plain and plain == {
        (s.method.layer, s.method.head) for s in report.scores if s.method.measure == CONTENT_ONLY
    }


def test_attention_flow_through_the_decoder_is_a_method_read_from_its_flows_over_words(default):
    """--flow: each pair's rows are decoder_flow's source shares, over words; a pair longer than flow is read for is
    left out of every method, so that all are scored on the same pairs."""
    from transformer.analysis.alignment import FLOW, pair_matrix
    from transformer.analysis.decoder_flow import decoder_flow
    from transformer.decoding.forcing import teacher_force_ids

    sources, targets, lines = ((DATA / name).read_text().splitlines()[:3] for name in ("en.txt", "fr.txt", "gold.txt"))
    sources[1] = " ".join(["dog"] * 60)  # past MAX_DECODER_FLOW_TOKENS pieces
    golds, _ = parse_pharaoh(lines, [len(s.split()) for s in sources], [len(t.split()) for t in targets], False)
    report = align_corpus(default.model, default.tokenizer, sources, targets, golds, flow=True)
    assert report.aligned == [0, 2] and report.skipped == [1]
    assert align_corpus(default.model, default.tokenizer, sources, targets, golds).aligned == [0, 1, 2]
    method = Method(FLOW, None, None, "output", "argmax")
    src_ids, src_words = default.tokenizer.encode_words(sources[2])
    tgt_ids, tgt_words = default.tokenizer.encode_words(targets[2])
    eos = default.model.config.eos_id
    forced = teacher_force_ids(default.model, default.tokenizer, [*src_ids, eos], [*tgt_ids, eos])
    flows = decoder_flow(forced.encoder_self.numpy(), forced.decoder_self.numpy(), forced.cross.numpy())
    rows = flows[:, : len(src_ids) + 1] / flows[:, : len(src_ids) + 1].sum(axis=1, keepdims=True)
    expected = word_rows(rows, [*src_words, range(0)], [*tgt_words, range(0)], "output")
    np.testing.assert_allclose(pair_matrix(default.model, default.tokenizer, sources[2], targets[2], method), expected)
    assert report.links[method][1] == argmax_links(expected)
    assert 0 < next(s.counts.aer for s in report.scores if s.method == method) < 1


def test_align_with_flow_on_the_command_line_and_the_page(tmp_path):
    table = tmp_path / "table.csv"
    files = [str(DATA / name) for name in ("en.txt", "fr.txt", "gold.txt")]
    arguments = ["align", "--src", files[0], "--tgt", files[1], "--gold", files[2], "--limit", "2", "--flow"]
    assert main([*arguments, "--table", str(table)]) == 0
    assert sum(row["method"] == "attention flow" for row in csv.DictReader(table.open())) == 4  # conventions x links
    at = start().switch_page("pages/alignment.py").run()
    at.checkbox(key="align_example").check()
    at.number_input(key="align_limit").set_value(2)
    at.checkbox(key="align_flow").check()
    at = submit(at)
    assert not at.exception and not at.error
    assert (at.dataframe[0].value["method"] == "attention flow").sum() == 4
