"""How it learned: one probe sentence over a run's snapshots, stepped in the browser.

Every snapshot's maps (each kind, layer and head, with each layer's mean), the probability it gave each reference
token, the logit lens's ranks and every head's measures are sent once; the slider, Play and the kind, layer and head
choices then draw in the browser (ui/players/epoch_player.js), which writes the view into the address bar.
"""

from __future__ import annotations

import hashlib
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import streamlit as st

from transformer.analysis.timeline import KINDS, SETTLED_BELOW, Timeline
from transformer.model.kinds import AttentionKind
from transformer.text.pieces import readable
from transformer.viz.attention import with_layer_means
from transformer.viz.style import colorscale_stops
from ui.players.packing import QUANTUM, packed, rounded

HERE = Path(__file__).parent
EPOCH_PLAYER = st.components.v2.component(
    "epoch_player",
    css=(HERE / "player.css").read_text() + (HERE / "epoch_player.css").read_text(),
    js=(HERE / "player_common.js").read_text() + (HERE / "epoch_player.js").read_text(),
)
EPOCH_RATES = (0.5, 1, 2)  # snapshots a second Play offers
LOSS_POINTS = 400  # the loss curve sent, at most
# What one page's player carries of maps, packed (2 bytes a weight in base64): the shipped timeline's probes take far
# less; a large timeline sent tens of MB to every tab that opened the page (measured: docs/performance.md).
MAX_PLAYER_MAP_BYTES = int(float(os.environ.get("TRANSFORMER_EXPLORER_PLAYER_MAP_MB", "4")) * 2**20)


@dataclass(frozen=True)
class EpochView:
    """What the view opens on (from a link): a snapshot, a kind, a layer (0-based), a head (0-based, "mean", "all")."""

    snapshot: int = -1  # -1: the last
    kind: str = AttentionKind.CROSS.value
    layer: int = -1  # -1: the last
    head: int | str = "mean"


def _loss(timeline: Timeline) -> dict:
    """The training loss by optimizer step, thinned to LOSS_POINTS means (a run's curve holds thousands)."""
    curve = timeline.loss_curve.astype(np.float64)
    if not curve.size:
        return {"steps": [0], "values": [None]}
    groups = np.array_split(np.arange(curve.size), min(LOSS_POINTS, curve.size))
    return {
        "steps": [int((g[-1] + 1) * timeline.loss_every) for g in groups],
        "values": [round(float(curve[g].mean()), 4) for g in groups],
    }


def _with_means(maps: np.ndarray) -> np.ndarray:
    """(E, L, H, Q, K) -> (E, L, H + 1, Q, K): each snapshot's layers' heads, then their mean."""
    snapshots, layers = maps.shape[:2]
    rows = with_layer_means(maps.astype(np.float32).reshape(snapshots * layers, *maps.shape[2:]))
    return rows.reshape(snapshots, layers, *rows.shape[1:])


def within_budget(timeline: Timeline, probe: int) -> tuple[Timeline, bool]:
    """The timeline with as many snapshots as the player may carry for this probe (MAX_PLAYER_MAP_BYTES), evenly
    spaced over the run, the first and the last always among them; and whether every head's maps go with their
    layer's mean. Where two snapshots of every head would pass the budget, the means go alone (docs/performance.md)."""
    cells = sum(maps[0].size // maps.shape[2] for maps in timeline.probes[probe].maps.values())  # one map a layer
    heads = timeline.probes[probe].maps[AttentionKind.CROSS].shape[2]
    every_head = 2 * cells * (heads + 1) * PACKED_BYTES <= MAX_PLAYER_MAP_BYTES
    most = max(2, int(MAX_PLAYER_MAP_BYTES // (cells * (heads + 1 if every_head else 1) * PACKED_BYTES)))
    count = len(timeline.snapshots)
    if count <= most:
        return timeline, every_head
    return timeline.at(sorted({int(e) for e in np.linspace(0, count - 1, most).round()})), every_head


PACKED_BYTES = 8 / 3  # a weight as packed() sends it: 2 bytes in base64


def epoch_data(
    timeline: Timeline, probe: int, view: EpochView, presentation: bool, name: str, every_head: bool = True
) -> dict:
    """Everything the view shows for one probe, every snapshot, as JSON-ready values; each head's maps with their
    layer's mean, or (every_head False) the means alone."""
    p = timeline.probes[probe]
    last = len(timeline.snapshots) - 1
    layers = {kind.value: int(timeline.entropy[kind].shape[1]) for kind in KINDS}
    snapshot = last if view.snapshot < 0 else min(view.snapshot, last)
    kind = view.kind if view.kind in layers else AttentionKind.CROSS.value
    layer = layers[kind] - 1 if view.layer < 0 else min(view.layer, layers[kind] - 1)
    heads = int(timeline.entropy[AttentionKind.CROSS].shape[2])
    shown_heads = heads if every_head else 0
    head = view.head if view.head in ("mean", "all") or (type(view.head) is int and 0 <= view.head < heads) else "mean"
    head = head if every_head else "mean"
    # The timeline names the view: the visitor's epoch, kind, layer and head are kept when they choose another probe
    identity = hashlib.sha1(f"{name}\n{[s.file for s in timeline.snapshots]}".encode()).hexdigest()[:16]
    return {
        "id": identity,
        "presentation": presentation,
        "snapshot": snapshot,
        "kind": kind,
        "layer": layer,
        "head": head,
        "labels": [s.label for s in timeline.snapshots],
        "epochs": [s.epoch for s in timeline.snapshots],
        "steps": [s.step for s in timeline.snapshots],
        "val_bleu": [None if s.val_bleu is None else round(s.val_bleu, 2) for s in timeline.snapshots],
        "reference": p.reference,
        "outputs": p.outputs,
        "src": [readable(piece) for piece in p.src_pieces],
        "tgt": [readable(piece) for piece in p.tgt_pieces],
        "decoder_input": [readable(piece) for piece in ["<s>", *p.tgt_pieces[:-1]]],
        "layers": layers,
        "heads": heads,
        "map_heads": shown_heads,  # the heads whose own maps are sent; their mean always is
        "maps": {kind.value: packed(_with_means(p.maps[kind])[:, :, -shown_heads - 1 :]) for kind in KINDS},
        "token_probs": rounded(p.token_probs),
        "lens_rank": p.lens_rank.astype(int).tolist(),
        "distance": {kind.value: rounded(timeline.distance[kind]) for kind in KINDS},
        "entropy": {kind.value: rounded(timeline.entropy[kind]) for kind in KINDS},
        "settled": {kind.value: timeline.settled_at(kind).tolist() for kind in KINDS},
        "settled_below": SETTLED_BELOW,
        "aer": None if timeline.aer is None else rounded(timeline.aer),
        "aer_method": timeline.aer_method,
        "loss": _loss(timeline),
        "colors": colorscale_stops(),
        "rates": list(EPOCH_RATES),
        "quantum": QUANTUM,
    }


def epoch_player(
    timeline: Timeline, probe: int, view: EpochView, presentation: bool, name: str, every_head: bool = True
) -> None:
    """Mounts the view; it asks nothing of the server."""
    EPOCH_PLAYER(key="epoch_player", data=[epoch_data(timeline, probe, view, presentation, name, every_head)])
