"""The decoding strategies (greedy, beam, sampling) as one value, and the one entry that applies them (in the spirit
of Hugging Face's GenerationConfig).

The app, the command line and the statistics all decode through `decode_text`, so a setting means the
same everywhere and a result is named by (checkpoint, text, settings).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from transformer.decoding.beam import beam_search
from transformer.decoding.greedy import decode_with_chooser, greedy_chooser, sampling_chooser
from transformer.decoding.result import DecodeResult
from transformer.model.config import shown
from transformer.model.encoder_decoder import Transformer
from transformer.text.tokenizer import TokenizerBase

STRATEGIES = ("greedy", "beam", "sampling")


@dataclass(frozen=True)
class DecodeSettings:
    """A decoding strategy and its parameters; the ones a strategy does not use are ignored by it."""

    strategy: Literal["greedy", "beam", "sampling"] = "greedy"
    beam_width: int = 4  # hypotheses kept (beam)
    length_penalty: float = 0.6  # GNMT's alpha: 0 scores by log-probability alone (beam)
    temperature: float = 1.0  # divides the logits before sampling
    top_k: int = 0  # sample among the k most probable tokens only; 0 = all
    seed: int = 0  # the sampling generator's seed: the same seed gives the same output
    max_new_tokens: int = 0  # output limit; 0 = twice the source length plus 10, at most the model's max_len

    def __post_init__(self) -> None:
        if self.strategy not in STRATEGIES:
            raise ValueError(f"unknown strategy {self.strategy!r}; expected one of {', '.join(STRATEGIES)}")
        if not 1 <= self.beam_width <= 64:
            raise ValueError(f"beam width must be from 1 to 64, got {shown(self.beam_width)}")
        if not self.temperature > 0:
            raise ValueError(f"temperature must be positive, got {shown(self.temperature)}")
        if self.top_k < 0 or self.max_new_tokens < 0 or self.length_penalty < 0:
            raise ValueError("top-k, the output limit and the length penalty cannot be negative")

    @classmethod
    def greedy_or_beam(cls, width: int) -> DecodeSettings:
        """Greedy for width 1, else beam search of that width (the command line's --beam)."""
        return cls(strategy="beam", beam_width=width) if width > 1 else cls()

    @property
    def label(self) -> str:
        """How the result says it was made."""
        if self.strategy == "beam":
            return f"beam {self.beam_width}"
        if self.strategy == "sampling":
            return f"sampling (temperature {self.temperature:g}, top-k {self.top_k or 'all'}, seed {self.seed})"
        return "greedy"


def decode_text(
    model: Transformer, tokenizer: TokenizerBase, text: str, settings: DecodeSettings = DecodeSettings()
) -> DecodeResult:
    """Decodes one sentence as the settings say, recording every attention map of every step."""
    limit = settings.max_new_tokens or None
    if settings.strategy == "beam":
        return beam_search(model, tokenizer, text, settings.beam_width, settings.length_penalty, limit)
    if settings.strategy == "sampling":
        chooser = sampling_chooser(settings.temperature, settings.top_k, settings.seed)
        return decode_with_chooser(model, tokenizer, text, chooser, settings.label, limit)
    return decode_with_chooser(model, tokenizer, text, greedy_chooser, settings.label, limit)
