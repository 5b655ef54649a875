"""Activation patching of the it pair: the encoder stream's whole grid batched, against one site a pass and against
one decode of the sentence; and every site of every family (the stream, the encoder's heads at each position, the
decoder's heads and stream at the step) against one decode."""

from __future__ import annotations

import sys

from benchmarks.model_speed import Row, median_ms, table
from transformer.analysis.interventions.patching import CLEAN_EXAMPLE as CLEAN
from transformer.analysis.interventions.patching import CORRUPT_EXAMPLE as CORRUPT
from transformer.analysis.interventions.patching import contrast_of_texts, patch_encoder_stream
from transformer.analysis.interventions.sites import patch_every_site
from transformer.decoding.strategies import decode_text
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, Checkpoint, load_checkpoint


def patching_rows(checkpoint: Checkpoint, repeats: int) -> list[Row]:
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    contrast, _ = contrast_of_texts(model, tokenizer, CLEAN, CORRUPT, "il", "elle")  # "parce qu'il était"
    batched = median_ms(lambda: patch_encoder_stream(model, contrast), repeats)
    alone = median_ms(lambda: patch_encoder_stream(model, contrast, sites_per_batch=1), repeats)
    decode = median_ms(lambda: decode_text(model, tokenizer, CLEAN), repeats)
    every = median_ms(lambda: patch_every_site(model, contrast), repeats)
    sites = (model.config.n_encoder_layers + 1) * len(contrast.clean_src)
    what = f"activation patching, the encoder stream's {sites} sites of the it pair"
    return [
        Row(what + ", batched", "one site a pass", alone, batched, "≤ 0.25"),
        Row(what + ", batched", "one greedy decode of the sentence", decode, batched, "report (aim ≤ 20x)"),
        Row("activation patching, every site of the it pair, batched", "one greedy decode", decode, every, "report"),
    ]


if __name__ == "__main__":  # python -m benchmarks.patching_speed [repeats]: these rows alone, on the quiet machine
    print(table(patching_rows(load_checkpoint(DEFAULT_CHECKPOINT), int(sys.argv[1]) if len(sys.argv) > 1 else 9)))
