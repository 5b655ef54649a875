"""Every measure of every head over one sample, in the order they need each other: what the command line's `heads`
and Head statistics' "Which heads matter" both run.

Ablation first (its greedy outputs are the intact model's, the references where none are given), then the gradient
and the roles over the same sentences, the syntactic accuracy over gold parses, and the pruning curve, heads ranked
by the log-probability they cost when ablated, else by their gradient.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import pandas as pd

from transformer.analysis.heads.importance import (
    Ablation,
    ablation_importance,
    corpus_of,
    gradient_importance,
    scores,
)
from transformer.analysis.heads.pruning import PruningCurve, pruning_curves, ranking_by
from transformer.analysis.heads.roles import head_roles
from transformer.analysis.heads.syntax import ParsedSentence, SyntacticRoles, syntactic_roles
from transformer.analysis.heads.table import head_table
from transformer.decoding.translate import translate_texts
from transformer.model.encoder_decoder import Transformer
from transformer.model.heads import Head, every_head
from transformer.text.tokenizer import TokenizerBase

# What a survey reports as it goes: (phase, done, total), the phase one of these.
PHASES = {
    "ablation": "rows (a head off, a sentence)",
    "gradient": "parts (the gradient, then the roles)",
    "treebank": "gold-parsed sentences",
    "pruning": "rows (a set of heads off, a sentence)",
}
RANKINGS = {"ablation": ("ablation_logprob_delta", -1.0), "gradient": ("gradient_importance", 1.0)}


@dataclass(frozen=True)
class Survey:
    """One row per head (head_table's columns), and what the rows came from."""

    table: pd.DataFrame
    references: list[str]  # what was measured against: the given references, or the intact model's outputs
    given_references: bool
    bleu: float  # the intact model's greedy BLEU against `references`
    ablation: Ablation | None
    syntax: SyntacticRoles | None
    curves: list[PruningCurve] | None
    pruned_by: str | None


def survey_heads(
    model: Transformer,
    tokenizer: TokenizerBase,
    sources: Sequence[str],
    references: Sequence[str] | None = None,
    ablation: bool = True,
    treebank: Sequence[ParsedSentence] | None = None,
    prune_by: str | None = None,
    progress: Callable[[str, int, int], None] | None = None,
    should_stop: Callable[[], bool] = lambda: False,
) -> Survey:
    """The gradient and the roles always; the ablation, the syntax (with a treebank) and the pruning curve (ranked
    by `prune_by`: "ablation", which needs the ablation, or "gradient") when asked. `should_stop` ends the long
    parts with importance.ImportanceStopped."""
    if prune_by == "ablation" and not ablation:
        raise ValueError("pruning by the ablation needs the ablation")

    def reporting(phase: str) -> Callable[[int, int], None] | None:
        return None if progress is None else lambda done, total: progress(phase, done, total)

    ablated = None
    # Each part reports its start, so that its bar and Stop show from its first second (the ablation's first report
    # came after the intact translation and a first batch: 74 s with neither)
    if ablation:
        if progress is not None:
            progress("ablation", 0, len(every_head(model.config)) * len(sources))
        ablated = ablation_importance(
            model, tokenizer, sources, references, progress=reporting("ablation"), should_stop=should_stop
        )
    if progress is not None:
        progress("gradient", 0, 2)
    intact = ablated.intact if ablated is not None else translate_texts(model, tokenizer, sources)
    measured_against = list(references) if references is not None else intact
    corpus = corpus_of(model, tokenizer, sources, measured_against)
    gradient = gradient_importance(model, corpus, should_stop=should_stop)
    if progress is not None:
        progress("gradient", 1, 2)
    roles = head_roles(model, tokenizer, corpus, should_stop)
    if treebank and progress is not None:
        progress("treebank", 0, len(treebank))
    syntax = syntactic_roles(model, tokenizer, treebank, reporting("treebank"), should_stop) if treebank else None
    table = head_table(model, ablated, gradient, roles, syntax)
    curves = None
    if prune_by is not None:
        column, sign = RANKINGS[prune_by]
        importance = {Head.numbered(r.kind, r.layer, r.head): sign * getattr(r, column) for r in table.itertuples()}
        curves = pruning_curves(
            model,
            tokenizer,
            sources,
            measured_against,
            ranking_by(importance),
            intact,
            progress=reporting("pruning"),
            should_stop=should_stop,
        )
    bleu = scores(intact, measured_against)[0]
    return Survey(table, measured_against, references is not None, bleu, ablated, syntax, curves, prune_by)
