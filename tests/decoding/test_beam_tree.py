"""Beam search's whole search: every node's scores re-scored independently, its drawing, its nodes opened."""

from __future__ import annotations

import math

import pytest
from helpers import markdown, start, step_action, step_view, translate

from transformer.decoding.beam import beam_search, length_penalty
from transformer.decoding.forcing import teacher_force_ids
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint

SENTENCE = "A man in a red shirt is riding a bicycle down the street."


@pytest.fixture(scope="module")
def shipped():
    return load_checkpoint(DEFAULT_CHECKPOINT)


def rescored(model, tokenizer, src_ids, prefix) -> float:
    """The log-probability of `prefix` by one teacher-forced pass: nothing of the search is reused."""
    forced = teacher_force_ids(model, tokenizer, src_ids, prefix)
    return float(forced.token_probs.double().log().sum())


@pytest.mark.parametrize("width", [2, 5])
def test_every_node_is_its_prefix_rescored_and_the_highlighted_path_is_the_result(shipped, width):
    model, tokenizer = shipped.model, shipped.tokenizer
    result = beam_search(model, tokenizer, SENTENCE, width=width)
    tree = result.beam_tree
    assert tree.prefix(tree.winner) == result.tgt_ids
    path = {i for i, node in enumerate(tree.nodes) if node.winner}
    at = tree.winner
    while at is not None:  # the highlighted nodes are exactly the winner's ancestors
        path.remove(at)
        at = tree.nodes[at].parent
    assert path == set()
    for step in range(result.steps):
        kept = [node for node in tree.nodes if node.step == step and not node.finished]
        assert len(kept) <= width and [n.log_prob for n in kept] == sorted((n.log_prob for n in kept), reverse=True)
    for i, node in enumerate(tree.nodes):
        prefix = tree.prefix(i)
        assert len(prefix) == node.step + 1 and prefix[-1] == node.token
        assert node.finished == (node.token == model.config.eos_id)
        assert node.log_prob == pytest.approx(rescored(model, tokenizer, result.src_ids, prefix), abs=2e-4)
        assert node.score == pytest.approx(node.log_prob / length_penalty(len(prefix), tree.alpha), abs=1e-9)
    assert len(tree.eos_probs) == result.steps
    assert tree.eos_probs[-1] == pytest.approx(float(result.token_probs[-1]), abs=1e-6)  # it ended with </s>


def test_dropped_nodes_lead_nowhere_and_the_unpenalised_winner_is_the_most_probable_finished(shipped):
    result = beam_search(shipped.model, shipped.tokenizer, SENTENCE, width=4)
    tree = result.beam_tree
    last = max(node.step for node in tree.nodes)
    ends = {i for i, node in enumerate(tree.nodes) if node.finished or node.step == last}
    reaching = set()
    for i in ends:
        while i is not None and i not in reaching:
            reaching.add(i)
            i = tree.nodes[i].parent
    assert {i for i, node in enumerate(tree.nodes) if not node.dropped} == reaching
    assert any(node.dropped for node in tree.nodes)
    finished = [i for i, node in enumerate(tree.nodes) if node.finished]
    assert tree.best_unpenalised == max(finished, key=lambda i: tree.nodes[i].log_prob)
    assert math.isclose(max(tree.nodes[i].score for i in finished), tree.nodes[tree.winner].score)


def test_greedy_and_teacher_forcing_have_no_tree(shipped):
    from transformer.decoding.greedy import decode_with_chooser

    assert decode_with_chooser(shipped.model, shipped.tokenizer, SENTENCE).beam_tree is None


@pytest.mark.parametrize("width", [2, 8])
def test_the_explorer_sends_the_tree_and_a_node_opens_as_a_what_if_branch(shipped, width):
    at = translate(start({"strategy": "beam", "beam_width": str(width)}), SENTENCE)
    assert not at.exception
    view = step_view(at)["beam"]
    tree = at.session_state["result"].beam_tree
    assert view["width"] == width and len(view["step"]) == len(tree.nodes)
    assert view["on_path"] == [node.winner for node in tree.nodes] and view["winner"] == tree.winner
    assert view["text"][tree.winner] == at.session_state["result"].text
    dropped = next(i for i, node in enumerate(tree.nodes) if node.dropped and node.step > 0)
    at = step_action(at, name="beam_node", node=dropped, step=0)
    assert not at.exception
    branch = at.session_state["branch"]
    assert branch.tgt_ids[: tree.nodes[dropped].step + 1] == tree.prefix(dropped)  # forced, then greedy
    assert "what\\-if" in markdown(at) and step_view(at)["step"] == tree.nodes[dropped].step
    opened = start(dict(at.query_params))  # its link opens the same branch
    assert opened.session_state["branch"].tgt_ids == branch.tgt_ids
    for hostile in (len(tree.nodes), -1, "3", 1.0, None):
        assert not step_action(at, name="beam_node", node=hostile, step=0).exception
    assert at.session_state["branch"].tgt_ids == branch.tgt_ids  # ignored, every one


def test_a_greedy_decode_sends_no_tree_and_ignores_a_node():
    at = translate(start(), SENTENCE)
    assert step_view(at)["beam"] is None
    at = step_action(at, name="beam_node", node=0, step=0)
    assert not at.exception and at.session_state.get("branch") is None


def test_a_node_on_the_outputs_own_path_shows_the_output(shipped):
    at = translate(start({"strategy": "beam", "beam_width": "3"}), SENTENCE)
    tree = at.session_state["result"].beam_tree
    on_path = next(i for i, node in enumerate(tree.nodes) if node.winner and node.step == 2)
    at = step_action(at, name="beam_node", node=on_path, step=0)
    assert not at.exception and not at.session_state["show_branch"] and step_view(at)["step"] == 2
