"""What a patching run shows, said in words from its numbers: the page's sentence above the grids."""

from __future__ import annotations

import numpy as np

from transformer.analysis.interventions.sites import Patching
from transformer.model.heads import Head
from transformer.model.kinds import AttentionKind
from transformer.text.pieces import readable

CARRIES = 0.5  # a site that moves half of the difference or more carries it
SHOWN = 0.1  # a site under a tenth of the difference is not named


def _moves(share: float, noising: bool) -> str:
    """What patching a site does to the difference, in words (denoising restores it, noising removes it)."""
    if noising:
        return f"removes {-share:.0%} of it" if share <= 0 else f"adds {share:.0%} to it"
    return f"restores {share:.0%} of it" if share >= 0 else f"takes {-share:.0%} of it away"


def _named(shares: np.ndarray, pieces: list[str], limit: int = 3) -> list[tuple[str, float]]:
    """The positions whose |share| is SHOWN or more, largest first, as (word, share)."""
    order = np.argsort(-np.abs(np.nan_to_num(shares)))[:limit]
    return [(readable(pieces[i]), float(shares[i])) for i in order if abs(shares[i]) >= SHOWN]


def _listed(named: list[tuple[str, float]]) -> str:
    parts = [f"“{word}” ({share:+.0%})" for word, share in named]
    return parts[0] if len(parts) == 1 else ", ".join(parts[:-1]) + " and " + parts[-1]


def in_words(found: Patching, src_pieces: list[str], measured: str) -> str:
    """A few sentences on where the difference of `measured` (e.g. "logit(il) − logit(elle)") is carried."""
    if not np.isfinite(found.encoder_residual).any():
        return (
            f"Both sentences give the same {measured} ({found.metric_clean:.3f}): there is no difference to trace. "
            "Change the corrupted sentence, or read another output token."
        )
    said = [
        f"{measured} is {found.metric_clean:.3f} with the clean sentence and {found.metric_corrupt:.3f} with the "
        "corrupted one."
    ]
    start, end = _named(found.encoder_residual[0], src_pieces), _named(found.encoder_residual[-1], src_pieces)
    if start:
        word, share = start[0]
        said.append(f"Patching “{word}” alone at the encoder's input {_moves(share, found.noising)}.")
    if end:
        said.append(f"After the encoder's last layer the difference sits on {_listed(end)}.")
    heads = {AttentionKind.CROSS: found.cross_heads, AttentionKind.DECODER: found.decoder_self_heads}
    kind = max(heads, key=lambda k: np.nanmax(np.abs(heads[k])))
    layer, index = np.unravel_index(np.nanargmax(np.abs(heads[kind])), heads[kind].shape)
    share = float(heads[kind][layer, index])
    if abs(share) >= SHOWN:
        said.append(f"At the step, head {Head(kind, int(layer), int(index))} alone {_moves(share, found.noising)}.")
    carried = np.flatnonzero(np.abs(found.decoder_residual) >= CARRIES)
    if carried.size:
        boundary = int(carried[0])
        where = "its input" if boundary == 0 else f"layer {boundary}"
        said.append(f"The decoder's stream at the step carries half of it or more from {where} on.")
    return " ".join(said)
