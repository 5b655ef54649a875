"""Integrated gradients and ALTI+ against the plain decode, and how exact each of captum's quadratures is.

python -m benchmarks.attribution_speed
"""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from captum.attr import IntegratedGradients

from transformer.analysis.attribution import gradients, measures
from transformer.analysis.contributions import contributions
from transformer.analysis.heads.importance import ablation_importance, corpus_of, gradient_importance
from transformer.analysis.heads.syntax import read_treebank, syntactic_roles
from transformer.analysis.rollout import attention_flow, rollout
from transformer.decoding.greedy import decode_with_chooser
from transformer.decoding.translate import translate_texts
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, Checkpoint, load_checkpoint
from transformer.model.attention import EXPLICIT_KEYS, attention
from transformer.model.heads import every_head

from .model_speed import Row, median_ms

SENTENCE = "A man in a blue shirt is riding a bicycle down the street next to a red car."  # 22 output tokens
COMPLETENESS_SENTENCES = ["Two dogs play.", "A man is riding a bicycle.",
                          "A little girl in a pink dress climbs the stairs.",
                          "Three people sit on a bench near the water."]  # fmt: skip


def attribution_row(checkpoint: Checkpoint, repeats: int) -> Row:
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    result = decode_with_chooser(model, tokenizer, SENTENCE)
    plain = median_ms(lambda: decode_with_chooser(model, tokenizer, SENTENCE), repeats)
    ours = median_ms(lambda: measures.attribute(model, result), max(1, repeats // 3))
    return Row(
        f"attribution, {result.steps}-token output, {gradients.DEFAULT_STEPS}-step integrated gradients",
        "greedy decode of the same sentence",
        plain,
        ours,
        "≤ 10x",
        "also gradient x input and value-weighted maps",
    )


# (rows, keys): attribution's decoder self-attention (32 interpolation points, the row above's 22 tokens), a training
# batch of about 3,000 tokens, and one of long sentences
ATTENTION_SHAPES = ((32, 22), (100, 30), (24, 128))


def attention_path_rows(repeats: int) -> list[Row]:
    """Causal self-attention of 8 heads, forward and backward, on the CPU: the explicit products, which a differentiated
    pass takes up to EXPLICIT_KEYS keys, against PyTorch's fused kernel."""
    rows = []
    for batch, keys in ATTENTION_SHAPES:
        q, k, v = (torch.randn(batch, 8, keys, 32, requires_grad=True) for _ in range(3))
        mask = torch.ones(1, 1, keys, keys, dtype=torch.bool).tril()

        def differentiated(explicit: bool) -> None:
            out = attention(q, k, v, mask)[0] if explicit else F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
            torch.autograd.grad(out, (q, k, v), torch.ones_like(out))

        fused = median_ms(lambda: differentiated(False), repeats * 3)
        explicit = median_ms(lambda: differentiated(True), repeats * 3)
        taken = "the explicit products" if keys <= EXPLICIT_KEYS else "the fused kernel"
        what = f"attention forward and backward, {batch} x {keys} keys, explicit products"
        note = f"the model takes {taken}"
        rows.append(Row(what, "PyTorch's fused kernel", fused, explicit, f"< 1 up to {EXPLICIT_KEYS} keys", note))
    return rows


def contributions_row(checkpoint: Checkpoint, repeats: int) -> Row:
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    result = decode_with_chooser(model, tokenizer, SENTENCE)
    plain = median_ms(lambda: decode_with_chooser(model, tokenizer, SENTENCE), repeats)
    ours = median_ms(lambda: contributions(model, result.src_ids, result.tgt_ids), repeats)
    return Row(
        f"ALTI+ contributions, {result.steps}-token output", "greedy decode of the same sentence", plain, ours, "≤ 2x"
    )


FLOW_SENTENCE = "A man in a blue shirt is riding a bicycle down the street next to a red car while two small children watch him from the corner."


def flow_row(checkpoint: Checkpoint, repeats: int) -> Row:
    """Attention flow of a 30-token input (its S x S maximum flows) against rollout of the same maps."""
    result = decode_with_chooser(checkpoint.model, checkpoint.tokenizer, FLOW_SENTENCE)
    maps = result.encoder_self.numpy()
    plain = median_ms(lambda: rollout(maps), repeats)
    ours = median_ms(lambda: attention_flow(maps), repeats)
    return Row(
        f"attention flow, {len(result.src_ids)}-token input, {len(maps)} layers",
        "rollout of the same maps",
        plain,
        ours,
        "≤ 1 s",
        f"{ours / 1000:.2f} s",
    )


def head_importance_rows(checkpoint: Checkpoint, sentences: list[str]) -> list[Row]:
    """Every head's importance over a sample, by ablation (each head off: greedy decodes and a teacher-forced pass)
    and by the gradient of its gate, against one greedy decode of the same sample."""
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    started = time.perf_counter()
    outputs = translate_texts(model, tokenizer, sentences)
    decoded = (time.perf_counter() - started) * 1000
    heads = len(every_head(model.config))
    reports = []  # (seconds since the start, the share of the work done), what the page's bar times its estimate by

    def heard(done: int, total: int, share: float) -> None:
        reports.append((time.perf_counter() - started, share))

    started = time.perf_counter()
    ablation_importance(model, tokenizer, sentences, outputs, progress=heard)
    ablated = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    gradient_importance(model, corpus_of(model, tokenizer, sentences, outputs))
    gradient = (time.perf_counter() - started) * 1000
    baseline = f"one greedy decode of the {len(sentences)} sentences"
    return [
        Row(
            f"head importance by ablation, {heads} heads x {len(sentences)} sentences",
            baseline,
            decoded,
            ablated,
            "≤ 2 min",
            f"{ablated / 1000:.0f} s; {time_left_said(reports, ablated / 1000)}",
        ),
        Row(
            f"head importance by gradient, {len(sentences)} sentences",
            baseline,
            decoded,
            gradient,
            "≤ 10 s",
            f"{gradient / 1000:.1f} s",
        ),
    ]


def time_left_said(reports: list[tuple[float, float]], took: float) -> str:
    """How the time left a bar says from these reports (elapsed / share x the rest) compares with the real
    remainder, over the reports with over 2 s to go."""
    ratios = [at / share * (1 - share) / (took - at) for at, share in reports if 0 < share < 1 and took - at > 2]
    if not ratios:
        return "no report with over 2 s to go"
    first = next(at for at, share in reports if share > 0)
    return (
        f"time left said from {first / took:.1%} of the run (the intact translation), "
        f"{min(ratios):.2f}-{max(ratios):.2f}x the real remainder over {len(ratios)} reports"
    )


def syntax_row(checkpoint: Checkpoint, treebank: Path, sentences: int) -> Row:
    """Every encoder head's syntactic accuracy over the treebank's first sentences, against one greedy decode of
    200 of them."""
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    parsed = read_treebank(treebank, sentences)
    sample = [sentence.text for sentence in parsed[:200]]
    started = time.perf_counter()
    translate_texts(model, tokenizer, sample)
    decoded = (time.perf_counter() - started) * 1000
    started = time.perf_counter()
    syntactic_roles(model, tokenizer, parsed)
    ours = (time.perf_counter() - started) * 1000
    return Row(
        f"syntactic roles of the encoder heads, {len(parsed):,} treebank sentences",
        f"one greedy decode of {len(sample)} of them",
        decoded,
        ours,
        "≤ 1 min (2,000)",
        f"{ours / 1000:.1f} s",
    )


def completeness_by_method(checkpoint: Checkpoint, n_steps: int = gradients.DEFAULT_STEPS) -> dict[str, float]:
    """The largest |convergence delta| / |f(input) - f(baseline)| over COMPLETENESS_SENTENCES' steps, per method."""
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    worst: dict[str, float] = {}
    for sentence in COMPLETENESS_SENTENCES:
        result = decode_with_chooser(model, tokenizer, sentence)
        steps, tokens = torch.arange(result.steps), torch.tensor(result.tgt_ids)
        src, decoder_input, embedded = gradients.embedded_inputs(model, result.src_ids, result.tgt_ids, result.steps)
        score = gradients.scorer(model, src, decoder_input)
        baselines = tuple(torch.zeros_like(e) for e in embedded)
        with torch.no_grad():
            gap = (score(*embedded, steps, tokens) - score(*baselines, steps, tokens)).abs()
        for method in ("riemann_middle", "gausslegendre", "riemann_trapezoid"):
            with torch.enable_grad():
                _, delta = IntegratedGradients(score).attribute(
                    embedded,
                    baselines,
                    additional_forward_args=(steps, tokens),
                    n_steps=n_steps,
                    method=method,
                    return_convergence_delta=True,
                )
            worst[method] = max(worst.get(method, 0.0), float((delta.abs() / gap).max()))
    return worst


def fewer_steps(checkpoint: Checkpoint, choices: tuple[int, ...] = (32, 16, 8)) -> dict[int, tuple[float, float]]:
    """What fewer interpolation steps would trade: for each count, the attribution of SENTENCE as a multiple of its
    decode, and the worst |convergence delta| / |f(input) - f(baseline)| over COMPLETENESS_SENTENCES' steps."""
    model, tokenizer = checkpoint.model, checkpoint.tokenizer
    result = decode_with_chooser(model, tokenizer, SENTENCE)
    decoded = median_ms(lambda: decode_with_chooser(model, tokenizer, SENTENCE), 7)
    traded = {}
    for n_steps in choices:
        attributed = median_ms(lambda: measures.attribute(model, result, n_steps), 3)
        worst = 0.0
        for sentence in COMPLETENESS_SENTENCES:
            found = measures.attribute(model, decode_with_chooser(model, tokenizer, sentence), n_steps)
            gap = np.abs(found.log_probs - found.baseline_log_probs)
            worst = max(worst, float((np.abs(found.convergence_delta) / gap).max()))
        traded[n_steps] = (attributed / decoded, worst)
    return traded


if __name__ == "__main__":
    loaded = load_checkpoint(DEFAULT_CHECKPOINT)
    for row in (attribution_row(loaded, 5), contributions_row(loaded, 9)):
        print(
            f"{row.what}: {row.ours_ms:.0f} ms against {row.baseline_ms:.0f} ms for the decode, ratio {row.ratio:.1f}"
        )
    for method, error in completeness_by_method(loaded).items():
        print(f"completeness, {method}: worst |delta| / |f(x) - f(baseline)| = {error:.3f}")
    print(f"(the package uses {gradients.METHOD}; sentences: {len(COMPLETENESS_SENTENCES)})")
    for n_steps, (ratio, error) in fewer_steps(loaded).items():
        print(
            f"{n_steps} interpolation steps: {ratio:.1f}x the decode; worst |delta| / |f(x) - f(baseline)| = {error:.3f}"
        )
