"""Head importance against references that do not use the probe or autograd: the model with a head's columns of W_O
zeroed in its file, and finite differences of the loss in a head's gate."""

from __future__ import annotations

import argparse
import random

import numpy as np
import pandas as pd
import pytest
import torch
from helpers import gzip_bomb, measured, run_cli, tiny_config
from safetensors import safe_open
from safetensors.torch import load_file, save_file

from transformer.analysis.heads.importance import (
    ImportanceStopped,
    TokenizedPairs,
    ablated_rows,
    ablation_importance,
    corpus_of,
    gradient_importance,
    reference_log_probs,
)
from transformer.analysis.heads.table import head_table
from transformer.decoding.translate import translate_texts
from transformer.io.checkpoint import CHECKPOINT_DIR, load_checkpoint
from transformer.model.encoder_decoder import Transformer
from transformer.model.heads import Head, every_head
from transformer.model.kinds import AttentionKind
from transformer.model.probes import Probe

REVERSE = CHECKPOINT_DIR / "reverse.safetensors"
WORDS = "one two three four five six seven eight nine ten".split()


def reversal_sample(count: int, seed: int = 0) -> tuple[list[str], list[str]]:
    rng = random.Random(seed)
    sources = [" ".join(rng.choice(WORDS) for _ in range(rng.randint(3, 8))) for _ in range(count)]
    return sources, [" ".join(reversed(s.split())) for s in sources]


@pytest.mark.parametrize(
    "head", [Head(AttentionKind.ENCODER, 0, 0), Head(AttentionKind.DECODER, 1, 3), Head(AttentionKind.CROSS, 0, 2)]
)
def test_switching_a_head_off_equals_zeroing_its_columns_of_w_o_in_the_file(tmp_path, head):
    checkpoint = load_checkpoint(REVERSE)
    kind, layer, index = head
    names = {module: name for name, module in checkpoint.model.named_modules()}
    out_proj = f"{names[kind.module(checkpoint.model, layer)]}.out_proj.weight"
    tensors, d_head = load_file(REVERSE), checkpoint.model.config.d_head
    with safe_open(REVERSE, "pt") as opened:
        metadata = opened.metadata()
    tensors[out_proj][:, index * d_head : (index + 1) * d_head] = 0.0  # the head's output reaches nothing
    edited = tmp_path / "edited.safetensors"
    save_file(tensors, edited, metadata=metadata)
    without = load_checkpoint(edited)
    sources, references = reversal_sample(12)
    probe = Probe.ablating([head])
    assert translate_texts(checkpoint.model, checkpoint.tokenizer, sources, probe=probe) == translate_texts(
        without.model, without.tokenizer, sources
    )
    corpus = corpus_of(checkpoint.model, checkpoint.tokenizer, sources, references)
    with torch.inference_mode():
        torch.testing.assert_close(
            reference_log_probs(checkpoint.model, corpus.sources, corpus.references, probe),
            reference_log_probs(without.model, corpus.sources, corpus.references),
            atol=1e-5,
            rtol=1e-5,
        )


def test_rows_of_different_heads_decoded_together_equal_each_set_of_heads_switched_off_alone():
    checkpoint = load_checkpoint(REVERSE)
    sources, references = reversal_sample(6, seed=2)
    heads = [Head(AttentionKind.CROSS, 0, 0), Head(AttentionKind.ENCODER, 1, 3), Head(AttentionKind.DECODER, 0, 1)]
    corpus = corpus_of(checkpoint.model, checkpoint.tokenizer, sources, references)
    sets = [frozenset({head}) for head in heads] + [frozenset(heads[:2]), frozenset(heads)]  # one head, or several
    with torch.inference_mode():
        rows = ablated_rows(checkpoint.model, checkpoint.tokenizer, corpus, sets, 5, None, lambda: False)
        for heads_off in sets:
            alone = Probe.ablating(heads_off)
            assert rows[heads_off][0] == translate_texts(checkpoint.model, checkpoint.tokenizer, sources, probe=alone)
            expected = reference_log_probs(checkpoint.model, corpus.sources, corpus.references, alone)
            np.testing.assert_allclose(rows[heads_off][1], expected.numpy(), atol=1e-5)
        with pytest.raises(ImportanceStopped):
            ablated_rows(checkpoint.model, checkpoint.tokenizer, corpus, sets, 5, None, lambda: True)


def test_the_gradient_estimate_equals_finite_differences_of_the_loss_in_the_gate(tokenizer):
    torch.manual_seed(5)
    model = Transformer(tiny_config(tokenizer, dropout=0.0)).double().eval()
    corpus = TokenizedPairs([[5, 9, 14, 3], [7, 11, 3]], [[12, 4, 3], [8, 3]])
    found = gradient_importance(model, corpus, batch_size=2, per_layer_norm=False)
    eps = 1e-6
    for kind, layer, head in [
        (AttentionKind.ENCODER, 1, 0),
        (AttentionKind.DECODER, 2, 1),
        (AttentionKind.CROSS, 0, 1),
    ]:
        derivatives = []
        for row in range(2):
            losses = []
            for sign in (1, -1):
                gate = torch.ones(1, model.config.n_heads, dtype=torch.float64)
                gate[0, head] += sign * eps
                probe = Probe(gates={(kind, layer): gate})
                with torch.no_grad():
                    losses.append(
                        -reference_log_probs(
                            model, corpus.sources[row : row + 1], corpus.references[row : row + 1], probe
                        )
                    )
            derivatives.append(float((losses[0] - losses[1]) / (2 * eps)))
        assert found[kind][layer, head] == pytest.approx(np.mean(np.abs(derivatives)), rel=1e-5)


def test_on_the_reversal_model_both_measures_find_the_head_it_cannot_do_without():
    checkpoint = load_checkpoint(REVERSE)
    sources, references = reversal_sample(40)
    corpus = corpus_of(checkpoint.model, checkpoint.tokenizer, sources, references)
    table = head_table(
        checkpoint.model,
        ablation_importance(checkpoint.model, checkpoint.tokenizer, sources, references),
        gradient_importance(checkpoint.model, corpus),
    )
    assert len(table) == len(every_head(checkpoint.model.config)) == 24
    worst = table.sort_values("ablation_logprob_delta").iloc[0]
    assert worst.ablation_logprob_delta < -0.1  # the translation needs it
    assert (worst["kind"], worst["layer"], worst["head"]) in set(
        table.nlargest(2, "gradient_importance")[["kind", "layer", "head"]].itertuples(index=False, name=None)
    )
    for kind in ("encoder", "decoder", "cross"):  # normalised per layer, as in the paper
        for layer, rows in table[table.kind == kind].groupby("layer"):
            assert np.linalg.norm(rows.gradient_importance) == pytest.approx(1.0), (kind, layer)


def test_heads_on_the_command_line_writes_every_heads_row_and_translate_switches_heads_off(tmp_path):
    sources, references = reversal_sample(10, seed=1)
    src, ref, out = tmp_path / "src.txt", tmp_path / "ref.txt", tmp_path / "heads.csv"
    src.write_text("\n".join(sources) + "\n")
    ref.write_text("\n".join(references) + "\n")
    done = run_cli("heads", "--src", str(src), "--ref", str(ref), "--checkpoint", str(REVERSE), "--out", str(out))
    assert done.returncode == 0, done.stderr
    table = pd.read_csv(out)
    assert len(table) == 24 and {
        "kind",
        "layer",
        "head",
        "ablation_bleu_delta",
        "ablation_logprob_delta",
        "gradient_importance",
    } <= set(table.columns)
    assert table[["layer", "head"]].min().tolist() == [1, 1]  # 1-based, as the app shows them
    top = table.sort_values("ablation_logprob_delta").iloc[0]
    assert f"most important by ablation_logprob_delta: {top['kind']} {top['layer']}.{top['head']}" in done.stdout
    intact = run_cli("translate", "--checkpoint", str(REVERSE), "--input", str(src))
    spec = f"{top['kind']}:{top['layer']}:{top['head']}"
    ablated = run_cli("translate", "--checkpoint", str(REVERSE), "--input", str(src), "--heads-off", spec)
    assert intact.returncode == ablated.returncode == 0 and intact.stdout != ablated.stdout
    wrong = run_cli("translate", "--checkpoint", str(REVERSE), "--input", str(src), "--heads-off", "cross:9:1")
    assert wrong.returncode == 2 and "this model has 2 cross layers of 4 heads" in wrong.stderr
    unreadable = run_cli("translate", "--checkpoint", str(REVERSE), "--input", str(src), "--heads-off", "cross-1")
    assert unreadable.returncode == 2 and "give KIND:LAYER:HEAD" in unreadable.stderr


def test_synthetic_heads_get_the_roles_they_were_made_for():
    from transformer.analysis.heads.roles import add_sentence, empty_counts

    pieces = ["\u2581the", "\u2581red", "\u2581dog", "\u2581runs", "\u2581.", "</s>"]
    size = len(pieces)
    previous = np.eye(size, k=-1)
    previous[0, 0] = 1.0  # the first token has no previous one: itself
    sink = np.zeros((size, size))
    sink[:, -1] = 1.0
    rare = np.full((size, size), 0.1)
    rare[:, 2] = 0.5  # "dog", the rarest piece here
    counts = empty_counts(1, 3)
    add_sentence(counts, np.stack([previous, sink, rare])[None], pieces, rarest=2)
    shares = counts.offsets[0] / counts.tokens
    assert shares[0].tolist() == [5 / 6, 1 / 6, 0.0]  # offset -1 for all but the first token
    assert counts.confidence[0, 0] / counts.tokens == 1.0 and counts.sink[0, 1] / counts.tokens == 1.0
    assert counts.sink[0, 0] / counts.tokens == pytest.approx(1 / 6)  # "." after "runs"
    assert counts.rare[0].tolist() == [0.0, 0.0, 1.0]


def test_roles_of_the_reversal_models_heads_are_shares_and_cross_heads_have_no_positional_role():
    from transformer.analysis.heads.roles import head_roles

    checkpoint = load_checkpoint(REVERSE)
    sources, references = reversal_sample(8)
    roles = head_roles(
        checkpoint.model, checkpoint.tokenizer, corpus_of(checkpoint.model, checkpoint.tokenizer, sources, references)
    )
    table = head_table(checkpoint.model, None, None, roles)
    for column in ("confidence", "sink_share"):
        assert table[column].between(0, 1).all(), column
    cross = table[table.kind == "cross"]
    assert cross.positional_share.isna().all() and table[table.kind != "cross"].positional_share.between(0, 1).all()
    assert set(table.positional_offset.dropna()) <= {-1, 0, 1}


def test_the_pruning_curves_points_are_the_models_with_those_heads_off_and_importance_orders_them():
    from transformer.analysis.heads.importance import scores
    from transformer.analysis.heads.pruning import LEAST_FIRST, MOST_FIRST, RANDOM, orders, pruning_curves, ranking_by

    checkpoint = load_checkpoint(REVERSE)
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    sources, references = reversal_sample(16, seed=3)
    ablation = ablation_importance(model, tokenizer, sources, references)
    ranking = ranking_by({head: -delta[2] for head, delta in ablation.deltas.items()})
    curves = {curve.order: curve for curve in pruning_curves(model, tokenizer, sources, references, ranking)}
    assert set(curves) == {LEAST_FIRST, RANDOM, MOST_FIRST}
    intact = scores(translate_texts(model, tokenizer, sources), references)[0]
    for curve in curves.values():
        assert curve.counts == (0, 2, 5, 7, 10, 12, 14) and curve.bleu[0] == intact  # 10 % ... 60 % of 24 heads
        assert [len(heads) for heads in curve.heads_off] == list(curve.counts)
    least, most = curves[LEAST_FIRST], curves[MOST_FIRST]
    assert least.heads_off[1] == frozenset(ranking[-2:]) and most.heads_off[1] == frozenset(ranking[:2])
    for point in range(1, 7):  # each point against the model decoding alone with those heads off
        alone = translate_texts(model, tokenizer, sources, probe=Probe.ablating(least.heads_off[point]))
        assert least.bleu[point] == pytest.approx(scores(alone, references)[0])
    random_bleu = [
        scores(translate_texts(model, tokenizer, sources, probe=Probe.ablating(order[:5])), references)[0]
        for order in orders(ranking)[RANDOM]
    ]
    assert curves[RANDOM].bleu[2] == pytest.approx(np.mean(random_bleu))  # the mean of the three orders
    assert most.bleu[1] < least.bleu[1]  # the two heads the task needs most matter more than the two it needs least
    with pytest.raises(ValueError, match="every head"):
        pruning_curves(model, tokenizer, sources, references, ranking[1:])


def test_heads_command_prunes_and_writes_the_curve_beside_the_table(tmp_path):
    sources, references = reversal_sample(8, seed=4)
    src, ref, out = tmp_path / "src.txt", tmp_path / "ref.txt", tmp_path / "heads.csv"
    src.write_text("\n".join(sources) + "\n")
    ref.write_text("\n".join(references) + "\n")
    args = ["heads", "--src", str(src), "--ref", str(ref), "--checkpoint", str(REVERSE), "--out", str(out), "--prune"]
    done = run_cli(*args, "--measure", "gradient")
    assert done.returncode == 0, done.stderr
    assert "heads ranked by gradient" in done.stdout
    curve = pd.read_csv(tmp_path / "heads.pruning.csv")
    assert len(curve) == 21 and set(curve.order) == {"least important first", "random order", "most important first"}
    last = curve[curve.order == "least important first"].iloc[-1]
    assert last.heads_off == 14 and len(last.heads.split()) == 14 and last.share == pytest.approx(14 / 24)
    refused = run_cli(*args, "--measure", "gradient", "--prune-by", "ablation")
    assert refused.returncode == 2 and "--prune-by ablation needs --measure ablation or both" in refused.stderr


def test_the_heads_sample_is_read_only_as_far_as_it_goes(tmp_path):
    """A gzip bomb given as --src was decompressed whole (7.66 GB at the peak for a larger one); --ref shorter than
    --src was paired silently, and --sentences -5 accepted."""
    from transformer.cli.heads import read_sample

    bomb, ref = tmp_path / "bomb.txt.gz", tmp_path / "ref.txt"
    bomb.write_bytes(gzip_bomb(64))  # 33 million lines of "a"
    ref.write_text("b\n" * 3)
    with measured() as cost:
        sources, references = read_sample(argparse.Namespace(src=bomb, ref=None, sentences=10))
    assert sources == ["a"] * 10 and references is None and cost.peak_growth_mb < 50, cost
    with pytest.raises(ValueError, match=r"ref.txt ends at line 3, before the other: not a parallel pair"):
        read_sample(argparse.Namespace(src=bomb, ref=ref, sentences=10))
    assert read_sample(argparse.Namespace(src=bomb, ref=ref, sentences=2)) == (["a", "a"], ["b", "b"])
    with pytest.raises(ValueError, match="--sentences -5: give 1 or more"):
        read_sample(argparse.Namespace(src=bomb, ref=None, sentences=-5))


@pytest.mark.parametrize("text", ["cross: 1 :1_0", "cross:1:1_0", "cross:\u0661:1", "cross:" + "9" * 5000 + ":1"])
def test_a_head_is_named_in_ascii_digits_and_a_refusal_quotes_it_short(text):
    """int() read "cross: 1 :1_0" as cross:1:10, and a 5,000-digit layer printed a 5,147-character line."""
    from transformer.cli.heads import head_argument

    with pytest.raises(argparse.ArgumentTypeError, match="give KIND:LAYER:HEAD") as refused:
        head_argument(text)
    assert len(str(refused.value)) < 150
    assert head_argument("cross:2:5") == (AttentionKind.CROSS, 1, 4)


def test_the_reference_scores_hold_a_budget_whatever_the_vocabulary(tokenizer, monkeypatch):
    """The log-probabilities of every sentence, position and word were one (B, T, V) tensor: 200 long sentences
    over a 200k vocabulary killed the server past 8 GB. Taken a part at a time, with the same numbers and
    gradients."""
    import transformer.analysis.heads.importance as importance

    torch.manual_seed(0)
    model = Transformer(tiny_config(tokenizer, src_vocab_size=50_000, tgt_vocab_size=50_000)).eval()
    generator = random.Random(0)
    ids = [[generator.randrange(4, 60) for _ in range(29)] + [model.config.eos_id] for _ in range(32)]
    corpus = TokenizedPairs(ids, ids[::-1])
    alone = torch.cat([reference_log_probs(model, [s], [r]) for s, r in zip(corpus.sources, corpus.references)])
    unbounded = gradient_importance(
        model, TokenizedPairs(corpus.sources[:4], corpus.references[:4]), per_layer_norm=False
    )
    monkeypatch.setattr(importance, "SCORES_BUDGET_BYTES", 8 << 20)
    with measured() as cost:
        together = reference_log_probs(model, corpus.sources, corpus.references)
    assert cost.peak_growth_mb < 60, cost  # 370 MB in one pass
    torch.testing.assert_close(together, alone, atol=2e-5, rtol=0)
    with measured() as cost:
        gradient_importance(model, corpus, per_layer_norm=False)
    assert cost.peak_growth_mb < 80, cost
    bounded = gradient_importance(
        model, TokenizedPairs(corpus.sources[:4], corpus.references[:4]), per_layer_norm=False
    )
    for kind in unbounded:
        np.testing.assert_allclose(bounded[kind], unbounded[kind], rtol=1e-4, atol=1e-7)


def test_every_part_of_the_survey_stops_when_asked():
    """Gradient only (no ablation, no pruning) never asked should_stop: a visitor who left kept the heavy slot."""
    from transformer.analysis.heads.roles import head_roles
    from transformer.analysis.heads.survey import survey_heads
    from transformer.analysis.heads.syntax import ParsedSentence, syntactic_roles

    checkpoint = load_checkpoint(REVERSE)
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    sources, references = reversal_sample(4, seed=3)
    corpus = corpus_of(model, tokenizer, sources, references)
    with pytest.raises(ImportanceStopped):
        survey_heads(model, tokenizer, sources, references, ablation=False, should_stop=lambda: True)
    with pytest.raises(ImportanceStopped):
        gradient_importance(model, corpus, should_stop=lambda: True)
    with pytest.raises(ImportanceStopped):
        head_roles(model, tokenizer, corpus, lambda: True)
    with pytest.raises(ImportanceStopped):
        syntactic_roles(model, tokenizer, [ParsedSentence("one two", ())], None, lambda: True)


def test_a_stopped_ablation_keeps_each_head_over_the_sentences_every_head_had_finished():
    """Tried as a new user would: a Stop after 150 s of "each head switched off" said "nothing had finished, so
    nothing was kept" and threw away 2,048 of 4,000 finished rows. What every head had finished is kept, as the
    ablation of those sentences alone would measure it."""
    from transformer.analysis.heads.survey import survey_heads

    checkpoint = load_checkpoint(REVERSE)
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    sources, references = reversal_sample(24, seed=4)
    asked = iter([False] + [True] * 100)  # the first batch runs, then Stop
    kept = []
    with pytest.raises(ImportanceStopped) as stopped:
        survey_heads(model, tokenizer, sources, references, should_stop=lambda: next(asked), kept=kept.append)
    partial = stopped.value.partial
    assert len(kept) == 1 and kept[0].ablation is partial and 0 < len(partial.finished) < len(sources)
    assert "ablation_logprob_delta" in kept[0].table and "gradient_importance" not in kept[0].table
    assert kept[0].references == [references[s] for s in partial.finished]
    alone = ablation_importance(
        model, tokenizer, [sources[s] for s in partial.finished], [references[s] for s in partial.finished]
    )
    assert partial.deltas.keys() == alone.deltas.keys()
    for head, deltas in alone.deltas.items():
        np.testing.assert_allclose(partial.deltas[head], deltas, atol=1e-4)


def test_every_part_of_the_survey_reports_its_start_before_its_work(monkeypatch):
    """Tried as a new user would: gradient only, 21 s with no bar and no Stop; with the ablation, 74 s before its
    first report (the intact translation and a first batch); the treebank's and pruning's parts alike. Each part's
    first report, done 0 with its total, comes before any of its work."""
    import transformer.analysis.heads.importance as importance
    import transformer.analysis.heads.survey as survey
    from transformer.analysis.heads.syntax import ParsedSentence

    checkpoint = load_checkpoint(REVERSE)
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    sources, references = reversal_sample(3, seed=4)
    heard, at_work = [], {}

    def watched(name, work):
        def run(*args, **kwargs):
            at_work.setdefault(name, heard[-1] if heard else None)  # its first call
            return work(*args, **kwargs)

        return run

    for name in ("gradient_importance", "syntactic_roles", "pruning_curves"):
        monkeypatch.setattr(survey, name, watched(name, getattr(survey, name)))
    # the ablation's first work: the intact translation, inside ablation_importance (which reports its rows itself)
    monkeypatch.setattr(importance, "translate_texts", watched("ablation", importance.translate_texts))
    treebank = [ParsedSentence("one two", ())]
    survey.survey_heads(
        model, tokenizer, sources, references, True, treebank, "ablation", lambda *event: heard.append(event)
    )
    rows = len(every_head(model.config)) * len(sources)
    assert at_work["ablation"] == ("ablation", 0, rows, 0.0)
    assert at_work["gradient_importance"] == ("gradient", 0, 2, None)
    assert at_work["syntactic_roles"] == ("treebank", 0, 1, None)
    first_pruning = next(event for event in heard if event[0] == "pruning")
    assert first_pruning[1] == 0 and first_pruning[2] > 0
    heard.clear()  # the ablation called alone, from Python, reports its rows first too
    at_work.clear()
    importance.ablation_importance(model, tokenizer, sources, references, progress=lambda *event: heard.append(event))
    assert at_work["ablation"] == (0, rows, 0.0)


def test_the_ablation_and_pruning_report_the_share_of_their_work_weighed_by_each_batchs_length():
    """Their rows go shortest first: a share per row counted alike said the time left at a third of the real one.
    Each report carries the share of the work done, the intact translation's first, before any row; a batch of the
    longest sentences weighs more per row than one of the shortest."""
    from transformer.analysis.heads.pruning import pruning_curves

    checkpoint = load_checkpoint(REVERSE)
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    sources, references = reversal_sample(40, seed=5)
    heard = []
    ablation_importance(model, tokenizer, sources, references, progress=lambda *event: heard.append(event))
    rows = len(every_head(model.config)) * len(sources)
    assert heard[0] == (0, rows, 0.0) and heard[1][:2] == (0, rows) and 0 < heard[1][2] < 0.1  # the intact's share
    shares = [share for _, _, share in heard[1:]]
    assert shares == sorted(shares) and shares[-1] == 1.0 and heard[-1][:2] == (rows, rows)
    per_row = [(b[2] - a[2]) / (b[0] - a[0]) for a, b in zip(heard[1:], heard[2:])]
    assert per_row == sorted(per_row) and per_row[-1] > 1.3 * per_row[0], per_row
    heard.clear()
    pruning_curves(model, tokenizer, sources, references, every_head(model.config), progress=lambda *e: heard.append(e))
    assert heard[0][2] == 0.0 and heard[-1][2] == 1.0 and all(len(event) == 3 for event in heard)


def test_a_parts_bar_says_its_time_left_from_the_share_of_the_work_it_hears(monkeypatch):
    """Pruning's first estimate, from a first batch of the shortest sentences counted alike, said "about 1 s left"
    with 113 s to go. A part that reports the share of its work done is timed by it: 10 of 100 rows in 2 s, a
    twentieth of the work, leaves 38 s (counted alike, 18)."""
    import types

    import ui.services.work
    import ui.widgets.progress
    from ui.widgets.head_importance import PhasedProgress

    shown, now = [], [0.0]
    bar = types.SimpleNamespace(progress=lambda value, text: shown.append(text), empty=lambda: None)
    monkeypatch.setattr(ui.services.work.st, "progress", lambda value, text: bar)
    monkeypatch.setattr(ui.widgets.progress.st, "button", lambda *args, **kwargs: False)
    monkeypatch.setattr(ui.services.work.time, "monotonic", lambda: now[0])
    progress = PhasedProgress(["pruning"], "a checkpoint", 10)
    progress("pruning", 0, 100, 0.0)
    now[0] = 2.0
    progress("pruning", 10, 100, 0.05)
    assert shown[0] == "Pruning: 0 of 100 rows (a set of heads off, a sentence)"  # the bar from the first report
    assert shown[-1] == "Pruning: 10 of 100 rows (a set of heads off, a sentence) · about 38 s left", shown


def test_a_parts_bar_says_the_whole_runs_time_left_from_the_paces_of_the_parts_to_come(monkeypatch):
    """Tried as a new user would: the treebank's part ended at 100 s, then 54 s with a full, frozen bar, then
    pruning's first estimate said "about 1 s left" with 113 s to go. Each part's pace is recorded, and a part's bar
    says the whole run's time left: its own, and the parts to come at their recorded paces."""
    import types

    import ui.services.work
    import ui.widgets.progress
    from ui.widgets.head_importance import PhasedProgress

    shown, now = [], [0.0]
    bar = types.SimpleNamespace(progress=lambda value, text: shown.append(text), empty=lambda: None)
    monkeypatch.setattr(ui.services.work.st, "progress", lambda value, text: bar)
    monkeypatch.setattr(ui.widgets.progress.st, "button", lambda *args, **kwargs: False)
    monkeypatch.setattr(ui.services.work.time, "monotonic", lambda: now[0])

    def run(seconds: dict[str, float]) -> None:
        progress = PhasedProgress(["ablation", "gradient", "pruning"], "whole-run test", 10)
        for part, updates in (("ablation", 8), ("gradient", 2), ("pruning", 5)):
            for done in range(updates + 1):
                now[0] += seconds[part] / updates if done else 0
                progress(part, done, updates)
        progress.finish()

    run({"ablation": 40, "gradient": 10, "pruning": 30})  # the first run: each part timed
    shown.clear()
    run({"ablation": 40, "gradient": 10, "pruning": 30})
    halfway = next(text for text in shown if text.startswith("Switching each head off: 4 of 8"))
    assert halfway.endswith("about 20 s left in this part, about 60 s in all")  # 20 s here, then 10 and 30
    assert not any("in all" in text for text in shown if text.startswith("Pruning"))  # the last part: its own


def test_a_survey_hands_over_its_table_before_the_parts_that_may_be_stopped():
    """What a Stop keeps: the table of the parts that finished, handed over before the treebank's part and pruning;
    stopped during pruning, the survey raises ImportanceStopped with the table already handed over."""
    from transformer.analysis.heads.survey import survey_heads
    from transformer.analysis.heads.syntax import ParsedSentence

    checkpoint = load_checkpoint(REVERSE)
    sources, references = reversal_sample(3, seed=4)
    kept = []
    with pytest.raises(ImportanceStopped):
        survey_heads(
            checkpoint.model,
            checkpoint.tokenizer,
            sources,
            references,
            False,
            None,
            "gradient",
            should_stop=lambda: bool(kept),
            kept=kept.append,
        )
    assert len(kept) == 1 and kept[0].curves is None and len(kept[0].table) == len(every_head(checkpoint.config))
    treebank, kept = [ParsedSentence("one two", ())], []
    whole = survey_heads(
        checkpoint.model, checkpoint.tokenizer, sources, references, True, treebank, "ablation", kept=kept.append
    )
    assert [k.syntax is None for k in kept] == [True, False] and whole.curves and whole.pruned_by == "ablation"
    assert whole.table.equals(kept[1].table)
