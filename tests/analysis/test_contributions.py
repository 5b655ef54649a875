"""ALTI and ALTI+ against a second implementation written here from the papers' equations, in NumPy float64 and
independent of the model's torch code (its own forward pass from the weights); the decomposition exact; the
reversal model's contributions on the reversed positions."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers import run_cli, tiny_config

from transformer.analysis.contributions import block_vectors, contributions, residual_block
from transformer.decoding.greedy import decode_with_chooser
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint
from transformer.model.encoder_decoder import Transformer
from transformer.model.kinds import AttentionKind
from transformer.model.probes import Probe

REVERSE = DEFAULT_CHECKPOINT.with_name("reverse.safetensors")


class Reference:
    """The model's forward pass and ALTI+ from the equations, on its weights in float64."""

    def __init__(self, model: Transformer) -> None:
        self.w = {name: value.detach().double().numpy() for name, value in model.state_dict().items()}
        self.config = model.config
        self.eps = model.config.layer_norm_eps

    def positions(self, count: int) -> np.ndarray:
        d = self.config.d_model
        table = np.zeros((count, d))
        angle = np.arange(count)[:, None] / 10000 ** (np.arange(0, d, 2) / d)
        table[:, 0::2], table[:, 1::2] = np.sin(angle), np.cos(angle)
        return table

    def embedded(self, name: str, ids: list[int]) -> np.ndarray:
        return self.w[f"{name}.lookup.weight"][ids] * np.sqrt(self.config.d_model) + self.positions(len(ids))

    def norm(self, name: str, x: np.ndarray) -> np.ndarray:
        centred = x - x.mean(-1, keepdims=True)
        return (
            centred / np.sqrt(x.var(-1, keepdims=True) + self.eps) * self.w[f"{name}.weight"] + self.w[f"{name}.bias"]
        )

    def linear(self, name: str, x: np.ndarray) -> np.ndarray:
        return x @ self.w[f"{name}.weight"].T + self.w[f"{name}.bias"]

    def attention(self, name: str, queries: np.ndarray, context: np.ndarray, causal: bool):
        """p (H, T_q, T_k), and each key's vector through W_O per head, summed with p: (T_q, T_k, d)."""
        heads = self.config.n_heads
        split = lambda x: x.reshape(len(x), heads, -1).transpose(1, 0, 2)  # noqa: E731
        q, k, v = (
            split(self.linear(f"{name}.{p}_proj", x)) for p, x in (("q", queries), ("k", context), ("v", context))
        )
        scores = q @ k.transpose(0, 2, 1) / np.sqrt(q.shape[-1])
        if causal:
            scores = np.where(np.tril(np.ones(scores.shape[1:], bool)), scores, -np.inf)
        p = np.exp(scores - scores.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        w_o = self.w[f"{name}.out_proj.weight"]  # (d, H * d_head)
        per_head = np.stack([v[h] @ w_o[:, h * v.shape[2] : (h + 1) * v.shape[2]].T for h in range(heads)])
        return np.einsum("hqk,hkf->qkf", p, per_head)

    def block(self, name: str, norm: str, x: np.ndarray, context: np.ndarray | None, causal: bool):
        """The block's new stream and ALTI's row-normalised contributions (a cross block: its residual last)."""
        pre = self.config.norm_first
        queries = self.norm(norm, x) if pre else x
        keys = context if context is not None else queries
        vectors = self.attention(name, queries, keys, causal)
        if context is None:
            vectors[np.arange(len(x)), np.arange(len(x))] += x
        else:
            vectors = np.concatenate([vectors, x[:, None]], axis=1)
        bias = self.w[f"{name}.out_proj.bias"]
        total = vectors.sum(1) + bias
        if pre:
            y = total
        else:
            sigma = np.sqrt(total.var(-1) + self.eps)[:, None, None]
            y = self.norm(norm, total)
            vectors = (vectors - vectors.mean(-1, keepdims=True)) / sigma * self.w[f"{norm}.weight"]
        d = np.maximum(0, np.abs(y).sum(-1)[:, None] - np.abs(y[:, None] - vectors).sum(-1))
        return y, d / d.sum(-1, keepdims=True)

    def feed_forward(self, name: str, norm: str, x: np.ndarray) -> np.ndarray:
        inner = lambda h: self.linear(f"{name}.outer", np.maximum(0, self.linear(f"{name}.inner", h)))  # noqa: E731
        return x + inner(self.norm(norm, x)) if self.config.norm_first else self.norm(norm, x + inner(x))

    def alti_plus(self, src_ids: list[int], tgt_ids: list[int]) -> tuple[np.ndarray, np.ndarray]:
        x, encoder = self.embedded("src_embed", src_ids), np.eye(len(src_ids))
        for layer in range(self.config.n_encoder_layers):
            at = f"encoder_layers.{layer}"
            x, c = self.block(f"{at}.self_attn", f"{at}.attn_block.norm", x, None, False)
            x = self.feed_forward(f"{at}.feed_forward", f"{at}.ff_block.norm", x)
            encoder = c @ encoder
        memory = self.norm("encoder_norm", x) if self.config.norm_first else x
        y = self.embedded("tgt_embed", [self.config.start_id, *tgt_ids[:-1]])
        steps, sources = len(tgt_ids), len(src_ids)
        rolled = None
        for layer in range(self.config.n_decoder_layers):
            at = f"decoder_layers.{layer}"
            y, own = self.block(f"{at}.self_attn", f"{at}.self_block.norm", y, None, True)
            y, cross = self.block(f"{at}.cross_attn", f"{at}.cross_block.norm", y, memory, False)
            y = self.feed_forward(f"{at}.feed_forward", f"{at}.ff_block.norm", y)
            # The authors' combination: cross-attention's source part through the encoder, and its residual
            # share spreading the self-attention's, which reaches the previous layer's mix.
            joint = np.concatenate([cross[:, :sources] @ encoder, own * cross[:, -1:]], axis=1)
            if rolled is None:
                rolled = joint
                continue
            new_prefix = joint[:, sources:] @ rolled[:, sources:]
            new_source = joint[:, sources:] @ rolled[:, :sources] + joint[:, :sources]
            rolled = np.concatenate([new_source, new_prefix], axis=1)
            rolled /= rolled.sum(-1, keepdims=True)
        assert steps == rolled.shape[0]
        return encoder, rolled


@pytest.fixture(scope="module", params=["post-norm", "pre-norm"])
def tiny(request, tokenizer):
    torch.manual_seed(3)
    config = tiny_config(tokenizer, norm_first=request.param == "pre-norm", tie_embeddings=False, dropout=0.0)
    return with_random_norms(Transformer(config).eval())


def with_random_norms(model: Transformer) -> Transformer:
    """Norms of gain 1 and bias 0 (as initialised) would hide a wrong σ: every vector of a row scales alike."""
    with torch.no_grad():
        for name, parameter in model.named_parameters():
            if ".norm." in name or name.startswith("encoder_norm") or name.startswith("decoder_norm"):
                parameter.copy_(torch.randn_like(parameter) * 0.3 + (1 if name.endswith("weight") else 0))
    return model


def test_alti_plus_equals_a_numpy_implementation_from_the_equations(tiny):
    src_ids, tgt_ids = [5, 9, 14, 22, 7, 3], [11, 4, 30, 8, 3]
    found = contributions(tiny, src_ids, tgt_ids)
    encoder, alti_plus = Reference(tiny).alti_plus(src_ids, tgt_ids)
    np.testing.assert_allclose(found.encoder, encoder, atol=1e-6)  # the model computes in float32
    np.testing.assert_allclose(found.alti_plus, alti_plus, atol=1e-6)  # the model computes in float32
    assert found.alti_plus.shape == (5, 6 + 5) and found.layers[AttentionKind.CROSS].shape == (3, 5, 6 + 1)


def test_every_row_is_a_share_and_a_step_draws_on_no_later_token(tiny):
    found = contributions(tiny, [5, 9, 14, 22, 7, 3], [11, 4, 30, 8, 3])
    for matrix in (found.encoder, found.alti_plus, *found.layers.values()):
        assert (matrix >= 0).all()
        np.testing.assert_allclose(matrix.sum(-1), 1, atol=1e-12)
    prefix = found.alti_plus[:, 6:]
    assert np.abs(np.triu(prefix, 1)).max() == 0  # step t reads the decoder input up to position t only
    assert ((found.source_share > 0) & (found.source_share < 1)).all()


@pytest.mark.parametrize("norm,bias", [("layer", True), ("rms", True), ("rms", False)])  # T5's: RMS, no biases
def test_each_blocks_vectors_add_up_to_its_real_output(tokenizer, norm, bias):
    torch.manual_seed(4)
    for norm_first in (False, True):
        config = tiny_config(tokenizer, norm=norm, norm_first=norm_first, bias=bias, dropout=0.0)
        model = with_random_norms(Transformer(config).eval())
        sites = [(kind, 1) for kind in AttentionKind]
        probe = Probe(record_at=frozenset(sites))
        with torch.inference_mode():
            model(torch.tensor([[5, 9, 14, 3]]), torch.tensor([[2, 11, 4]]), probe=probe)
        for kind, layer in sites:
            record, block = probe.records[(kind, layer)], residual_block(model, kind, layer)
            vectors, output = block_vectors(kind.module(model, layer), block, record, kind)
            real = record.stream + record.output
            real = real if norm_first else block.norm(real)
            torch.testing.assert_close(output.float(), real[0], atol=1e-5, rtol=1e-5)


def test_the_reversal_models_outputs_draw_most_on_the_reversed_words():
    checkpoint = load_checkpoint(REVERSE)
    result = decode_with_chooser(checkpoint.model, checkpoint.tokenizer, "one two three four five six seven")
    found = contributions(checkpoint.model, result.src_ids, result.tgt_ids)
    words = len(result.src_ids) - 1  # and </s>
    assert found.alti_plus[:words, : words + 1].argmax(1).tolist() == list(range(words - 1, -1, -1))
    assert found.source_share.min() > 0.5  # a copying task: mostly from the source


def test_contributions_on_the_command_line_for_the_decode_and_for_a_given_translation(tmp_path):
    out = tmp_path / "c.npz"
    text = "one two three four five six seven"
    done = run_cli("contributions", "--text", text, "--checkpoint", str(REVERSE), "--out", str(out))
    assert done.returncode == 0 and done.stdout.strip() == " ".join(reversed(text.split())), done.stderr
    arrays = np.load(out)
    steps, sources = len(arrays["tgt_pieces"]), len(arrays["src_pieces"])
    assert arrays["alti_plus"].shape == (steps, sources + steps) and arrays["encoder_alti"].shape == (sources, sources)
    assert arrays["flow"].shape == (sources, sources) and np.allclose(arrays["flow"].sum(1), 1, atol=1e-6)
    np.testing.assert_allclose(arrays["source_share"], arrays["alti_plus"][:, :sources].sum(1))
    assert "from the source: seven " in done.stderr
    forced = tmp_path / "f.json"
    flags = ["--target", "two one", "--checkpoint", str(REVERSE), "--out", str(forced), "--format", "json"]
    done = run_cli("contributions", "--text", "one two", *flags)
    assert done.returncode == 0, done.stderr
    assert np.array(json.loads(forced.read_text())["alti_plus"]).shape == (3, 3 + 3)
    empty = run_cli("contributions", "--text", "one two", "--target", " ", *flags[2:])  # was read as no --target
    assert empty.returncode == 2 and "--target is empty" in empty.stderr and empty.stderr.count("\n") == 1


def test_contributions_made_a_row_at_a_time_are_the_same(tiny):
    src_ids, tgt_ids = [5, 9, 14, 22, 7, 3], [11, 4, 30, 8, 3]
    whole, by_rows = contributions(tiny, src_ids, tgt_ids), contributions(tiny, src_ids, tgt_ids, chunk_bytes=1)
    np.testing.assert_allclose(by_rows.alti_plus, whole.alti_plus, rtol=0, atol=1e-14)
    np.testing.assert_allclose(by_rows.encoder, whole.encoder, rtol=0, atol=1e-14)


MEMORY_SCRIPT = """
import re, torch
from helpers import tiny_config
from transformer.analysis.contributions import contributions
from transformer.model.encoder_decoder import Transformer
from transformer.text.tokenizer import train_tokenizer
from helpers import make_sentences
torch.manual_seed(0)
config = tiny_config(train_tokenizer(make_sentences(200), vocab_size=60), d_model=512, n_heads=8, d_ff=64,
                     n_encoder_layers=1, n_decoder_layers=1, max_len=512)
model = Transformer(config).eval()
before = int(re.search(r"VmRSS:\\s+(\\d+)", open("/proc/self/status").read()).group(1))
contributions(model, [5] * 400, [6] * 300)
peak = int(re.search(r"VmHWM:\\s+(\\d+)", open("/proc/self/status").read()).group(1))
print((peak - before) // 1024)
"""


def test_the_memory_of_contributions_stays_bounded_on_a_long_input():
    """A block's vectors are (T_q, T_k, d_model) float64: 400 tokens at d_model 512 are 650 MB at once, and the
    temporaries took the process 2.6 GB above its start; made a few rows at a time, 0.2 to 0.6 GB (the allocator's
    reuse varies)."""
    tests = Path(__file__).parents[1]
    done = subprocess.run(
        [sys.executable, "-c", MEMORY_SCRIPT],
        capture_output=True,
        text=True,
        cwd=tests.parent,
        env={"PYTHONPATH": f"{tests}:{tests.parent}", "PATH": "/usr/bin:/bin"},
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert int(done.stdout.strip()) < 1000, f"contributions grew the memory by {done.stdout.strip()} MB"
