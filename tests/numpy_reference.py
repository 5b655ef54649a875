"""FORMAT.md implemented in NumPy from the document alone, as a third party would: no import of the package.

Greedy decoding of one sentence, returning the tokens and the attention maps of section 6.
"""

from __future__ import annotations

import base64
import json
import math

import numpy as np
import sentencepiece as spm
from safetensors import safe_open
from tokenizers import Tokenizer as JsonTokenizer

VERSIONS = ("1", "2", "3", "4", "5", "6")
DEFAULTS = {"d_model": 256, "n_heads": 8, "d_ff": 1024, "n_encoder_layers": 3, "n_decoder_layers": 3,
            "max_len": 256, "pad_id": 0, "unk_id": 1, "bos_id": 2, "eos_id": 3, "norm_first": False,
            "tie_embeddings": True, "positional": "sinusoidal", "activation": "relu", "layer_norm_eps": 1e-5,
            "scale_embedding": True, "sinusoid_layout": "interleaved", "decoder_start_id": None,
            "position_offset": 0, "sinusoid_frequencies": "paper", "embedding_norm": False, "norm": "layer", "bias": True,
            "attention_scale": True, "feed_forward": "plain", "scale_output": False, "relative_buckets": 32,
            "relative_max_distance": 128}  # fmt: skip


class ReferenceModel:
    def __init__(self, path: str) -> None:
        with safe_open(path, framework="numpy") as file:
            metadata = file.metadata()
            self.w = {name: file.get_tensor(name).astype(np.float32) for name in file.keys()}
        assert metadata["format"] == "transformer-explorer-checkpoint" and metadata["format_version"] in VERSIONS
        self.c = DEFAULTS | json.loads(metadata["config"])
        self.json_tokenizer = self.sp = self.vocabulary = None
        if "tokenizer_json" in metadata:
            self.json_tokenizer = JsonTokenizer.from_str(metadata["tokenizer_json"])
            index = self.json_tokenizer.get_vocab(with_added_tokens=True)
        else:
            self.sp = spm.SentencePieceProcessor()
            self.sp.LoadFromSerializedProto(base64.b64decode(metadata["tokenizer"]))
            self.vocabulary = json.loads(metadata["vocabulary"]) if "vocabulary" in metadata else None
            index = {piece: i for i, piece in enumerate(self.vocabulary or [])}
        self.source_code = [index[metadata["source_prefix"]]] if "source_prefix" in metadata else []
        self.target_code = [index[metadata["target_prefix"]]] if "target_prefix" in metadata else []
        self.source_end = [] if metadata.get("source_eos") == "false" else [self.c["eos_id"]]
        c = self.c
        self.start = c["bos_id"] if c["decoder_start_id"] is None else c["decoder_start_id"]
        self.d_head = c["d_model"] // c["n_heads"]

    # section 3
    def source_ids(self, text: str) -> list[int]:
        if self.json_tokenizer is not None:
            ids = self.json_tokenizer.encode(text, add_special_tokens=False).ids
        elif self.vocabulary is None:
            ids = self.sp.EncodeAsIds(text)
        else:
            index = {piece: i for i, piece in enumerate(self.vocabulary)}
            code = []
            if text.startswith(">>") and "<<" in text:
                code, text = [text[: text.index("<<") + 2]], text[text.index("<<") + 2 :]
            ids = [index.get(piece, self.c["unk_id"]) for piece in code + self.sp.EncodeAsPieces(text)]
        ids = self.source_code + ids + self.source_end
        kept = self.c["max_len"] - len(self.source_end)
        return ids if len(ids) <= self.c["max_len"] else ids[:kept] + self.source_end

    # section 5
    def linear(self, name: str, x: np.ndarray) -> np.ndarray:
        return x @ self.w[f"{name}.weight"].T + (self.w[f"{name}.bias"] if self.c["bias"] else 0)

    def layer_norm(self, name: str, x: np.ndarray) -> np.ndarray:
        if self.c["norm"] == "rms":
            return x / np.sqrt((x * x).mean(-1, keepdims=True) + self.c["layer_norm_eps"]) * self.w[f"{name}.weight"]
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        return (x - mean) / np.sqrt(var + self.c["layer_norm_eps"]) * self.w[f"{name}.weight"] + self.w[f"{name}.bias"]

    def relative_bias(self, side: str, queries: int, keys: int) -> np.ndarray:
        """(H, queries, keys): section 5.2's buckets of key minus query position, looked up per head."""
        relative = np.arange(keys)[None, :] - np.arange(queries)[:, None]
        buckets, bucket = self.c["relative_buckets"], np.zeros_like(relative)
        if side == "src":
            buckets //= 2
            bucket += (relative > 0) * buckets
            distance = np.abs(relative)
        else:
            distance = -np.minimum(relative, 0)
        exact = buckets // 2
        with np.errstate(divide="ignore", invalid="ignore"):  # log(0) for distance 0: np.where drops it
            large = exact + (
                np.log(distance.astype(np.float32) / exact)
                / np.float32(math.log(self.c["relative_max_distance"] / exact))
                * (buckets - exact)
            ).astype(np.int64)
        bucket += np.where(distance < exact, distance, np.minimum(large, buckets - 1))
        return self.w[f"{side}_position.relative_bias"][bucket].transpose(2, 0, 1)

    def positions(self, side: str, length: int) -> np.ndarray:
        first = self.c["position_offset"]
        if self.c["positional"] == "relative":
            return np.zeros((length, self.c["d_model"]), dtype=np.float32)
        if self.c["positional"] == "learned":
            return self.w[f"{side}_position.table"][first : first + length]
        d = self.c["d_model"]
        k = math.ceil(d / 2)
        if self.c["sinusoid_frequencies"] == "tensor2tensor":
            omega = np.exp(-np.arange(k, dtype=np.float64) * math.log(10000.0) / (k - 1))
        else:
            omega = np.exp(-2 * np.arange(k, dtype=np.float64) * math.log(10000.0) / d)
        angles = np.arange(first, first + length, dtype=np.float64)[:, None] * omega[None, :]
        table = np.zeros((length, d), dtype=np.float64)
        if self.c["sinusoid_layout"] == "halves":
            table[:, :k], table[:, k:] = np.sin(angles), np.cos(angles[:, : d - k])
        else:
            table[:, 0::2], table[:, 1::2] = np.sin(angles), np.cos(angles[:, : d - k])
        return table.astype(np.float32)

    def embed(self, side: str, ids: list[int]) -> np.ndarray:
        matrix = self.w[
            "src_embed.lookup.weight" if side == "src" or self.c["tie_embeddings"] else "tgt_embed.lookup.weight"
        ]
        scale = math.sqrt(self.c["d_model"]) if self.c["scale_embedding"] else 1.0
        x = matrix[ids] * np.float32(scale) + self.positions(side, len(ids))
        return self.layer_norm(f"{side}_position.norm", x) if self.c["embedding_norm"] else x

    def attention(self, prefix: str, x_q: np.ndarray, x_kv: np.ndarray, mask: np.ndarray, bias=None):
        q, k, v = (self.linear(f"{prefix}.{p}_proj", x) for p, x in (("q", x_q), ("k", x_kv), ("v", x_kv)))
        heads, maps = [], []
        for h in range(self.c["n_heads"]):
            columns = slice(h * self.d_head, (h + 1) * self.d_head)
            scores = q[:, columns] @ k[:, columns].T
            if self.c["attention_scale"]:
                scores = scores / np.float32(math.sqrt(self.d_head))
            if bias is not None:
                scores = scores + bias[h]
            scores = np.where(mask, scores, -np.inf)
            scores = np.exp(scores - scores.max(-1, keepdims=True))
            p_attn = scores / scores.sum(-1, keepdims=True)
            maps.append(p_attn)
            heads.append(p_attn @ v[:, columns])
        return self.linear(f"{prefix}.out_proj", np.concatenate(heads, axis=1)), np.stack(maps)

    def block(self, name: str, x: np.ndarray, sublayer) -> tuple[np.ndarray, np.ndarray | None]:
        if self.c["norm_first"]:
            out, maps = sublayer(self.layer_norm(name, x))
            return x + out, maps
        out, maps = sublayer(x)
        return self.layer_norm(name, x + out), maps

    def feed_forward(self, prefix: str, x: np.ndarray) -> tuple[np.ndarray, None]:
        h = self.linear(f"{prefix}.feed_forward.inner", x)
        if self.c["activation"] == "relu":
            h = np.maximum(h, 0)
        elif self.c["activation"] == "gelu":
            h = h * 0.5 * (1 + np.vectorize(math.erf)(h / math.sqrt(2))).astype(np.float32)
        elif self.c["activation"] == "gelu_tanh":
            h = 0.5 * h * (1 + np.tanh(np.float32(math.sqrt(2 / math.pi)) * (h + np.float32(0.044715) * h**3)))
        else:
            h = h / (1 + np.exp(-h))
        if self.c["feed_forward"] == "gated":
            h = h * self.linear(f"{prefix}.feed_forward.gate", x)
        return self.linear(f"{prefix}.feed_forward.outer", h), None

    def encode(self, src: list[int]) -> tuple[np.ndarray, np.ndarray]:
        x = self.embed("src", src)
        keys = np.array(src) != self.c["pad_id"]
        bias = self.relative_bias("src", len(src), len(src)) if self.c["positional"] == "relative" else None
        maps = []
        for i in range(self.c["n_encoder_layers"]):
            p = f"encoder_layers.{i}"
            x, m = self.block(
                f"{p}.attn_block.norm", x, lambda h: self.attention(f"{p}.self_attn", h, h, keys[None], bias)
            )
            x, _ = self.block(f"{p}.ff_block.norm", x, lambda h: self.feed_forward(p, h))
            maps.append(m)
        return (self.layer_norm("encoder_norm", x) if self.c["norm_first"] else x), np.stack(maps)

    def decode(self, src: list[int], memory: np.ndarray, decoder_input: list[int]):
        y = self.embed("tgt", decoder_input)
        t = len(decoder_input)
        real = np.array(decoder_input) != self.c["pad_id"]
        real[0] = True
        self_mask = np.tril(np.ones((t, t), dtype=bool)) & real[None]
        source_keys = (np.array(src) != self.c["pad_id"])[None]
        bias = self.relative_bias("tgt", t, t) if self.c["positional"] == "relative" else None
        self_maps, cross_maps = [], []
        for i in range(self.c["n_decoder_layers"]):
            p = f"decoder_layers.{i}"
            y, s = self.block(
                f"{p}.self_block.norm", y, lambda h: self.attention(f"{p}.self_attn", h, h, self_mask, bias)
            )
            y, x = self.block(
                f"{p}.cross_block.norm", y, lambda h: self.attention(f"{p}.cross_attn", h, memory, source_keys)
            )
            y, _ = self.block(f"{p}.ff_block.norm", y, lambda h: self.feed_forward(p, h))
            self_maps.append(s)
            cross_maps.append(x)
        if self.c["norm_first"]:
            y = self.layer_norm("decoder_norm", y)
        generator = self.w["src_embed.lookup.weight" if self.c["tie_embeddings"] else "generator.weight"]
        if self.c["scale_output"]:
            y = y * np.float32(self.c["d_model"] ** -0.5)
        logits = y @ generator.T + (self.w["generator.bias"] if self.c["bias"] else 0)
        log_probs = logits - logits.max(-1, keepdims=True)
        log_probs = log_probs - np.log(np.exp(log_probs).sum(-1, keepdims=True))
        return log_probs, np.stack(self_maps), np.stack(cross_maps)

    # section 7
    def greedy(self, text: str) -> dict[str, np.ndarray | list[int]]:
        src = self.source_ids(text)
        memory, encoder_self = self.encode(src)
        output: list[int] = []
        for _ in range(min(self.c["max_len"], 2 * len(src) + 10)):
            log_probs, _, _ = self.decode(src, memory, [self.start, *output])
            forced = self.target_code[len(output)] if len(output) < len(self.target_code) else None
            output.append(int(np.argmax(log_probs[-1])) if forced is None else forced)
            if output[-1] == self.c["eos_id"]:
                break
        _, decoder_self, cross = self.decode(src, memory, [self.start, *output[:-1]])
        return {
            "src_ids": src,
            "tgt_ids": output,
            "encoder_self": encoder_self,
            "decoder_self": decoder_self,
            "cross": cross,
        }
