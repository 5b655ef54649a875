"""DecoderLens (Langedijk et al. 2023): what each encoder layer already says. The decoder cross-attends to an
intermediate encoder layer's output instead of the last one's (through the encoder's final norm, as the last
layer's output is, where the model has one) and generates: one translation per layer, all layers one batch. At the
last layer it is the model's own greedy translation; below it, what the encoder has built so far, as text (a
word-by-word gloss, a pronoun's gender appearing after some layer)."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from transformer.decoding.greedy import default_max_new_tokens, forced_prefix, generate, greedy_chooser
from transformer.decoding.lens import LogitLens, stacked_guesses
from transformer.decoding.result import model_device
from transformer.model.encoder_decoder import Transformer
from transformer.model.masks import padding_mask, target_mask
from transformer.text.tokenizer import TokenizerBase

CANDIDATES = 5  # the next-token candidates read at a step, from each layer's memory


@dataclass(frozen=True)
class LayerTranslation:
    """What the decoder writes from one encoder layer's output: its tokens (the end token included where written),
    each one's probability, and the text."""

    layer: int  # 1-based: the encoder layer whose output is the memory
    ids: list[int]
    pieces: list[str]
    probabilities: list[float]
    text: str


@dataclass(frozen=True)
class LayerCandidates:
    """The next-token candidates at one step of a given output (teacher-forced), from each layer's memory."""

    step: int  # 0-based
    ids: list[list[int]]  # (layers, CANDIDATES), layer 1 first
    probabilities: list[list[float]]


@torch.inference_mode()
def layer_streams(model: Transformer, src_ids: list[int]) -> torch.Tensor:
    """Each encoder layer's output before the final norm, (L, S, d_model), layer 1 first."""
    src = torch.tensor([src_ids], device=model_device(model))
    kept: list[torch.Tensor] = []

    def keep(boundary: int, x: torch.Tensor) -> torch.Tensor:
        if boundary > 0:  # boundary 0 is the embeddings, the first layer's input
            kept.append(x[0])
        return x

    model.encode(src, padding_mask(src, model.config.pad_id), between_layers=keep)
    return torch.stack(kept)


def _layers_as_memory(model: Transformer, src_ids: list[int]) -> tuple[torch.Tensor, tuple[int, torch.Tensor]]:
    """The source repeated a row a layer, and the encoder's start at its last boundary with each row's stream the
    layer's output: run from there, the encoder adds only its final norm."""
    streams = layer_streams(model, src_ids)
    src = torch.tensor([src_ids], device=streams.device).expand(len(streams), -1)
    return src, (model.config.n_encoder_layers, streams)


def decoder_lens(
    model: Transformer, tokenizer: TokenizerBase, src_ids: list[int], max_new_tokens: int | None = None
) -> list[LayerTranslation]:
    """The greedy translation from each encoder layer's output, layer 1 first (the tokenizer's target language code
    forced first where it has one, as the model's own decode does)."""
    src, start = _layers_as_memory(model, src_ids)
    prefix = forced_prefix(tokenizer)
    limit = max_new_tokens or max(default_max_new_tokens(model, len(src_ids)), len(prefix))
    generation = generate(model, src, limit, greedy_chooser, prefix=prefix, start=start)
    found = []
    for row, tokens in enumerate(generation.tokens.tolist()):
        ids = tokens[: tokens.index(model.config.eos_id) + 1] if model.config.eos_id in tokens else tokens
        chosen = generation.log_probs[row, torch.arange(len(ids)), torch.tensor(ids)].exp().tolist()
        pieces = [tokenizer.id_to_piece(i) for i in ids]
        found.append(LayerTranslation(row + 1, ids, pieces, chosen, tokenizer.decode(ids)))
    return found


@torch.inference_mode()
def candidates_at_step(model: Transformer, src_ids: list[int], output: list[int], step: int) -> LayerCandidates:
    """The next-token candidates at `step` (0-based) of `output` (the model's own translation, say), teacher-forced
    up to it, from each encoder layer's output."""
    if not 0 <= step < len(output):
        raise ValueError(f"step {step + 1} is past the output's {len(output)} tokens")
    top = model.log_probs(_teacher_forced(model, src_ids, output[:step])[:, -1]).topk(CANDIDATES, dim=-1)
    return LayerCandidates(step, top.indices.tolist(), top.values.exp().tolist())


@torch.inference_mode()
def encoder_layers_lens(model: Transformer, src_ids: list[int], tgt_ids: list[int]) -> LogitLens:
    """At every step of an output (the one on screen), teacher-forced, each encoder layer's next-token guesses: a
    lens over the encoder's layers, read as the logit lens reads the decoder's (rows: encoder layers, layer 1 first;
    the last is the model's own distribution). The layers' scores are read one layer at a time."""
    hidden = _teacher_forced(model, src_ids, tgt_ids[:-1])
    chosen = torch.tensor(tgt_ids, device=hidden.device)[:, None]
    scores = (model.log_probs(layer_hidden) for layer_hidden in hidden)
    return LogitLens(*stacked_guesses(scores, len(hidden), chosen), states=torch.empty(0))


def _teacher_forced(model: Transformer, src_ids: list[int], prefix: list[int]) -> torch.Tensor:
    """The decoder's last layer output (L, len(prefix) + 1, d_model) with the output so far `prefix` given, a row
    for each encoder layer's output as the memory."""
    src, start = _layers_as_memory(model, src_ids)
    encoded = model.encode(src, padding_mask(src, model.config.pad_id), start=start)
    decoder_input = torch.tensor([[model.config.start_id, *prefix]], device=src.device).expand(len(src), -1)
    return model.decode(
        decoder_input,
        encoded.memory,
        padding_mask(src, model.config.pad_id),
        target_mask(decoder_input, model.config.pad_id),
    ).hidden
