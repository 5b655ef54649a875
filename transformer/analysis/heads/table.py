"""One row per head, as the app and the command line show them: its importance, its roles and its syntactic
accuracy, each where it was measured."""

from __future__ import annotations

import numpy as np
import pandas as pd

from transformer.analysis.heads.importance import Ablation
from transformer.analysis.heads.roles import POSITIONAL_SHARE, HeadRoles
from transformer.analysis.heads.syntax import MARGIN, READINGS, SyntacticRoles
from transformer.model.encoder_decoder import Transformer
from transformer.model.heads import every_head
from transformer.model.kinds import AttentionKind

ROLE_COLUMNS = ("confidence", "positional_offset", "positional_share", "sink_share", "rare_share")


def head_table(
    model: Transformer,
    ablation: Ablation | None,
    gradient: dict[AttentionKind, np.ndarray] | None,
    roles: HeadRoles | None = None,
    syntax: SyntacticRoles | None = None,
) -> pd.DataFrame:
    """Layers and heads 1-based; a measure's columns only where it was run, NaN where a role is not read for that
    kind (syntax: the encoder's heads only)."""
    rows = []
    for head in every_head(model.config):
        kind, layer, index = head
        row = {"kind": kind.value, "layer": layer + 1, "head": index + 1}
        if ablation is not None and head in ablation.deltas:
            bleu, chrf, log_prob = ablation.deltas[head]
            row |= {"ablation_bleu_delta": bleu, "ablation_chrf_delta": chrf, "ablation_logprob_delta": log_prob}
        if gradient is not None:
            row["gradient_importance"] = float(gradient[kind][layer, index])
        if roles is not None:
            for name in ROLE_COLUMNS:
                found = getattr(roles, name).get(kind)
                row[name] = np.nan if found is None else found[layer, index].item()
        if syntax is not None:
            encoder = kind is AttentionKind.ENCODER
            for reading in READINGS:
                row[f"syntactic_{reading}"] = syntax.accuracy[reading][layer, index].item() if encoder else np.nan
                row[f"syntactic_baseline_{reading}"] = syntax.baseline[reading] if encoder else np.nan
        rows.append(row)
    return pd.DataFrame(rows)


SINK_SHARE = 0.5  # half a head's weight or more on sinks
RARE_SHARE = 0.5  # the rarest piece draws the head's weight in half the sentences or more

# Each role in a line a newcomer reads (Voita et al.'s roles; sink after the attention-sink literature).
ROLE_MEANINGS = {
    "positional": f"puts its largest weight at one offset (the previous, the same or the next token) for "
    f"{POSITIONAL_SHARE:.0%} of tokens or more",
    "syntactic": "from a word, finds the word it is grammatically tied to (subject, object, adjective, adverb) at "
    f"least {MARGIN * 100:.0f} points more often than the best fixed position does",
    "rare-word": f"puts most of its weight on the sentence's rarest word in {RARE_SHARE:.0%} of sentences or more",
    "sink": f"puts {SINK_SHARE:.0%} of its weight or more on </s>, <s> and punctuation: where it parks weight it does "
    "not use",
}


def head_roles_of(row: pd.Series) -> list[tuple[str, str]]:
    """A head's roles from its table row, each as (a cell's tag, a label with its figures): ("pos-1", "positional
    -1 (0.93)"), ("syn", "syntactic amod → head (0.61 vs 0.50)"), ("rare", ...), ("sink", ...)."""
    found = []
    if row.get("positional_share", np.nan) >= POSITIONAL_SHARE:
        offset = f"{row['positional_offset']:+.0f}"
        found.append((f"pos{offset}", f"positional {offset} ({row['positional_share']:.2f})"))
    for reading in READINGS:
        accuracy, baseline = row.get(f"syntactic_{reading}", np.nan), row.get(f"syntactic_baseline_{reading}", np.nan)
        if accuracy >= baseline + MARGIN:
            relation, direction = reading.split("_", 1)
            arrow = "→ head" if direction == "to_head" else "← head"
            found.append(("syn", f"syntactic {relation} {arrow} ({accuracy:.2f} vs {baseline:.2f})"))
    if row.get("rare_share", np.nan) >= RARE_SHARE:
        found.append(("rare", f"rare-word ({row['rare_share']:.2f})"))
    if row.get("sink_share", np.nan) >= SINK_SHARE:
        found.append(("sink", f"sink ({row['sink_share']:.2f})"))
    return found


def role_labels(row: pd.Series) -> str:
    """A head's roles as labels with their figures ("positional -1 (0.93); sink (0.52)")."""
    return "; ".join(label for _, label in head_roles_of(row))


def role_tags(row: pd.Series) -> str:
    """A head's roles in a grid cell's few characters, a line each ("pos-1<br>sink")."""
    return "<br>".join(dict.fromkeys(tag for tag, _ in head_roles_of(row)))
