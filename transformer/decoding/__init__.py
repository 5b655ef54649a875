"""Decoding with every attention map recorded: greedy, sampling, beam, what-if branches, teacher forcing."""

from transformer.decoding.beam import beam_search
from transformer.decoding.forcing import branch, teacher_force
from transformer.decoding.greedy import decode_with_chooser, greedy_chooser, sampling_chooser
from transformer.decoding.result import DecodeInputError, DecodeResult
from transformer.decoding.strategies import DecodeSettings, decode_text
from transformer.decoding.translate import translate_texts

__all__ = [
    "DecodeInputError",
    "DecodeResult",
    "DecodeSettings",
    "beam_search",
    "branch",
    "decode_with_chooser",
    "decode_text",
    "greedy_chooser",
    "sampling_chooser",
    "teacher_force",
    "translate_texts",
]
