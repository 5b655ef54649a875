"""Activation patching (causal tracing) of the encoder's stream: where, between two sources that differ in a word, the
computation that makes the output differ is carried (Vig et al. 2020; Meng et al. 2022).

Two sources of the same piece count, clean and corrupted, are each run teacher-forced on the clean output up to a
step; the metric there is logit(target) - logit(foil), or the target's log-probability when no foil is given.
Denoising runs the corrupted source with one site of its encoder stream (a layer boundary, a position) replaced by
the clean run's; noising runs the clean source with the corrupted run's. A site's share is the part of the clean
and corrupted metrics' difference that patching it restores (denoising: 1 where it restores all of it) or removes
(noising: -1 where it removes all). Many sites run as one batch.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from transformer.decoding.result import DecodeResult, model_device, source_ids
from transformer.decoding.strategies import decode_text
from transformer.model.encoder_decoder import Transformer
from transformer.model.masks import padding_mask, target_mask
from transformer.model.probes import Probe
from transformer.text.pieces import WORD_START, readable
from transformer.text.tokenizer import TokenizerBase

SITES_PER_BATCH = 64  # patched runs in one forward pass (the it pair's stream grid: 32 took 1.12x the time of 64)
# The built-in pair (Vig et al. 2020's kind): the page's example, the benchmark's and the tests'
CLEAN_EXAMPLE = "The animal didn't cross the street because it was too tired."
CORRUPT_EXAMPLE = "The animal didn't cross the street because it was too wide."


@dataclass(frozen=True)
class Contrast:
    """What a patching run compares: two sources' ids, the clean output teacher-forced on both, and the step read."""

    clean_src: list[int]
    corrupt_src: list[int]
    output: list[int]  # the clean output's ids (eos included), the decoder's input up to the step
    step: int  # 0-based index into `output`: the position whose next-token scores are read
    target: int  # a target-vocabulary id
    foil: int | None = None  # another id; None: the metric is the target's log-probability

    def __post_init__(self) -> None:
        if len(self.clean_src) != len(self.corrupt_src):
            raise ValueError(
                f"the clean source has {len(self.clean_src)} pieces and the corrupted one {len(self.corrupt_src)}: "
                "patching compares the same positions, so both need the same count"
            )
        if not 0 <= self.step < len(self.output):
            raise ValueError(f"step {self.step + 1} is past the output's {len(self.output)} tokens")
        if self.clean_src == self.corrupt_src:  # every share would be 0 / 0: refused before any run
            raise ValueError(
                "the corrupted sentence reads as the same pieces as the clean one: there is no difference to trace "
                "(change a word, keeping the number of pieces)"
            )


class NotWritten(ValueError):
    """The output never writes the token asked for (at the step asked)."""


def target_step(pieces: list[str], word: str, step: int | None = None) -> int:
    """The step (0-based) whose output piece is `word` as the output writes it, a word's first piece ("▁il" for "il")
    or a piece inside a word ("il" of "qu'il"): the first such, or `step` where it is one; ValueError listing the
    output's pieces where none is."""
    steps = range(len(pieces)) if step is None else [step] if 0 <= step < len(pieces) else []
    for at in steps:
        if pieces[at] in (word, WORD_START + word):
            return at
    where = f"no output token is {word!r}" if step is None else f"the output's token {step + 1} is not {word!r}"
    written = " ".join(readable(piece) for piece in pieces)  # as the pages show pieces: "·" marks one inside a word
    raise NotWritten(f"{where}: the output's pieces are {written}")


def foil_id(tokenizer: TokenizerBase, target_piece: str, foil: str) -> int:
    """The id of `foil` in the target's form (a word's first piece where the target is one, else a piece inside a
    word); ValueError saying how the tokenizer splits it where it is no one piece."""
    piece = WORD_START + foil if target_piece.startswith(WORD_START) else foil
    if piece in tokenizer.pieces:
        return tokenizer.pieces.index(piece)
    split = " ".join(tokenizer.id_to_piece(i) for i in tokenizer.encode(foil))
    raise ValueError(f"the foil {foil!r} is no one piece of this tokenizer (it reads it as {split}): give one token")


def contrast_of_texts(
    model: Transformer,
    tokenizer: TokenizerBase,
    clean: str,
    corrupt: str,
    target: str,
    foil: str | None = None,
    step: int | None = None,
) -> tuple[Contrast, DecodeResult]:
    """The contrast of two sentences: the clean one decoded (greedily), read where its output writes `target` (at
    `step`, 0-based, where given) against `foil` in the target's form; and the clean decode."""
    output = decode_text(model, tokenizer, clean)
    at = target_step(output.tgt_pieces, target, step)
    foil_token = None if foil is None else foil_id(tokenizer, output.tgt_pieces[at], foil)
    corrupt_src = source_ids(tokenizer, corrupt, model.config.max_len)[0]
    check_piece_counts(tokenizer, clean, corrupt, len(output.src_ids), len(corrupt_src))
    return Contrast(output.src_ids, corrupt_src, output.tgt_ids, at, output.tgt_ids[at], foil_token), output


def check_piece_counts(tokenizer: TokenizerBase, clean: str, corrupt: str, clean_len: int, corrupt_len: int) -> None:
    """ValueError where the two sources' piece counts differ, naming the words that split differently and into
    which pieces, so that another word can be chosen (on the fairseq and eole models every pair tried was refused
    with the counts alone)."""
    if clean_len == corrupt_len:
        return

    def words(text: str) -> list[tuple[str, list[str]]]:
        ids, ranges = tokenizer.encode_words(text)
        return [
            (word, [readable(tokenizer.id_to_piece(i)) for i, belongs in zip(ids, ranges) if at in belongs])
            for at, word in enumerate(text.split())
        ]

    split = [(a, b) for a, b in zip(words(clean), words(corrupt)) if len(a[1]) != len(b[1])]
    told = [f"“{a}” is {' '.join(p)} ({len(p)}), “{b}” {' '.join(q)} ({len(q)})" for (a, p), (b, q) in split]
    if len(clean.split()) != len(corrupt.split()):
        told.append(f"the clean sentence has {len(clean.split())} words and the corrupted one {len(corrupt.split())}")
    raise ValueError(
        f"the clean source has {clean_len} pieces and the corrupted one {corrupt_len}: patching compares the same "
        f"positions, so both need the same count. {'; '.join(told) or 'The words split alike, the sentence not'}: "
        "choose a word of as many pieces, or a pair of a built-in set (the Pair sets page)"
    )


@dataclass(frozen=True)
class EncoderPatching:
    """Each encoder-stream site's share of the metric's difference, (L + 1, S), or (L + 1, words) where words were
    patched whole: row 0 the embeddings with positions (the first layer's input), row L the last layer's output,
    before the final norm."""

    shares: np.ndarray
    metric_clean: float
    metric_corrupt: float
    noising: bool


def metric(logits: torch.Tensor, contrast: Contrast) -> torch.Tensor:
    """The metric of each run from its scores at the step (B, V): logit difference, or log-probability."""
    if contrast.foil is not None:
        return logits[:, contrast.target] - logits[:, contrast.foil]
    return logits.float().log_softmax(dim=-1)[:, contrast.target]


StreamEdit = Callable[[int, torch.Tensor], torch.Tensor]  # a layer boundary's stream -> the stream carried on


def step_metric(
    model: Transformer,
    src: torch.Tensor,
    contrast: Contrast,
    between_layers: StreamEdit | None = None,
    start: tuple[int, torch.Tensor] | None = None,
    probe: Probe | None = None,
    between_decoder_layers: StreamEdit | None = None,
) -> torch.Tensor:
    """The metric at the step (B,) for sources (B, S), the encoder's stream edited as asked (and begun at a
    boundary's stream, as encode's `start`), the heads' outputs as the probe asks, and the decoder's stream as
    asked. One source (1, S) serves a batch of streams: its mask broadcasts over them."""
    config = model.config
    src_mask = padding_mask(src, config.pad_id)
    memory = model.encode(src, src_mask, probe=probe, between_layers=between_layers, start=start).memory
    decoder_input = decoder_input_of(model, contrast)
    # Rows whose decoder nothing edits share its input (its first self-attention computed once), and only the
    # step's state is computed in the last layer; edited rows are rows of their own, every position computed. (Only
    # the recorded runs probe here, reading every head: an encoder head's runs begin above its layer, unprobed, and
    # a decoder site's compute the step alone, in sites.at_the_step.)
    decoder_edited = probe is not None or between_decoder_layers is not None
    if decoder_edited:
        decoder_input = decoder_input.expand(memory.size(0), -1)  # the batch the encoder's edits made, not the source's
    tgt_mask = target_mask(decoder_input, config.pad_id)
    decoded = model.decode(
        decoder_input,
        memory,
        src_mask,
        tgt_mask,
        probe=probe,
        between_layers=between_decoder_layers,
        last_only=not decoder_edited,
    )
    return state_metric(model, decoded.hidden[:, -1], contrast)


def decoder_input_of(model: Transformer, contrast: Contrast) -> torch.Tensor:
    """The decoder's input up to the step (1, step + 1): the start token, then the clean output before the step."""
    return torch.tensor([[model.config.start_id, *contrast.output[: contrast.step]]], device=model_device(model))


def state_metric(model: Transformer, state: torch.Tensor, contrast: Contrast) -> torch.Tensor:
    """The metric of the decoder's final states at the step (B, d_model): a logit difference reads two scores of
    the output layer, a log-probability all of them."""
    if contrast.foil is None:
        return metric(model.output_logits(state), contrast)
    target, foil = model.output_logits(state, [contrast.target, contrast.foil]).unbind(-1)
    return target - foil


def keeping(streams: list[list[torch.Tensor]]) -> StreamEdit:
    """A stream edit that changes nothing and keeps a copy of row r's stream at each boundary in streams[r]."""

    def keep(layer: int, x: torch.Tensor) -> torch.Tensor:
        for row, kept in enumerate(streams):
            kept.append(x[row].clone())
        return x

    return keep


def encoder_streams(
    model: Transformer, sources: list[list[int]], contrast: Contrast
) -> list[tuple[list[torch.Tensor], float]]:
    """Each source's encoder stream at every layer boundary, each (S, d_model), and its metric: sources of one
    length (a contrast's two) run as one batch."""
    streams: list[list[torch.Tensor]] = [[] for _ in sources]
    metrics = step_metric(model, torch.tensor(sources, device=model_device(model)), contrast, keeping(streams))
    return list(zip(streams, metrics.tolist()))


Span = tuple[int, int]  # [start, end) positions patched together: one position, or a word's pieces


def each_position(length: int) -> list[Span]:
    """The spans of a source's positions one by one: the sites where no words are asked for."""
    return [(position, position + 1) for position in range(length)]


StreamSite = tuple[int, Span]  # an encoder-stream site: a layer boundary, and the positions patched there


def stream_sites(
    run_streams: list[torch.Tensor], patched_from: list[torch.Tensor], spans: list[Span]
) -> list[StreamSite]:
    """The sites, boundary by boundary, where the two runs' streams differ. Patching any other gives the run itself,
    so it is not run: at the first boundary (the embeddings with positions) two sources that differ in a word
    differ there only."""
    return [
        (boundary, (start, end))
        for boundary, (own, other) in enumerate(zip(run_streams, patched_from))
        for start, end in spans
        if not torch.equal(own[start:end], other[start:end])
    ]


def stream_metrics(
    model: Transformer,
    contrast: Contrast,
    run_src: list[int],
    run_streams: list[torch.Tensor],
    patched_from: list[torch.Tensor],
    run_metric: float,
    sites_per_batch: int = SITES_PER_BATCH,
    after_batch: Callable[[], None] = lambda: None,
    spans: list[Span] | None = None,
) -> np.ndarray:
    """The metric of the run of `run_src` (its streams `run_streams`, its metric `run_metric`) with each boundary's
    stream over each span given `patched_from`'s, (boundaries, spans). The sites where the two differ
    (`stream_sites`), boundary by boundary, run up to sites_per_batch in a pass, which begins at its first site's
    boundary: each site's run joins the batch at its own boundary, from the run's own stream there (below it, every
    site's run is the run itself); the rest are the run itself. `after_batch` is called after each pass (a progress
    bar's step; it may raise to stop the work)."""
    spans = spans or each_position(len(run_src))
    sites = stream_sites(run_streams, patched_from, spans)
    found, column = np.full((len(run_streams), len(spans)), run_metric), {span: i for i, span in enumerate(spans)}
    src = torch.tensor([run_src], device=model_device(model))
    for first in range(0, len(sites), sites_per_batch):
        batch = sites[first : first + sites_per_batch]

        def entering(boundary: int) -> torch.Tensor:
            """The streams of the batch's sites at `boundary`, each the run's own with its span patched."""
            rows = [span for at, span in batch if at == boundary]
            stream = run_streams[boundary][None].repeat(len(rows), 1, 1)
            for row, (start, end) in enumerate(rows):
                stream[row, start:end] = patched_from[boundary][start:end]
            return stream

        begin = batch[0][0]

        def join(boundary: int, x: torch.Tensor) -> torch.Tensor:
            return x if boundary == begin else torch.cat([x, entering(boundary)])

        metrics = step_metric(model, src, contrast, between_layers=join, start=(begin, entering(begin)))
        for (boundary, span), value in zip(batch, metrics.tolist()):
            found[boundary, column[span]] = value
        after_batch()
    return found


def shares_of(found: np.ndarray, base: float, difference: float) -> np.ndarray:
    """Patched runs' metrics as shares of the clean and corrupted metrics' difference, from the unpatched run's
    `base`; NaN where the two metrics are equal (nothing to restore)."""
    return (found - base) / difference if difference else np.full(found.shape, np.nan)


@torch.inference_mode()
def patch_encoder_stream(
    model: Transformer,
    contrast: Contrast,
    noising: bool = False,
    sites_per_batch: int = SITES_PER_BATCH,
    spans: list[Span] | None = None,
) -> EncoderPatching:
    """Every encoder-stream site patched in turn (denoising, or noising), batched; see the module's docstring.
    `spans`, if given, are the positions patched together ([start, end) each, a word's pieces): the grid's
    columns."""
    (clean_streams, metric_clean), (corrupt_streams, metric_corrupt) = encoder_streams(
        model, [contrast.clean_src, contrast.corrupt_src], contrast
    )
    run_src, run_streams, patched_from, base = (
        (contrast.clean_src, clean_streams, corrupt_streams, metric_clean)
        if noising
        else (contrast.corrupt_src, corrupt_streams, clean_streams, metric_corrupt)
    )
    found = stream_metrics(model, contrast, run_src, run_streams, patched_from, base, sites_per_batch, spans=spans)
    shares = shares_of(found, base, metric_clean - metric_corrupt)
    return EncoderPatching(shares, metric_clean, metric_corrupt, noising)
