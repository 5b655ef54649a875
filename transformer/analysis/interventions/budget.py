"""What patching every site of a pair costs, asked before it runs: its forward passes (`sites.batches`) and what one
pass of a batch of patched runs holds (each run's attention scores and probabilities over the source and the output,
and its activations). An upload of 60 encoder layers of 16 heads, within every parameter budget, made 3,200 passes
of a 200-word pair, and with 1,000 words a pass held gigabytes: the server reached 8.1 GB in 90 s."""

from __future__ import annotations

from transformer.analysis.interventions.patching import SITES_PER_BATCH, Contrast, Span
from transformer.analysis.interventions.sites import batches
from transformer.decoding.strategies import NUMBER_BYTES, longest_fitting
from transformer.model.config import TransformerConfig
from transformer.model.encoder_decoder import Transformer


class PatchingTooLarge(ValueError):
    """A patching run past the passes or the memory it is allowed."""


def pass_numbers(config: TransformerConfig, source_len: int, target_len: int, per_batch: int) -> int:
    """The numbers one forward pass of `per_batch` patched runs holds at its largest: each run's scores and
    probabilities of every head (encoder S², cross T·S, decoder T²) and its activations at every position."""
    maps = 2 * config.n_heads * (source_len**2 + target_len * source_len + target_len**2)
    activations = (source_len + target_len) * (6 * config.d_model + config.d_ff)
    return per_batch * (maps + activations)


def check_patching(
    model: Transformer,
    source_len: int,
    target_len: int,
    positions: int,
    per_batch: int,
    limit_bytes: int | None,
    max_passes: int | None = None,
) -> int:
    """The passes patching every site of a pair makes (`positions` source sites: pieces, or words); PatchingTooLarge,
    saying how short a pair fits, where they are more than `max_passes` or one holds more than `limit_bytes`."""
    config, passes = model.config, batches(model, positions, per_batch)
    per_site = positions / source_len  # words: fewer sites than pieces

    def fits(length: int) -> bool:
        over_passes = (
            max_passes is not None and batches(model, max(1, round(length * per_site)), per_batch) > max_passes
        )
        holds = NUMBER_BYTES * pass_numbers(config, length, target_len, per_batch)
        return not over_passes and (limit_bytes is None or holds <= limit_bytes)

    if fits(source_len):
        return passes
    holds = NUMBER_BYTES * pass_numbers(config, source_len, target_len, per_batch)
    why = (
        f"{passes:,} forward passes, over the {max_passes:,} one run may make here"
        if max_passes is not None and passes > max_passes
        else f"passes of {per_batch} patched runs that hold {holds / 1e9:.1f} GB each, over the "
        f"{limit_bytes / 1e9:.1f} GB one may hold here"  # type: ignore[operator]
    )
    shorter = longest_fitting(fits, source_len)
    said = (
        f"shorten the sentences to at most {shorter:,} pieces (they have {source_len:,})" if shorter else "no pair fits"
    )
    raise PatchingTooLarge(f"patching every site of this pair takes {why}: {said}")


def check_contrast(
    model: Transformer,
    contrast: Contrast,
    spans: list[Span] | None,
    limit_bytes: int | None,
    max_passes: int | None = None,
) -> int:
    """check_patching() of a contrast's pair, patched by the spans given (each piece where None) in passes of
    SITES_PER_BATCH: a set's pairs are held to it one by one."""
    positions = len(spans or contrast.clean_src)
    return check_patching(
        model, len(contrast.clean_src), len(contrast.output), positions, SITES_PER_BATCH, limit_bytes, max_passes
    )
