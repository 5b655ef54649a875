"""Translating many sentences at once: batched greedy decoding or beam search, no attention kept."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from transformer.decoding.beam import beam_search_batch
from transformer.decoding.greedy import default_max_new_tokens, generate, greedy_chooser, sampling_chooser
from transformer.decoding.result import model_device, padded, source_ids
from transformer.decoding.strategies import DecodeSettings
from transformer.model.encoder_decoder import Transformer
from transformer.model.probes import Probe
from transformer.text.tokenizer import TokenizerBase

# What one batch's decoding state may hold (each sentence's keys and values in every decoder layer, for every beam):
# a deep model's batch of 64 held gigabytes where the shipped default's holds megabytes (measured:
# docs/performance.md).
BATCH_STATE_BYTES = 1 << 30


DEFAULT_TRANSLATE_BATCH = (
    64  # sentences a batch of translate_texts decodes at most, unless told (the app's bars: work.TRANSLATE_BATCH)
)


def batch_rows(model: Transformer, settings: DecodeSettings, batch_size: int) -> int:
    """The most sentences a batch decodes at once: batch_size, fewer where their keys and values (self and cross
    attention, every decoder layer, at the model's longest, each beam) would pass BATCH_STATE_BYTES."""
    config = model.config
    beams = settings.beam_width if settings.strategy == "beam" else 1
    per_sentence = config.n_decoder_layers * 4 * config.max_len * config.d_model * 4 * beams
    return max(1, min(batch_size, BATCH_STATE_BYTES // per_sentence))


def translate_texts(
    model: Transformer,
    tokenizer: TokenizerBase,
    texts: Sequence[str],
    settings: DecodeSettings = DecodeSettings(),
    batch_size: int = DEFAULT_TRANSLATE_BATCH,
    progress: Callable[[int], None] | None = None,
    probe: Probe | None = None,
) -> list[str]:
    """Translations in input order; an empty line translates to an empty line.

    Sentences are decoded in batches of similar lengths: greedy, sampling (one seeded generator for the
    batch) or beam search (each sentence its own beam). A probe (heads switched off) applies to greedy and
    sampling, not to beam search.
    """
    if probe is not None and settings.strategy == "beam":
        raise ValueError("heads can be switched off for greedy decoding or sampling, not for beam search")
    device = model_device(model)
    pad = model.config.pad_id
    batch_size = batch_rows(model, settings, batch_size)
    outputs = [""] * len(texts)
    sources = {i: source_ids(tokenizer, text, model.config.max_len)[0] for i, text in enumerate(texts) if text.strip()}
    order = sorted(sources, key=lambda i: len(sources[i]))  # similar lengths batch with little padding

    def limit(source_length: int) -> int:
        return settings.max_new_tokens or default_max_new_tokens(model, source_length)

    if settings.strategy == "beam":
        return _beam_texts(model, tokenizer, sources, order, settings, batch_size, limit, outputs, progress)
    choose = (
        sampling_chooser(settings.temperature, settings.top_k, settings.seed)
        if settings.strategy == "sampling"
        else greedy_chooser
    )
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        longest = max(len(sources[i]) for i in chunk)
        src = padded([sources[i] for i in chunk], pad, device)
        tokens = generate(
            model,
            src,
            limit(longest),
            choose,
            prefix=tokenizer.target_prefix_ids,
            probe=probe,
            tokens_only=True,
        ).tokens
        for row, i in enumerate(chunk):  # each sentence keeps the length limit it has alone
            outputs[i] = tokenizer.decode(tokens[row, : limit(len(sources[i]))].tolist())
        if progress:
            progress(len(chunk))
    return outputs


def _beam_texts(
    model: Transformer,
    tokenizer: TokenizerBase,
    sources: dict[int, list[int]],
    order: list[int],
    settings: DecodeSettings,
    batch_size: int,
    limit: Callable[[int], int],
    outputs: list[str],
    progress: Callable[[int], None] | None,
) -> list[str]:
    """translate_texts' beam search: each sentence its own beam, in batches of similar lengths."""
    for start in range(0, len(order), batch_size):
        chunk = order[start : start + batch_size]
        found = beam_search_batch(
            model,
            [sources[i] for i in chunk],
            settings.beam_width,
            settings.length_penalty,
            [limit(len(sources[i])) for i in chunk],
            tokenizer.target_prefix_ids,
        )
        for i, tokens in zip(chunk, found):
            outputs[i] = tokenizer.decode(tokens)
        if progress:
            progress(len(chunk))
    return outputs
