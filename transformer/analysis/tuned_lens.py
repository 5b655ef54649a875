"""The tuned lens (Belrose et al. 2023): one affine map per decoder layer, fitted so that the output layer reads
that layer's output as it reads the last layer's.

The logit lens puts every layer's output through the final norm and generator unchanged; early layers need
not use the last layer's basis, so it understates what they hold. The tuned lens first maps layer l's output
h to h + h W_l + b_l (W_l and b_l start at zero: the logit lens), fitted to minimise the KL divergence from the
model's own output distribution over a corpus, the model left as it is. Its file is transformer.io.tuned_lens_file's.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from transformer.decoding.lens import LogitLens, guesses, stacked_guesses
from transformer.decoding.result import padded, source_ids
from transformer.model.encoder_decoder import Transformer
from transformer.text.tokenizer import TokenizerBase


class TunedLensError(ValueError):
    """A tuned lens file that cannot be used with this checkpoint (another model, damaged, not a lens)."""


@dataclass(frozen=True)
class TunedLens:
    """Per-layer affine maps for every decoder layer but the last (whose output the generator reads as it is)."""

    weights: torch.Tensor  # (L_dec - 1, d_model, d_model)
    biases: torch.Tensor  # (L_dec - 1, d_model)
    kl_logit: tuple[float, ...] = ()  # per layer, on held-out pairs: the logit lens' mean KL from the output
    kl_tuned: tuple[float, ...] = ()  # the same for this lens

    def translated(self, states: torch.Tensor) -> torch.Tensor:
        """Layer outputs (L_dec, ..., d_model) as the generator should read them; the last layer's unchanged."""
        early = states[:-1]
        shape = (early.size(0), *[1] * (early.dim() - 2), early.size(-1))
        moved = early + torch.einsum("l...d,lde->l...e", early, self.weights) + self.biases.view(shape)
        return torch.cat([moved, states[-1:]])


def read_with(model: Transformer, tuned: TunedLens, lens: LogitLens, tgt_ids: Sequence[int]) -> LogitLens:
    """The tuned lens over what the logit lens `lens` read; the last layer's row is the output's, as there."""
    chosen = torch.tensor(list(tgt_ids), dtype=torch.long)[:, None]
    weight = next(model.parameters())  # the model's device and dtype
    with torch.inference_mode():
        translated = tuned.translated(lens.states.to(tuned.weights))
        scores = (model.lens_log_probs(s.to(weight)).cpu() for s in translated[:-1])
        layers = stacked_guesses(scores, len(translated) - 1, chosen)
        read = lens if lens.read else None  # a lens left unread: its last layer read here, the rest never needed
        last = (
            (read.top_ids[-1], read.top_probs[-1], read.chosen_rank[-1], read.chosen_probs[-1])
            if read is not None
            else guesses(model.lens_log_probs(lens.states[-1].to(weight)).cpu(), chosen)
        )
    rows = [row[None] for row in last]
    parts = [torch.cat([part, row]) for part, row in zip(layers, rows)] if layers else rows
    return LogitLens(*parts, states=translated)


def _batches(
    tokenizer: TokenizerBase, model: Transformer, sources: Sequence[str], targets: Sequence[str], tokens: int
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Length-sorted batches of about `tokens` target tokens: (src (B, S), decoder input (B, T + 1))."""
    config = model.config
    pairs = [
        (source_ids(tokenizer, s, config.max_len)[0], source_ids(tokenizer, t, config.max_len, "target")[0])
        for s, t in zip(sources, targets)
        if s.strip() and t.strip()
    ]
    pairs.sort(key=lambda pair: len(pair[1]))
    batches, start = [], 0
    while start < len(pairs):
        end = start + 1
        while end < len(pairs) and (end + 1 - start) * len(pairs[end][1]) <= tokens:
            end += 1
        chunk = pairs[start:end]
        src = padded([s for s, _ in chunk], config.pad_id)
        tgt = padded([[config.start_id, *t] for _, t in chunk], config.pad_id)
        batches.append((src, tgt))
        start = end
    return batches


def _layer_kl(model: Transformer, lens: TunedLens | None, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
    """Per early layer, the summed KL(output || lens) over the batch's real target positions; and their count."""
    decoder_input = tgt[:, :-1]
    with torch.no_grad():
        output = model(src, decoder_input, need_weights=True)
        reference = output.log_probs.float()
        real = tgt[:, 1:] != model.config.pad_id  # a position whose next token is real
    states = torch.stack(output.decoder_layer_states)  # (L, B, T, d)
    read = states if lens is None else lens.translated(states)
    kls = []
    for layer_states in read[:-1]:
        log_q = model.lens_log_probs(layer_states).float()
        kl = (reference.exp() * (reference - log_q)).sum(dim=-1)
        kls.append(kl[real].sum())
    return torch.stack(kls)


def mean_kl(
    model: Transformer, lens: TunedLens | None, batches: Sequence[tuple[torch.Tensor, torch.Tensor]]
) -> list[float]:
    """Per early layer, the mean KL divergence (nats) of the lens' distribution from the output's."""
    with torch.no_grad():
        total = sum(_layer_kl(model, lens, src, tgt) for src, tgt in batches)
    positions = sum(int((tgt[:, 1:] != model.config.pad_id).sum()) for _, tgt in batches)
    return [float(value) / positions for value in total]


def fit_tuned_lens(
    model: Transformer,
    tokenizer: TokenizerBase,
    sources: Sequence[str],
    targets: Sequence[str],
    steps: int = 200,
    batch_tokens: int = 1200,
    learning_rate: float = 1e-3,
    held_out: float = 0.1,
    progress: Callable[[int, float], None] | None = None,
) -> TunedLens:
    """Fits the maps on teacher-forced pairs (the model's weights untouched); KL measured on held-out pairs."""
    if model.config.n_decoder_layers < 2:
        raise ValueError("a one-layer decoder has no layer before its last: nothing for a tuned lens to read")
    batches = _batches(tokenizer, model, sources, targets, batch_tokens)
    if len(batches) < 2:
        raise ValueError("too few sentence pairs to fit a tuned lens and hold some out: give a few hundred")
    generator = torch.Generator().manual_seed(0)
    order = torch.randperm(len(batches), generator=generator).tolist()
    cut = max(1, math.ceil(len(batches) * held_out))
    test, train = [batches[i] for i in order[:cut]], [batches[i] for i in order[cut:]]
    layers, width = model.config.n_decoder_layers - 1, model.config.d_model
    weights = torch.zeros(layers, width, width, requires_grad=True)
    biases = torch.zeros(layers, width, requires_grad=True)
    lens = TunedLens(weights, biases)
    optimizer = torch.optim.Adam([weights, biases], lr=learning_rate)
    frozen = [p.requires_grad for p in model.parameters()]
    model.eval().requires_grad_(False)
    try:
        for step in range(steps):
            src, tgt = train[step % len(train)]
            kl = _layer_kl(model, lens, src, tgt)
            loss = kl.sum() / int((tgt[:, 1:] != model.config.pad_id).sum())
            optimizer.zero_grad()
            loss.backward()
            optimizer.step()
            if progress:
                progress(step + 1, float(loss.detach()))
        fitted = TunedLens(weights.detach().clone(), biases.detach().clone())
        return TunedLens(
            fitted.weights, fitted.biases, tuple(mean_kl(model, None, test)), tuple(mean_kl(model, fitted, test))
        )
    finally:
        for parameter, needed in zip(model.parameters(), frozen):
            parameter.requires_grad_(needed)
