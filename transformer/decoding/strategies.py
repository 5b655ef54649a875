"""The decoding strategies (greedy, beam, sampling) as one value, and the one entry that applies them (in the spirit
of Hugging Face's GenerationConfig).

The app, the command line and the statistics all decode through `decode_text`, so a setting means the
same everywhere and a result is named by (checkpoint, text, settings); what a decode will hold is asked before it
runs (`check_decode`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from transformer.decoding.beam import beam_search
from transformer.decoding.greedy import decode_with_chooser, default_max_new_tokens, greedy_chooser, sampling_chooser
from transformer.decoding.lens import read_at_decode
from transformer.decoding.result import DecodeInputError, DecodeResult, source_ids
from transformer.model.config import TransformerConfig, shown
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
    model: Transformer,
    tokenizer: TokenizerBase,
    text: str,
    settings: DecodeSettings = DecodeSettings(),
    limit_bytes: int | None = None,
) -> DecodeResult:
    """Decodes one sentence as the settings say, recording every attention map of every step; DecodeTooLarge,
    before anything runs, where that would hold more than `limit_bytes`."""
    if limit_bytes is not None:
        ids = source_ids(tokenizer, text, model.config.max_len)[0]
        beams = settings.beam_width if settings.strategy == "beam" else 1
        check_decode(model, len(ids), settings.max_new_tokens, limit_bytes, beams)
    limit = settings.max_new_tokens or None
    if settings.strategy == "beam":
        return beam_search(model, tokenizer, text, settings.beam_width, settings.length_penalty, limit)
    if settings.strategy == "sampling":
        chooser = sampling_chooser(settings.temperature, settings.top_k, settings.seed)
        return decode_with_chooser(model, tokenizer, text, chooser, settings.label, limit)
    return decode_with_chooser(model, tokenizer, text, greedy_chooser, settings.label, limit)


# What a decode will hold, asked before it runs (the app's limit on one decode). A decode keeps every attention map
# of every step: each encoder layer's heads over the source (S x S), each decoder layer's over the output (T x T) and
# across (T x S), each decoder layer's states and, where it reads the logit lens itself, each layer's distribution over
# the vocabulary at every step. A model's parameters say nothing of it: an upload of 60 encoder layers of 16 heads,
# width 16, within every parameter budget, held 3.8 GB of maps for a sentence of 1,000 words.
NUMBER_BYTES = 4  # float32, as the maps are kept


class DecodeTooLarge(DecodeInputError):
    """A decode that would hold more than the limit it is run under."""


def decode_numbers(config: TransformerConfig, source_len: int, steps: int, beams: int = 1) -> int:
    """The numbers a decode of `source_len` source pieces for at most `steps` steps holds at its largest; a beam
    search holds its decoder's maps and states for each of `beams` hypotheses."""
    heads, layers = config.n_heads, config.n_decoder_layers
    encoder = config.n_encoder_layers * heads * source_len**2
    decoder = layers * heads * (steps**2 + steps * source_len) * beams
    states = layers * steps * config.d_model * beams
    lens = layers * steps * config.tgt_vocab_size if read_at_decode(config) else 0
    return encoder + decoder + states + lens


def check_decode(model: Transformer, source_len: int, steps_for: int, limit_bytes: int, beams: int = 1) -> None:
    """DecodeTooLarge, saying how long a sentence fits, where decoding `source_len` pieces with `model` would hold
    more than `limit_bytes`. `steps_for`: the steps asked for, or 0 for the default for a source's length."""
    config = model.config

    def needed(length: int) -> int:
        steps = steps_for or default_max_new_tokens(model, length)
        return NUMBER_BYTES * decode_numbers(config, length, steps, beams)

    if needed(source_len) <= limit_bytes:
        return
    fitting = longest_fitting(lambda length: needed(length) <= limit_bytes, source_len)
    maps = (config.n_encoder_layers + 2 * config.n_decoder_layers) * config.n_heads
    said = (
        f"shorten the sentence to at most {fitting:,} pieces (it has {source_len:,})"
        if fitting
        else "ask for fewer steps"
        if steps_for
        else "this model's maps do not fit even for one word"
    )
    raise DecodeTooLarge(
        f"decoding this would hold {needed(source_len) / 1e9:.1f} GB ({maps:,} attention maps a step, each up to "
        f"{source_len:,} pieces square), over the {limit_bytes / 1e9:.1f} GB one decode may hold here: {said}"
    )


def longest_fitting(fits: Callable[[int], bool], too_long: int) -> int:
    """The longest length below `too_long` that `fits` (0 for none), by halving: what a run holds grows with it."""
    fitting = 0
    while too_long - fitting > 1:
        middle = (fitting + too_long) // 2
        fitting, too_long = (middle, too_long) if fits(middle) else (fitting, middle)
    return fitting
