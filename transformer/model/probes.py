"""What one forward pass is asked to do besides computing: switch heads off, record a sublayer's inputs.

A Probe is a value passed down the call, like the key/value cache: it is never stored on the shared
model, so one visitor's probe never reaches another visitor's forward pass (a hook registered on a
module would fire in every pass). It serves the stage-by-stage walkthrough, head ablation, and any
view that needs what a module received.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

import torch

from transformer.model.heads import Head
from transformer.model.kinds import AttentionKind

# Given a sublayer's heads' outputs before W_O (B, H, T_q, d_head), returns those to carry on: activation patching
# reads them there, and replaces some.
HeadEdit = Callable[[torch.Tensor], torch.Tensor]


def allowed_and_silenced(keys: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """A sublayer's keys each head may look at (H, T_k), True where it may, as a mask broadcastable over queries
    (1, H, 1, T_k), and the heads that may look at none, as a keep (1, H, 1, 1) zeroing their output (None where
    each head sees some key): a head that sees nothing adds nothing, where a softmax over no key would give NaN."""
    blind = ~keys.any(dim=-1)
    allowed = keys | blind[:, None]  # a blind head's row opened: its output is zeroed instead
    keep = (~blind).float()[None, :, None, None] if blind.any() else None
    return allowed[None, :, None, :], keep


@dataclass(frozen=True)
class SublayerRecord:
    """What one attention sublayer received and produced in a forward pass (batch first)."""

    queries: torch.Tensor  # (B, T_q, d_model) the sublayer's input X (after the pre-norm, if any)
    context: torch.Tensor  # (B, T_k, d_model) what keys and values are projected from
    mask: torch.Tensor | None  # broadcastable to (B, H, T_q, T_k), True where a query may look
    output: torch.Tensor  # (B, T_q, d_model) the module's output, before dropout and the residual
    p_attn: torch.Tensor  # (B, H, T_q, T_k)
    position_bias: torch.Tensor | None = None  # (B, H, T_q, T_k) added to the scores (T5's relative positions)
    stream: torch.Tensor | None = None  # (B, T_q, d_model) the residual stream entering the block (queries, post-norm)


@dataclass(frozen=True)
class SublayerProbe:
    """One attention sublayer's share of a Probe."""

    keep: torch.Tensor | None  # (1 or B, H, 1, 1): 1 for heads kept, 0 for heads switched off, or a gate
    records: dict[tuple[AttentionKind, int], SublayerRecord] | None  # where to record, if recording
    site: tuple[AttentionKind, int]
    edit: HeadEdit | None = None  # reads or replaces the heads' outputs before W_O
    allowed: torch.Tensor | None = None  # (1, H, 1, T_k): the keys each head may look at (attention knockout)

    def record(self, record: SublayerRecord) -> None:
        if self.records is not None:
            self.records[self.site] = record


@dataclass
class Probe:
    """Heads to switch off, and sublayers to record, as (kind, layer).

    Switching a head off zeroes its output before W_O, exactly the model without that head; its
    weights p_attn are still what it computed. Records fill `records` during the pass (with a
    key/value cache, the last step's).
    """

    heads_off: frozenset[Head] = frozenset()
    record_at: frozenset[tuple[AttentionKind, int]] = frozenset()
    records: dict[tuple[AttentionKind, int], SublayerRecord] = field(default_factory=dict)
    # Per sublayer, a (B, H) multiplier of each row's heads: a gate to differentiate a loss by (head importance)
    gates: dict[tuple[AttentionKind, int], torch.Tensor] = field(default_factory=dict)
    # Per sublayer, a HeadEdit of its heads' outputs (activation patching)
    head_edits: dict[tuple[AttentionKind, int], HeadEdit] = field(default_factory=dict)
    # Per sublayer, the keys each head may look at (H, T_k), True where it may (attention knockout and pinning)
    key_masks: dict[tuple[AttentionKind, int], torch.Tensor] = field(default_factory=dict)

    @classmethod
    def ablating(cls, heads: Iterable[Head]) -> Probe:
        return cls(heads_off=frozenset(heads))

    @classmethod
    def recording(cls, kind: AttentionKind | str, layer: int) -> Probe:
        return cls(record_at=frozenset({(AttentionKind(kind), layer)}))

    def selected(self, rows: torch.Tensor) -> Probe:
        """The same probe for these rows of the batch (its gates' rows; the rest applies to every row)."""
        if not self.gates:
            return self
        gates = {site: gate.index_select(0, rows) for site, gate in self.gates.items()}
        return Probe(self.heads_off, self.record_at, self.records, gates, self.head_edits, self.key_masks)

    def at(self, kind: AttentionKind, layer: int, n_heads: int) -> SublayerProbe | None:
        """This probe's part for one sublayer, or None where it asks nothing of it."""
        off = [head.index for head in self.heads_off if (head.kind, head.layer) == (kind, layer)]
        recording = (kind, layer) in self.record_at
        gate, edit = self.gates.get((kind, layer)), self.head_edits.get((kind, layer))
        keys = self.key_masks.get((kind, layer))
        if not off and not recording and gate is None and edit is None and keys is None:
            return None
        keep = None
        if off:
            keep = torch.ones(1, n_heads, 1, 1)
            keep[0, off] = 0.0
        if gate is not None:
            keep = gate[:, :, None, None] if keep is None else gate[:, :, None, None] * keep.to(gate)
        allowed = None
        if keys is not None:
            allowed, silenced = allowed_and_silenced(keys)
            if silenced is not None:
                keep = silenced if keep is None else keep * silenced.to(keep)
        return SublayerProbe(keep, self.records if recording else None, (kind, layer), edit, allowed)
