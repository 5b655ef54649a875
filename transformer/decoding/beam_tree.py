"""A beam search's whole search as a tree: every hypothesis it kept or finished, and which of them led nowhere.

The explorer draws it when the strategy is beam; a node's prefix can be opened as a what-if branch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class BeamNode:
    """One hypothesis: a prefix the beam kept at its step, or one it finished there with </s>."""

    step: int  # the step that added its last token, 0-based
    slot: int  # its row at that step: kept ones in the beam's order, then the finished ones
    parent: int | None  # the node it extends (an index into BeamTree.nodes); None at the first step
    token: int
    log_prob: float  # of the whole prefix: the sum of its tokens' log-probabilities
    score: float  # log_prob / the length penalty: what the beam ranks finished hypotheses by
    finished: bool  # it ends with </s>
    dropped: bool  # nothing that grew from it finished or was alive when the search ended
    winner: bool  # on the path of the hypothesis returned


@dataclass(frozen=True)
class BeamTree:
    width: int
    alpha: float
    nodes: tuple[BeamNode, ...]
    winner: int  # the node that ends the hypothesis returned
    eos_probs: tuple[float, ...]  # the probability of </s> at each step of the winner
    best_unpenalised: int | None  # the finished node of highest log-probability: the winner with no length penalty

    def prefix(self, index: int) -> list[int]:
        """The tokens of node `index`'s hypothesis, from the first step."""
        tokens = []
        at: int | None = index
        while at is not None:
            tokens.append(self.nodes[at].token)
            at = self.nodes[at].parent
        return tokens[::-1]


def grow_tree(
    width: int,
    alpha: float,
    kept: Sequence[Sequence[tuple[int, int, float, float]]],  # per step: (origin, token, log_prob, score) kept
    finished: Sequence[tuple[int, int, int, float, float]],  # (step, origin, token, log_prob, score)
    winner: tuple[int, int, bool],  # (step, slot among that step's kept or finished, finished?)
    eos_probs: Sequence[float],
) -> BeamTree:
    """The tree of one search from what it kept and finished at each step (origins are the previous step's slots)."""
    rows: list[dict] = []
    at: dict[tuple[int, int, bool], int] = {}  # (step, slot, finished) -> row
    for step, hypotheses in enumerate(kept):
        for slot, (origin, token, log_prob, score) in enumerate(hypotheses):
            at[step, slot, False] = len(rows)
            rows.append(
                dict(
                    step=step,
                    slot=slot,
                    parent=at.get((step - 1, origin, False)),
                    token=token,
                    log_prob=log_prob,
                    score=score,
                    finished=False,
                )
            )
        ended = [entry for entry in finished if entry[0] == step]
        for k, (_, origin, token, log_prob, score) in enumerate(ended):
            at[step, k, True] = len(rows)
            rows.append(
                dict(
                    step=step,
                    slot=len(hypotheses) + k,
                    parent=at.get((step - 1, origin, False)),
                    token=token,
                    log_prob=log_prob,
                    score=score,
                    finished=True,
                )
            )
    last = len(kept) - 1
    alive = [row["finished"] or row["step"] == last for row in rows]
    for i in range(len(rows) - 1, -1, -1):  # children come after their parents: one pass from the end
        parent = rows[i]["parent"]
        if alive[i] and parent is not None:
            alive[parent] = True
    on_path = set()
    node: int | None = at[winner]
    while node is not None:
        on_path.add(node)
        node = rows[node]["parent"]
    ends = [i for i, row in enumerate(rows) if row["finished"]]
    nodes = tuple(BeamNode(**row, dropped=not alive[i], winner=i in on_path) for i, row in enumerate(rows))
    best = max(ends, key=lambda i: rows[i]["log_prob"]) if ends else None
    return BeamTree(width, alpha, nodes, at[winner], tuple(eos_probs), best)
