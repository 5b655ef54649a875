"""Every measure of every head over one sample, in the order they need each other: what the command line's `heads`
and Head statistics' "Which heads matter" both run.

Ablation first (its greedy outputs are the intact model's, the references where none are given), then the gradient
and the roles over the same sentences, the syntactic accuracy over gold parses, and the pruning curve, heads ranked
by the log-probability they cost when ablated, else by their gradient.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pandas as pd

from transformer.analysis.heads.importance import (
    Ablation,
    ImportanceStopped,
    ablation_importance,
    corpus_of,
    gradient_importance,
    scores,
)
from transformer.analysis.heads.pruning import PruningCurve, pruning_curves, ranking_by
from transformer.analysis.heads.roles import HeadRoles, head_roles
from transformer.analysis.heads.syntax import ParsedSentence, SyntacticRoles, syntactic_roles
from transformer.analysis.heads.table import head_table
from transformer.decoding.translate import translate_texts
from transformer.model.encoder_decoder import Transformer
from transformer.model.heads import Head
from transformer.model.kinds import AttentionKind
from transformer.text.tokenizer import TokenizerBase

# What a survey reports as it goes: (phase, done, total, share), the phase one of these; share: the part's work
# done where its items differ in cost (the rows' batches, weighed by importance.decode_cost), else None.
PHASES = {
    "ablation": "rows (a head off, a sentence)",
    "gradient": "parts (the gradient, then the roles)",
    "treebank": "gold-parsed sentences",
    "pruning": "rows (a set of heads off, a sentence)",
}
SurveyProgress = Callable[[str, int, int, float | None], None]
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
    intact: list[str] = field(default_factory=list, repr=False)  # the intact model's greedy outputs
    gradient: dict[AttentionKind, np.ndarray] = field(default_factory=dict, repr=False)  # the table's sources
    roles: HeadRoles | None = field(default=None, repr=False)


def survey_heads(
    model: Transformer,
    tokenizer: TokenizerBase,
    sources: Sequence[str],
    references: Sequence[str] | None = None,
    ablation: bool = True,
    treebank: Sequence[ParsedSentence] | None = None,
    prune_by: str | None = None,
    progress: SurveyProgress | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    kept: Callable[[Survey], None] | None = None,
) -> Survey:
    """The gradient and the roles always; the ablation, the syntax (with a treebank) and the pruning curve (ranked
    by `prune_by`: "ablation", which needs the ablation, or "gradient") when asked. `should_stop` ends the long
    parts with importance.ImportanceStopped. `kept` hears the survey as it stands when a part after the table's
    first ends with more to come (the table, without the syntax or the curve still to come): what a Stop keeps."""
    if prune_by == "ablation" and not ablation:
        raise ValueError("pruning by the ablation needs the ablation")

    def reporting(phase: str) -> Callable[..., None] | None:
        return None if progress is None else lambda done, total, share=None: progress(phase, done, total, share)

    ablated = None
    # Each part reports its start, so that its bar and Stop show from its first second
    if ablation:
        try:
            ablated = ablation_importance(
                model, tokenizer, sources, references, progress=reporting("ablation"), should_stop=should_stop
            )
        except ImportanceStopped as stopped:
            if kept is not None and isinstance(stopped.partial, Ablation):
                kept(partial_survey(model, stopped.partial, references))
            raise
    survey = _gradient_and_roles(model, tokenizer, sources, references, ablated, reporting("gradient"), should_stop)
    if kept is not None and (treebank or prune_by):
        kept(survey)
    if treebank:
        if progress is not None:
            progress("treebank", 0, len(treebank), None)
        syntax = syntactic_roles(model, tokenizer, treebank, reporting("treebank"), should_stop)
        table = head_table(model, ablated, survey.gradient, survey.roles, syntax)
        survey = replace(survey, table=table, syntax=syntax)
        if kept is not None and prune_by:
            kept(survey)
    if prune_by is None:
        return survey
    column, sign = RANKINGS[prune_by]
    importance = {Head.numbered(r.kind, r.layer, r.head): sign * getattr(r, column) for r in survey.table.itertuples()}
    curves = pruning_curves(
        model,
        tokenizer,
        sources,
        survey.references,
        ranking_by(importance),
        survey.intact,
        progress=reporting("pruning"),
        should_stop=should_stop,
    )
    return replace(survey, curves=curves, pruned_by=prune_by)


def partial_survey(model: Transformer, partial: Ablation, references: Sequence[str] | None) -> Survey:
    """What a Stop keeps of the ablation: each head's change over the sentences every head had finished (the
    sample's shortest, `partial.finished`), with no gradient, roles or anything after."""
    finished = partial.finished or ()
    measured_against = partial.intact if references is None else [references[s] for s in finished]
    table = head_table(model, partial, None, None, None)
    return Survey(
        table, measured_against, references is not None, partial.bleu, partial, None, None, None, partial.intact
    )


def _gradient_and_roles(
    model: Transformer,
    tokenizer: TokenizerBase,
    sources: Sequence[str],
    references: Sequence[str] | None,
    ablated: Ablation | None,
    progress: Callable[[int, int], None] | None,
    should_stop: Callable[[], bool],
) -> Survey:
    """The survey's table from the gradient and the roles (and the ablation, where it ran), over the references or,
    without them, the intact model's outputs."""
    if progress is not None:
        progress(0, 2)
    intact = ablated.intact if ablated is not None else translate_texts(model, tokenizer, sources)
    measured_against = list(references) if references is not None else intact
    corpus = corpus_of(model, tokenizer, sources, measured_against)
    gradient = gradient_importance(model, corpus, should_stop=should_stop)
    if progress is not None:
        progress(1, 2)
    roles = head_roles(model, tokenizer, corpus, should_stop)
    table = head_table(model, ablated, gradient, roles, None)
    bleu = scores(intact, measured_against)[0]
    return Survey(
        table, measured_against, references is not None, bleu, ablated, None, None, None, intact, gradient, roles
    )
