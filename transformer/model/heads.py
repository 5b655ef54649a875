"""One attention head, named one way everywhere: the value that probes, analyses, the command line, links and tables
all take, with its one text form and the one place where 0-based (the model's) and 1-based (the reader's) meet."""

from __future__ import annotations

import re
from typing import NamedTuple

from transformer.model.config import TransformerConfig, shown
from transformer.model.kinds import AttentionKind

# KIND.LAYER.HEAD, 1-based; the command line's KIND:LAYER:HEAD is read too. ASCII digits only: int() reads " 1 "
# and "1_0", and six of them at most.
HEAD_TEXT = re.compile(r"([a-z]+)([.:])([0-9]{1,6})\2([0-9]{1,6})")


class Head(NamedTuple):
    """One head: its attention kind, its layer and its index within the layer, 0-based as the model counts them.

    Immutable and hashable, so sets of heads name what a probe switches off. Its text form, `str(head)`, is 1-based
    as the app shows it: "cross.3.2" is the cross-attention's second head in the third decoder layer.
    """

    kind: AttentionKind
    layer: int
    index: int

    def __str__(self) -> str:
        return f"{self.kind}.{self.layer + 1}.{self.index + 1}"

    @property
    def label(self) -> str:
        """The head as a page lists it."""
        return f"{self.kind} · {layer_name(self.layer)} · {head_name(self.index)}"

    @classmethod
    def numbered(cls, kind: AttentionKind | str, layer: int, head: int) -> Head:
        """The head a reader numbers from 1 (a table's row, a link), as the model counts it."""
        return cls(AttentionKind(kind), layer - 1, head - 1)

    @classmethod
    def parse(cls, text: str) -> Head:
        """The head its text form names; ValueError in one line saying the form, for anything else."""
        match = HEAD_TEXT.fullmatch(text)
        if match is None or match[1] not in {kind.value for kind in AttentionKind}:
            kinds = ", ".join(kind.value for kind in AttentionKind)
            raise ValueError(f"{shown(text)}: give KIND:LAYER:HEAD or KIND.LAYER.HEAD, KIND one of {kinds}")
        if int(match[3]) < 1 or int(match[4]) < 1:
            raise ValueError(f"{shown(text)}: layers and heads count from 1")
        return cls.numbered(match[1], int(match[3]), int(match[4]))

    def check(self, config: TransformerConfig) -> None:
        """ValueError unless the model of this config has this head."""
        layers = self.kind.layers(config)
        if not (0 <= self.layer < layers and 0 <= self.index < config.n_heads):
            raise ValueError(f"{self}: this model has {layers} {self.kind.value} layers of {config.n_heads} heads")


def layer_name(layer: int) -> str:
    """A layer (0-based) as the reader counts it: "layer 1" is the model's layer 0."""
    return f"layer {layer + 1}"


def head_name(index: int) -> str:
    """A head's index within its layer (0-based) as the reader counts it: "head 1" is index 0."""
    return f"head {index + 1}"


def layer_names(layers: int) -> list[str]:
    return [layer_name(layer) for layer in range(layers)]


def head_names(heads: int) -> list[str]:
    return [head_name(index) for index in range(heads)]


def every_head(config: TransformerConfig) -> list[Head]:
    """Every head of a model of this config, in one order: the encoder's, then the decoder's self and cross heads,
    each kind layer by layer."""
    return [
        Head(kind, layer, index)
        for kind in AttentionKind
        for layer in range(kind.layers(config))
        for index in range(config.n_heads)
    ]
