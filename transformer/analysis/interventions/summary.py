"""What a patching run shows, said in words from its numbers: the Cause page's sentence above the grids, and the
Pair sets page's above a set's."""

from __future__ import annotations

import numpy as np

from transformer.analysis.interventions.contrastive import Accuracy
from transformer.analysis.interventions.set_ablation import HeadAblation
from transformer.analysis.interventions.set_effects import Effect, role_label
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


def set_in_words(
    found: Accuracy,
    left_out: int,
    by_family: dict[str, Effect] | None,
    roles: list[str],
    ablations: list[HeadAblation] | None = None,
    estimate: bool = False,
) -> str:
    """A few sentences on what a pair set shows: its accuracy, where the difference is carried on average (the
    encoder's stream after its last layer, by role; the strongest head at the step) and the head whose ablation
    changes the accuracy most. `left_out`: pairs not written or refused; `estimate`: the shares are attribution
    patching's."""
    if not found.written:
        return f"No pair was read ({left_out} not written or refused): there is nothing to average."
    said = [
        f"{found.correct} of {found.written} pairs are correct: {found.share:.0%} (95 % interval {found.low:.0%} to "
        f"{found.high:.0%})" + (f"; {left_out} more were left out (not written or refused)." if left_out else ".")
    ]
    if found.correct == 0:
        said.append("The model resolves none as the set asks, so the shares below trace a difference it does not make.")
    if by_family is not None:
        said.append(_carried(by_family, roles, found.written, "Estimated by attribution patching: " * estimate))
    changed = [a for a in ablations or [] if a.change]
    if changed:
        first = min(changed, key=lambda a: (a.change, a.gap_change))
        said.append(
            f"Switched off alone, head {first.head} changes the accuracy most, to {first.accuracy.share:.0%} "
            f"({first.broken} of {first.accuracy.written} pairs made wrong, {first.mended} made right)."
        )
    elif ablations:
        said.append("No head switched off alone changes the accuracy: what carries it does not rest on one head.")
    return " ".join(said)


def _carried(by_family: dict[str, Effect], roles: list[str], written: int, prefix: str) -> str:
    """Where the set's difference is carried: the role whose stream after the encoder's last layer carries most,
    and the head at the step that does, with its interval and in how many pairs it is among the five strongest."""
    stream = by_family["encoder_stream"]
    if not np.isfinite(stream.mean).any():  # every pair's two sources give one metric: no share to average
        return _sentence(f"{prefix}the two sentences of every pair give the same metric: nothing to trace.")
    last = np.nan_to_num(stream.mean[-1], nan=0.0)
    role = int(np.argmax(np.abs(last)))
    said = (
        f"{prefix}after the encoder's last layer the difference sits most on {role_label(roles[role])} (mean share "
        f"{stream.mean[-1, role]:+.2f}, 95 % interval {stream.low[-1, role]:+.2f} to {stream.high[-1, role]:+.2f})"
    )
    heads = {AttentionKind.CROSS: by_family["cross_heads"], AttentionKind.DECODER: by_family["self_heads"]}
    kind = max(heads, key=lambda k: np.nanmax(np.abs(heads[k].mean), initial=0))
    effect = heads[kind]
    if not np.isfinite(effect.mean).any():
        return _sentence(said + ".")
    layer, index = np.unravel_index(np.nanargmax(np.abs(effect.mean)), effect.mean.shape)
    said = _sentence(said)
    top = int(effect.top[layer, index])
    among = f", among a pair's five strongest sites in {top} of {written} pairs" if top else ""
    return (
        f"{said}; at the step, head {Head(kind, int(layer), int(index))} carries {effect.mean[layer, index]:+.2f} "
        f"({effect.low[layer, index]:+.2f} to {effect.high[layer, index]:+.2f}){among}."
    )


def _sentence(text: str) -> str:
    return text[:1].upper() + text[1:]
