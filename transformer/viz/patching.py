"""The grids of an activation patching run, each family of sites on one diverging scale centred on 0: the Cause
page draws them, and its offline report holds them all; and a pair set's grids of mean shares (the Pair sets page)."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import plotly.graph_objects as go

from transformer.analysis.interventions.set_effects import Effect, role_label
from transformer.analysis.interventions.sites import Patching
from transformer.model.heads import head_names, layer_name, layer_names
from transformer.viz.matrices import matrix_heatmap

FAMILIES = {  # each family of sites: its grid's axes
    "encoder_residual": ("layer", "position"),
    "encoder_heads": ("layer", "head", "position"),
    "cross_heads": ("layer", "head"),
    "decoder_self_heads": ("layer", "head"),
    "decoder_residual": ("layer",),
}


@dataclass(frozen=True)
class PatchingGrids:
    """Each family's figure: the encoder's stream over the source, its heads by layer, the decoder's heads and
    stream at the step."""

    encoder_stream: go.Figure
    encoder_heads: list[go.Figure]  # one per encoder layer
    cross_heads: go.Figure
    decoder_self_heads: go.Figure
    decoder_stream: go.Figure

    def all(self) -> list[go.Figure]:
        return [
            self.encoder_stream,
            *self.encoder_heads,
            self.cross_heads,
            self.decoder_self_heads,
            self.decoder_stream,
        ]


def shared_bound(found: Patching) -> float:
    """The scale's bound: ±1 at least (all of the difference), or the largest share where one goes past."""
    return max(1.0, *(float(np.nanmax(np.abs(getattr(found, family)), initial=0)) for family in FAMILIES))


def patching_grids(found: Patching, source_labels: list[str]) -> PatchingGrids:
    """Every family's grid, over the source's pieces or words (`source_labels`, the encoder grids' columns)."""
    bound = shared_bound(found)
    encoder_layers, decoder_layers = found.encoder_heads.shape[0], found.cross_heads.shape[0]
    heads = head_names(found.cross_heads.shape[1])

    def grid(values: np.ndarray, title: str, rows: list[str], columns: list[str]) -> go.Figure:
        return matrix_heatmap(values, title, rows, columns, signed_bound=bound)

    boundaries = ["the input", *(f"after {name}" for name in layer_names(encoder_layers))]
    decoder_names = layer_names(decoder_layers)
    return PatchingGrids(
        grid(found.encoder_residual, "The encoder's stream", boundaries, source_labels),
        [
            grid(found.encoder_heads[layer], f"Encoder heads, {layer_name(layer)}", heads, source_labels)
            for layer in range(encoder_layers)
        ],
        grid(found.cross_heads, "Cross-attention heads at the step", decoder_names, heads),
        grid(found.decoder_self_heads, "Decoder self-attention heads at the step", decoder_names, heads),
        grid(
            found.decoder_residual[None],
            "The decoder's stream",
            ["at the step"],
            ["the input", *(f"after {name}" for name in decoder_names)],
        ),
    )


def set_grids(by_family: dict[str, Effect], roles: list[str]) -> list[go.Figure]:
    """A pair set's grids of mean shares, on one scale centred on 0: the encoder's stream by the word's role, its
    heads at the differing word, the decoder's heads and stream at the step."""
    means = {family: effect.mean for family, effect in by_family.items()}
    bound = max(1.0, *(float(np.nanmax(np.abs(values), initial=0)) for values in means.values()))
    encoder_layers, decoder_layers = means["encoder_heads_differing"].shape[0], means["cross_heads"].shape[0]
    heads = head_names(means["cross_heads"].shape[1])

    def grid(values: np.ndarray, title: str, rows: list[str], columns: list[str]) -> go.Figure:
        return matrix_heatmap(values, title, rows, columns, signed_bound=bound)

    decoder_names = layer_names(decoder_layers)
    return [
        grid(
            means["encoder_stream"],
            "The encoder's stream, by the word's role (mean share)",
            ["the input", *(f"after {name}" for name in layer_names(encoder_layers))],
            [role_label(role) for role in roles],
        ),
        grid(
            means["encoder_heads_differing"], "Encoder heads at the differing word", layer_names(encoder_layers), heads
        ),
        grid(means["cross_heads"], "Cross-attention heads at the step", decoder_names, heads),
        grid(means["self_heads"], "Decoder self-attention heads at the step", decoder_names, heads),
        grid(
            means["decoder_stream"][None],
            "The decoder's stream",
            ["at the step"],
            ["the input", *(f"after {name}" for name in decoder_names)],
        ),
    ]
