"""Model-side figures: cached decode, recording attention, training step, beam, the decode's lower bound."""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn

from tests.fixtures.baselines import recompute_greedy
from transformer.decoding.beam import beam_search, beam_search_ids
from transformer.decoding.greedy import decode_with_chooser, generate
from transformer.decoding.result import source_ids
from transformer.decoding.strategies import DecodeSettings
from transformer.decoding.translate import translate_texts
from transformer.io.checkpoint import Checkpoint
from transformer.model.attention import side_by_side
from transformer.model.embeddings import sinusoidal_table
from transformer.model.encoder_decoder import Transformer

SENTENCE = "A man in a red shirt is riding a bicycle down the street while two dogs run beside him."


@dataclass(frozen=True)
class Row:
    """One line of the printed table: ours against the baseline measured in the same run."""

    what: str
    baseline: str
    baseline_ms: float | None
    ours_ms: float
    target: str
    note: str = ""

    @property
    def ratio(self) -> float | None:
        return None if self.baseline_ms is None else self.ours_ms / self.baseline_ms


def table(rows: list[Row]) -> str:
    lines = [
        "| what | baseline (same run) | baseline ms | ours ms | ours / baseline | target | note |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for row in rows:
        baseline = "" if row.baseline_ms is None else f"{row.baseline_ms:.1f}"
        ratio = "" if row.ratio is None else f"{row.ratio:.3f}"
        lines.append(
            f"| {row.what} | {row.baseline} | {baseline} | {row.ours_ms:.1f} | {ratio} | {row.target} | {row.note} |"
        )
    return "\n".join(lines)


def median_ms(run: Callable[[], object], repeats: int, warmup: int = 1) -> float:
    for _ in range(warmup):
        run()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        run()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def no_eos_chooser(eos_id: int):
    """Greedy, but never stops: every run produces exactly the asked number of tokens."""

    def choose(log_probs: torch.Tensor) -> torch.Tensor:
        return log_probs.index_fill(-1, torch.tensor([eos_id], device=log_probs.device), float("-inf")).argmax(-1)

    return choose


def decode_rows(checkpoint: Checkpoint, repeats: int) -> list[Row]:
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    ids, _ = source_ids(tokenizer, SENTENCE, model.config.max_len)
    src = torch.tensor([ids])
    choose = no_eos_chooser(model.config.eos_id)
    steps = 60
    cached = median_ms(lambda: generate(model, src, steps, choose, need_weights=True), repeats)
    recompute = median_ms(lambda: recompute_greedy(model, ids, steps, choose), repeats)
    silent = median_ms(lambda: generate(model, src, steps, choose, need_weights=False), repeats)
    greedy = median_ms(lambda: decode_with_chooser(model, tokenizer, SENTENCE), repeats)
    beam = median_ms(lambda: beam_search(model, tokenizer, SENTENCE, width=5), repeats)
    return [
        Row("greedy decode, 60 tokens, attention recorded", "full recompute per step", recompute, cached, "≤ 1/3"),
        Row("recording every attention map", "same decode recording nothing", silent, cached, "≤ 1.25"),
        Row("beam search, width 5", "greedy, same sentence", greedy, beam, "report"),
    ]


def batched_beam_row(checkpoint: Checkpoint, sentences: list[str]) -> Row:
    """Beam 5 over many sentences: translate_texts' batches against one beam search per sentence (what
    translate_texts did before, recording no attention either)."""
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    settings = DecodeSettings(strategy="beam", beam_width=5)
    started = time.perf_counter()
    sources = [source_ids(tokenizer, text, model.config.max_len)[0] for text in sentences]
    alone = [tokenizer.decode(beam_search_ids(model, ids, 5, settings.length_penalty).tokens) for ids in sources]
    alone_ms = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    batched = translate_texts(model, tokenizer, sentences, settings)
    batched_ms = (time.perf_counter() - started) * 1000
    same = sum(a == b for a, b in zip(alone, batched))
    return Row(
        f"beam 5 over {len(sentences)} sentences, batched",
        "one beam search per sentence",
        alone_ms,
        batched_ms,
        "≤ 1/3",
        f"same output for {same}/{len(sentences)}",
    )


def corpus_batch_row(checkpoint: Checkpoint, sentences: list[str], batch_size: int) -> Row:
    """Greedy over a file in the Corpus page's batches against translate_texts' default of 64: smaller
    batches let the progress bar move (the last batch of 64, the longest sentences, held it still)."""
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    timings = {}
    for size in (64, batch_size, 64, batch_size):  # interleaved: a noisy machine slows both alike
        started = time.perf_counter()
        translate_texts(model, tokenizer, sentences, batch_size=size)
        timings.setdefault(size, []).append((time.perf_counter() - started) * 1000)
    return Row(
        f"greedy over {len(sentences)} sentences, batches of {batch_size} (Corpus page)",
        "batches of 64",
        min(timings[64]),
        min(timings[batch_size]),
        "≤ 1.5",
        "best of two each",
    )


def step_products(model: Transformer) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """The weights one cached decode step multiplies a row by, transposed as the step reads them, in its
    order: each decoder layer's Q/K/V side by side, W_O, the cross-attention's W_Q and W_O and the
    feed-forward's two; then the generator. (The cross-attention keys and values are projected once.)"""

    def transposed(linear: nn.Linear) -> tuple[torch.Tensor, torch.Tensor]:
        return linear.weight.detach().t().contiguous(), linear.bias.detach()

    products = []
    for layer in model.decoder_layers:
        products.append(side_by_side(*(p.detach() for p in layer.self_attn.query_key_value_parameters())))
        products += map(transposed, (layer.self_attn.out_proj, layer.cross_attn.q_proj, layer.cross_attn.out_proj))
        products += map(transposed, (layer.feed_forward.inner, layer.feed_forward.outer))
    return [*products, transposed(model.generator)]


def products_alone_ms(products: list[tuple[torch.Tensor, torch.Tensor]], steps: int, repeats: int) -> float:
    """A step's weight products and nothing else, `steps` times in a row as a decode runs them: what reading
    the weights costs here, with whatever the caches keep of them between steps."""
    rows = {weight.size(0): torch.randn(1, weight.size(0)) for weight, _ in products}

    def decode_alone() -> None:
        for _ in range(steps):
            for weight, bias in products:
                torch.addmm(bias, rows[weight.size(0)], weight)

    with torch.inference_mode():
        return median_ms(decode_alone, repeats) / steps


def lower_bound_row(checkpoint: Checkpoint, repeats: int) -> Row:
    """FLOPs of one cached decode step over the machine's measured matmul rate, against the measured step."""
    config = checkpoint.config
    d, d_ff, vocab, layers = config.d_model, config.d_ff, config.tgt_vocab_size, config.n_decoder_layers
    src_len, position = 20, 30  # a typical sentence, mid-way through its output
    per_layer = 4 * d * d + 2 * d * d + 2 * d * (position + src_len) + 2 * d * d_ff  # multiply-adds
    flops = 2 * (layers * per_layer + d * vocab)
    a, b = torch.randn(1024, 1024), torch.randn(1024, 1024)
    matmul_ms = median_ms(lambda: a @ b, repeats * 5, warmup=3)
    rate = 2 * 1024**3 / (matmul_ms / 1000)  # FLOP/s
    bound_ms = flops / rate * 1000
    model = checkpoint.model
    ids, _ = source_ids(checkpoint.tokenizer, SENTENCE, config.max_len)
    src = torch.tensor([ids])
    choose = no_eos_chooser(config.eos_id)
    steps = 60
    step_ms = median_ms(lambda: generate(model, src, steps, choose, need_weights=False), repeats) / steps
    products = step_products(model)
    alone_ms = products_alone_ms(products, steps, repeats)
    weight_bytes = sum(weight.numel() + bias.numel() for weight, bias in products) * 4
    note = (
        f"{flops / 1e6:.1f} MFLOP/step at {rate / 1e9:.0f} GFLOP/s matmul (1024², fp32); 10x that bound is "
        f"{10 * bound_ms:.2f} ms, but the step's {len(products)} weight products alone (the same "
        f"{weight_bytes / 1e6:.1f} MB of weights, nothing else) take {alone_ms:.2f} ms here "
        f"({weight_bytes / alone_ms / 1e6:.0f} GB/s): the step is {step_ms / alone_ms:.2f}x that floor"
    )
    return Row(
        "one decode step vs its FLOP lower bound", "FLOPs / measured matmul rate", bound_ms, step_ms, "report", note
    )


class ReferenceTransformer(nn.Module):
    """torch.nn.Transformer with the same sizes, embeddings, sinusoidal positions and output layer as ours."""

    def __init__(self, model: Transformer) -> None:
        super().__init__()
        c = model.config
        self.scale = math.sqrt(c.d_model)
        self.embed = nn.Embedding(c.src_vocab_size, c.d_model)
        self.register_buffer("table", sinusoidal_table(c.max_len, c.d_model))
        self.core = nn.Transformer(
            c.d_model, c.n_heads, c.n_encoder_layers, c.n_decoder_layers, c.d_ff, c.dropout, batch_first=True
        )
        self.generator = nn.Linear(c.d_model, c.tgt_vocab_size)
        self.generator.weight = self.embed.weight
        self.pad_id = c.pad_id

    def forward(self, src: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
        def inputs(ids: torch.Tensor) -> torch.Tensor:
            return self.embed(ids) * self.scale + self.table[: ids.size(1)]

        causal = nn.Transformer.generate_square_subsequent_mask(tgt.size(1))
        hidden = self.core(
            inputs(src),
            inputs(tgt),
            tgt_mask=causal,
            src_key_padding_mask=src == self.pad_id,
            tgt_key_padding_mask=tgt == self.pad_id,
            memory_key_padding_mask=src == self.pad_id,
            tgt_is_causal=True,
        )
        return self.generator(hidden)


def training_row(checkpoint: Checkpoint, repeats: int) -> Row:
    config = checkpoint.config
    torch.manual_seed(0)
    batch, length = 128, 16  # 2,048 source + 2,048 target tokens
    src = torch.randint(4, config.src_vocab_size, (batch, length))
    tgt = torch.randint(4, config.tgt_vocab_size, (batch, length))
    ours = Transformer(config).train()
    reference = ReferenceTransformer(ours).train()

    def step(model: nn.Module, logits: Callable[[], torch.Tensor], optimizer: torch.optim.Optimizer) -> None:
        loss = nn.functional.cross_entropy(logits().reshape(-1, config.tgt_vocab_size), tgt.reshape(-1))
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        optimizer.step()

    ours_optimizer = torch.optim.Adam(ours.parameters(), lr=1e-4)
    reference_optimizer = torch.optim.Adam(reference.parameters(), lr=1e-4)
    ours_ms = median_ms(lambda: step(ours, lambda: ours.logits(src, tgt), ours_optimizer), repeats)
    reference_ms = median_ms(lambda: step(reference, lambda: reference(src, tgt), reference_optimizer), repeats)
    return Row(
        "training step (fwd+bwd+Adam), 4,096 tokens",
        "torch.nn.Transformer, same sizes",
        reference_ms,
        ours_ms,
        "≤ 1.25",
    )


def cpu_name() -> str:
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "unknown CPU"


def machine() -> str:
    """What the figures were measured on: the processor, the threads, torch's build."""
    return f"{cpu_name()}, {torch.get_num_threads()} torch threads, torch {torch.__version__}"
