"""Activation patching of every family of sites, beside the encoder's stream (patching.py): each encoder
self-attention head's output at each source position, each decoder self-attention and cross-attention head's output
at the step, and the decoder's stream at the step after each layer.

A head's output is its part of the sublayer's input to W_O (B, H, T_q, d_head): patched there, its own W_O and
everything after it run on the patched value. Runs that patch one sublayer or boundary each run as one batch,
beginning at the stream below their site (the layers below it are the run's own, computed once); an encoder head's
runs begin above its layer, whose output changes only where the head's does; a decoder site's runs compute the
step's position alone, over the run's own keys and values before it, which a change at the step leaves as they are.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import torch

from transformer.analysis.interventions.patching import (
    SITES_PER_BATCH,
    Contrast,
    Span,
    StreamEdit,
    decoder_input_of,
    each_position,
    keeping,
    shares_of,
    state_metric,
    step_metric,
    stream_metrics,
    stream_sites,
)
from transformer.decoding.result import model_device
from transformer.model.encoder_decoder import Transformer
from transformer.model.kinds import AttentionKind
from transformer.model.layers import LayerCache
from transformer.model.masks import padding_mask, target_mask
from transformer.model.probes import Probe

Site = tuple[AttentionKind, int]  # a sublayer: its kind and layer (0-based)
HeadSite = tuple[int, Span]  # a head of a sublayer, and the positions where its output is patched


@dataclass(frozen=True)
class Run:
    """What one source's run computed at every site: each sublayer's heads' outputs (H, T_q, d_head), the encoder's
    and the decoder's stream at each layer boundary ((S or T, d_model)), the metric at the step, and the decoder's
    cache before the step."""

    heads: dict[Site, torch.Tensor]
    encoder_streams: list[torch.Tensor]
    decoder_streams: list[torch.Tensor]
    metric: float
    before_step: list[LayerCache]  # the decoder's keys and values at the positions before the step (batch 1)


SHARE_FAMILIES = ("encoder_residual", "encoder_heads", "cross_heads", "decoder_self_heads", "decoder_residual")


@dataclass(frozen=True)
class Patching:
    """Each site's share of the metric's difference (denoising: 1 where patching it restores all of the clean
    metric; noising: -1 where it removes all), by site family."""

    encoder_residual: np.ndarray  # (L_enc + 1, S or words): row 0 the embeddings with positions, row L the last output
    encoder_heads: np.ndarray  # (L_enc, H, S or words)
    cross_heads: np.ndarray  # (L_dec, H) at the step
    decoder_self_heads: np.ndarray  # (L_dec, H) at the step
    decoder_residual: np.ndarray  # (L_dec + 1,) at the step: entry 0 the embedded input, L the last layer's output
    metric_clean: float
    metric_corrupt: float
    noising: bool


def sublayers(model: Transformer) -> list[Site]:
    config = model.config
    encoder = [(AttentionKind.ENCODER, layer) for layer in range(config.n_encoder_layers)]
    decoder = [
        (kind, layer)
        for layer in range(config.n_decoder_layers)
        for kind in AttentionKind
        if not kind.queries_from_source
    ]
    return encoder + decoder


def recorded_runs(model: Transformer, sources: list[list[int]], contrast: Contrast) -> list[Run]:
    """Each source's run, every site read (nothing changed): sources of one length (a contrast's two) as one batch."""
    heads: list[dict[Site, torch.Tensor]] = [{} for _ in sources]
    encoder_streams: list[list[torch.Tensor]] = [[] for _ in sources]
    decoder_streams: list[list[torch.Tensor]] = [[] for _ in sources]

    def reading(site: Site) -> Callable[[torch.Tensor], torch.Tensor]:
        def read(outputs: torch.Tensor) -> torch.Tensor:
            for row, kept in enumerate(heads):
                kept[site] = outputs[row].clone()
            return outputs

        return read

    probe = Probe(head_edits={site: reading(site) for site in sublayers(model)})
    tensor = torch.tensor(sources, device=model_device(model))
    metrics = step_metric(model, tensor, contrast, keeping(encoder_streams), None, probe, keeping(decoder_streams))
    caches = before_the_step(model, tensor, torch.stack([streams[-1] for streams in encoder_streams]), contrast)
    return [Run(*row) for row in zip(heads, encoder_streams, decoder_streams, metrics.tolist(), caches)]


def before_the_step(
    model: Transformer, src: torch.Tensor, encoder_outputs: torch.Tensor, contrast: Contrast
) -> list[list[LayerCache]]:
    """Each source's decoder cache (batch 1) after the positions before the step, teacher-forced: the keys and values
    a run that changes the step alone reads there, from the encoder's last layer's outputs (R, S, d_model)."""
    memory = model.encoder_norm(encoder_outputs)
    cache = model.start_cache(memory)
    before = decoder_input_of(model, contrast)[:, :-1].expand(len(src), -1)
    if before.size(1):
        src_mask = padding_mask(src, model.config.pad_id)
        cache = model.decode(before, memory, src_mask, target_mask(before, model.config.pad_id), cache=cache).cache
    return [[layer.select(torch.tensor([row], device=src.device)) for layer in cache] for row in range(len(src))]


def replacing(values: torch.Tensor, heads: list[int], spans: list[Span]) -> Callable[[torch.Tensor], torch.Tensor]:
    """A head edit that gives row b of the batch head heads[b]'s outputs over spans[b] from `values` (H, T, d)."""

    def edit(outputs: torch.Tensor) -> torch.Tensor:
        outputs = outputs.clone()
        for row, (head, (start, end)) in enumerate(zip(heads, spans)):
            outputs[row, head, start:end] = values[head, start:end].to(outputs)
        return outputs

    return edit


def _metrics(model: Transformer, run_src: list[int], contrast: Contrast, start: tuple[int, torch.Tensor]) -> np.ndarray:
    """The metric of the runs of the source begun at a boundary's streams, one run a row (encode's `start`)."""
    src = torch.tensor([run_src], device=model_device(model)).expand(start[1].size(0), -1)
    return step_metric(model, src, contrast, start=start).double().cpu().numpy()


def at_the_step(
    model: Transformer,
    contrast: Contrast,
    run_src: list[int],
    run: Run,
    rows: int,
    probe: Probe | None = None,
    between_layers: StreamEdit | None = None,
) -> np.ndarray:
    """The metric of `rows` runs that change the decoder at the step alone, as the probe and the stream edit ask
    (each sees the step's position alone, index 0). Attention is causal, so the positions before the step are the
    run's own in every layer: each run computes the step's position over the run's cache, and its cross-attention
    reads the run's own keys and values of the source."""
    device = model_device(model)
    src = torch.tensor([run_src], device=device)
    memory = model.encoder_norm(run.encoder_streams[-1])[None].expand(rows, -1, -1)
    every_row = torch.zeros(rows, dtype=torch.long, device=device)
    cache = [layer.select(every_row) for layer in run.before_step]
    step = decoder_input_of(model, contrast)[:, -1:].expand(rows, -1)
    src_mask = padding_mask(src, model.config.pad_id)
    decoded = model.decode(step, memory, src_mask, None, cache=cache, probe=probe, between_layers=between_layers)
    return state_metric(model, decoded.hidden[:, -1], contrast).double().cpu().numpy()


def streams_after_layer(model: Transformer, layer: int, run: Run, source: Run, batch: list[HeadSite]) -> torch.Tensor:
    """The stream after encoder layer `layer` of each of the batch's runs (B, S, d_model): the run's own, but over
    each run's span the layer's output recomputed from the run's heads there with one head's the source run's.
    Past its attention a layer works on each position alone, so nothing else of it changes; spans of one length
    are recomputed together."""
    site, entering = (AttentionKind.ENCODER, layer), run.encoder_streams[layer]
    stream = run.encoder_streams[layer + 1][None].repeat(len(batch), 1, 1)
    by_length: dict[int, list[int]] = {}
    for row, (_, (start, end)) in enumerate(batch):
        by_length.setdefault(end - start, []).append(row)
    for rows in by_length.values():
        spans = [batch[row][1] for row in rows]
        heads = torch.stack([run.heads[site][:, start:end] for start, end in spans])  # (rows, H, length, d_head)
        for at, row in enumerate(rows):
            head, (start, end) = batch[row]
            heads[at, head] = source.heads[site][head, start:end]
        x = torch.stack([entering[start:end] for start, end in spans])
        out = model.encoder_layers[layer].output_from_heads(x, heads.to(x))
        for at, (row, (start, end)) in enumerate(zip(rows, spans)):
            stream[row, start:end] = out[at]
    return stream


def encoder_heads(
    model: Transformer,
    contrast: Contrast,
    run_src: list[int],
    run: Run,
    source: Run,
    per_batch: int,
    after_batch: Callable[[], None] = lambda: None,
    spans: list[Span] | None = None,
) -> np.ndarray:
    """(L, H, S): each encoder head at each position (or each span: (L, H, spans)) given the source run's output.
    Each run begins after the head's layer (`streams_after_layer`): the layers below it and the layer's attention
    are the run's own."""
    config = model.config
    spans = spans or each_position(len(run_src))
    sites = [(head, span) for head in range(config.n_heads) for span in spans]
    found = np.empty((config.n_encoder_layers, len(sites)))
    for layer in range(config.n_encoder_layers):
        for first in range(0, len(sites), per_batch):
            batch = sites[first : first + per_batch]
            start = (layer + 1, streams_after_layer(model, layer, run, source, batch))
            found[layer, first : first + len(batch)] = _metrics(model, run_src, contrast, start)
            after_batch()
    return found.reshape(config.n_encoder_layers, config.n_heads, len(spans))


def step_heads(
    model: Transformer,
    contrast: Contrast,
    run_src: list[int],
    run: Run,
    source: Run,
    kind: AttentionKind,
    after_batch: Callable[[], None] = lambda: None,
) -> np.ndarray:
    """(L_dec, H): each decoder head of `kind` at the step given the source run's output there."""
    config = model.config
    heads = list(range(config.n_heads))
    found = np.empty((config.n_decoder_layers, config.n_heads))
    step = contrast.step
    for layer in range(config.n_decoder_layers):
        edit = replacing(source.heads[(kind, layer)][:, step : step + 1], heads, [(0, 1)] * len(heads))
        found[layer] = at_the_step(model, contrast, run_src, run, len(heads), Probe(head_edits={(kind, layer): edit}))
        after_batch()
    return found


def decoder_stream(model: Transformer, contrast: Contrast, run_src: list[int], run: Run, source: Run) -> np.ndarray:
    """(L_dec + 1,): the decoder's stream at the step after each layer given the source run's (row b: boundary b)."""
    boundaries = len(source.decoder_streams)

    def patch(layer: int, x: torch.Tensor) -> torch.Tensor:
        x = x.clone()
        x[layer, 0] = source.decoder_streams[layer][contrast.step].to(x)  # the step, the one position computed
        return x

    return at_the_step(model, contrast, run_src, run, boundaries, between_layers=patch)


class PatchingStopped(Exception):
    """The caller asked the patching to stop (its visitor left, or pressed Stop): nothing was returned."""


def batches(model: Transformer, positions: int, per_batch: int, stream_sites: int | None = None) -> int:
    """The forward passes patch_every_site makes after its two recorded runs over `positions` sites (source
    positions, or words), of which `stream_sites` of the encoder's stream differ between the runs (known once they
    are made; before, every one counts: at most this many passes): what its progress counts."""
    config = model.config
    stream_sites = (config.n_encoder_layers + 1) * positions if stream_sites is None else stream_sites
    stream = -(-stream_sites // per_batch)
    heads = config.n_encoder_layers * -(-(config.n_heads * positions) // per_batch)
    return stream + heads + 2 * config.n_decoder_layers + 1


LAYER_OVERHEAD = 128  # a layer's fixed cost in a pass, as positions computed (the it pair's one-position passes)


def pass_costs(
    model: Transformer, positions: int, per_batch: int, source_len: int, step: int, stream_sites: int | None = None
) -> list[float]:
    """The work of each forward pass patch_every_site makes (as many as batches() counts, in its order): for each
    layer a pass runs, the positions it computes there (rows x positions) and a fixed cost. What a progress bar
    weighs its passes by: counted alike, the it pair's 16 passes said 2-18x the time left (its first 9 run whole
    layers over every position; the step's 7 compute one position each)."""
    config = model.config
    encoder_layers, decoder_layers = config.n_encoder_layers, config.n_decoder_layers

    def cost(rows: int, encoder_layers_run: int, decoder_positions: int) -> float:
        encoder = encoder_layers_run * (LAYER_OVERHEAD + rows * source_len)
        return encoder + decoder_layers * (LAYER_OVERHEAD + rows * decoder_positions)

    every_site = [boundary for boundary in range(encoder_layers + 1) for _ in range(positions)]
    # The sites that differ, boundary by boundary: at the embeddings only some (those left out first), above all
    boundaries = every_site if stream_sites is None else every_site[max(len(every_site) - stream_sites, 0) :]
    costs = [
        cost(len(boundaries[first : first + per_batch]), encoder_layers - boundaries[first], step + 1)
        for first in range(0, len(boundaries), per_batch)
    ]
    head_rows = config.n_heads * positions
    for layer in range(encoder_layers):
        rows = [min(per_batch, head_rows - first) for first in range(0, head_rows, per_batch)]
        costs += [cost(count, encoder_layers - layer - 1, step + 1) for count in rows]
    return costs + [cost(config.n_heads, 0, 1)] * (2 * decoder_layers) + [cost(decoder_layers + 1, 0, 1)]


def stream_sites_expected(model: Transformer, clean_src: list[int], corrupt_src: list[int], spans: list[Span]) -> int:
    """The encoder stream's sites where two sources' runs will differ, known before they run: at the embeddings the
    spans whose pieces differ (the others embed alike and are not run), above them every span (attention carries the
    difference to every position). What batches() takes as `stream_sites` to count the passes the run makes."""
    first = sum(clean_src[start:end] != corrupt_src[start:end] for start, end in spans)
    return first + model.config.n_encoder_layers * len(spans)


@torch.inference_mode()
def patch_every_site(
    model: Transformer,
    contrast: Contrast,
    noising: bool = False,
    sites_per_batch: int = SITES_PER_BATCH,
    progress: Callable[[int, int], None] | None = None,
    should_stop: Callable[[], bool] = lambda: False,
    spans: list[Span] | None = None,
) -> Patching:
    """Every site of every family patched in turn (denoising: the corrupted run given the clean run's activation
    there; noising: the other way), batched. `progress` hears (passes done, passes in all) after each forward pass;
    `should_stop` is asked then too, and PatchingStopped raised once it says yes. `spans`, if given, are the source
    positions patched together (each word's pieces: analysis.words.word_spans): the encoder's grids are by span."""
    clean, corrupt = recorded_runs(model, [contrast.clean_src, contrast.corrupt_src], contrast)
    run_src, run, source = (contrast.clean_src, clean, corrupt) if noising else (contrast.corrupt_src, corrupt, clean)
    difference = clean.metric - corrupt.metric
    spans = spans or each_position(len(run_src))
    differing = stream_sites(run.encoder_streams, source.encoder_streams, spans)
    total, done = batches(model, len(spans), sites_per_batch, len(differing)), 0

    def after_batch() -> None:
        nonlocal done
        done += 1
        if progress is not None:
            progress(done, total)
        if should_stop():
            raise PatchingStopped()

    def shares(found: np.ndarray) -> np.ndarray:
        return shares_of(found, run.metric, difference)

    stream = stream_metrics(
        model,
        contrast,
        run_src,
        run.encoder_streams,
        source.encoder_streams,
        run.metric,
        sites_per_batch,
        after_batch,
        spans,
    )
    heads = encoder_heads(model, contrast, run_src, run, source, sites_per_batch, after_batch, spans)
    cross = step_heads(model, contrast, run_src, run, source, AttentionKind.CROSS, after_batch)
    decoder = step_heads(model, contrast, run_src, run, source, AttentionKind.DECODER, after_batch)
    residual = decoder_stream(model, contrast, run_src, run, source)
    after_batch()
    return Patching(
        encoder_residual=shares(stream),
        encoder_heads=shares(heads),
        cross_heads=shares(cross),
        decoder_self_heads=shares(decoder),
        decoder_residual=shares(residual),
        metric_clean=clean.metric,
        metric_corrupt=corrupt.metric,
        noising=noising,
    )
