"""How much each output token drew on each source token and on each token already written, through the whole model:
ALTI (Ferrando, Gállego and Costa-jussà 2022) for the encoder, ALTI+ (Ferrando, Gállego, Alastruey, Escolano and
Costa-jussà 2022) for the decoder.

An attention block's output at position i is a sum of one vector per input token j: the heads' weighted values of j
through W_O (A_ij W_O V_j, summed over the heads), plus the residual stream x_i for j = i (in the cross block, the
residual is a vector of its own: the target position's stream). A post-norm block's layer norm is linear once its
standard deviation is fixed, so each vector is put through it with the position's own σ_i = sqrt(var + ε): the
vectors then add up to the block's real output exactly (the biases, b_O and the norm's β, belong to no token). A
pre-norm block's norm is inside each token's value (it reads token j alone), so nothing needs linearising.

Token j's contribution to position i is d_ij = max(0, ||y_i||_1 - ||y_i - T_i(x_j)||_1), the output y_i's L1 norm
less the distance of j's vector from it, and each row is divided by its sum (the papers' L1 distance and their
"min_sum" normalisation, as in the authors' code). The feed-forward blocks and the final norms act on each token
alone and mix nothing. Layers are rolled out as attention rollout does (Abnar and Zuidema 2020): the encoder's
C_L ... C_1; in the decoder, each layer's cross-attention contributions reach the source through the encoder's
rollout, and its residual share carries the self-attention contributions, which reach the previous layer's mix of
source and prefix.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from transformer.model.encoder_decoder import Transformer
from transformer.model.kinds import AttentionKind
from transformer.model.probes import Probe, SublayerRecord


@dataclass(frozen=True)
class Contributions:
    """ALTI and ALTI+ of one source and one output, each row non-negative and summing to 1.

    Rows of `alti_plus` are output steps; its columns are the source tokens, then the decoder's input tokens (the
    start token and the output so far): step t draws on prefix columns 0 .. t only.
    """

    encoder: np.ndarray  # (S, S) the encoder output's contributions from the source tokens, rolled out
    alti_plus: np.ndarray  # (T, S + T) each output step's contributions from the source and the decoder input
    layers: dict[AttentionKind, np.ndarray]  # per layer, not rolled out: (L, S, S), (L, T, T), (L, T, S + 1)

    @property
    def source_share(self) -> np.ndarray:
        """(T,) how much of each output step came from the source rather than from the output so far."""
        return self.alti_plus[:, : self.encoder.shape[0]].sum(axis=1)


def residual_block(model: Transformer, kind: AttentionKind, layer: int) -> nn.Module:
    """The residual block (its norm and where the norm sits) around one attention sublayer."""
    if kind is AttentionKind.ENCODER:
        return model.encoder_layers[layer].attn_block
    decoder_layer = model.decoder_layers[layer]
    return decoder_layer.self_block if kind is AttentionKind.DECODER else decoder_layer.cross_block


CHUNK_BYTES = 8 * 2**20  # the float64 vectors of one chunk of query rows: the peak is a few times this


def block_vectors(
    module: nn.Module, block: nn.Module, record: SublayerRecord, kind: AttentionKind
) -> tuple[torch.Tensor, torch.Tensor]:
    """One attention block's output decomposed by input token, in float64: the vectors (T_q, T_k, d_model), a cross
    block's with its residual as one more column, and the output they add up to with the biases, (T_q, d_model).
    All rows at once: (T_q, T_k, d_model) grows with the square of the length; `vector_chunks` bounds it."""
    chunks = list(vector_chunks(module, block, record, kind, max_bytes=None))
    return torch.cat([vectors for vectors, _ in chunks]), torch.cat([output for _, output in chunks])


def vector_chunks(
    module: nn.Module, block: nn.Module, record: SublayerRecord, kind: AttentionKind, max_bytes: int | None
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """`block_vectors` a few query rows at a time, each chunk's vectors within max_bytes (None: all rows at once).
    Each row's vectors depend on that row alone, the post-norm's σ included."""
    p_attn, context, stream = record.p_attn[0].double(), record.context[0].double(), record.stream[0].double()
    heads, d_head = module.n_heads, module.d_head
    weight = module.v_proj.weight.double()
    values = context @ weight.T + (0 if module.v_proj.bias is None else module.v_proj.bias.double())
    values = values.view(len(context), heads, d_head).transpose(0, 1)  # (H, T_k, d_head)
    out_weight = module.out_proj.weight.double().T.reshape(heads, d_head, -1)  # (H, d_head, d_model)
    keys_out = values @ out_weight  # (H, T_k, d_model): each key's value through W_O, per head
    # W_O's bias belongs to no token; none (T5's) is zero, on the stream's device as everything here
    out_bias = torch.zeros_like(stream[0]) if module.out_proj.bias is None else module.out_proj.bias.double()
    queries, columns = p_attn.size(1), p_attn.size(2) + (kind is AttentionKind.CROSS)
    row_bytes = columns * keys_out.size(-1) * keys_out.element_size()
    step = queries if max_bytes is None else max(1, max_bytes // row_bytes)
    for start in range(0, queries, step):
        rows = slice(start, min(start + step, queries))
        vectors = torch.einsum("hqk,hkf->qkf", p_attn[:, rows], keys_out)
        if kind is AttentionKind.CROSS:
            vectors = torch.cat([vectors, stream[rows, None, :]], dim=1)
        else:
            diagonal = torch.arange(rows.start, rows.stop, device=vectors.device)
            vectors[diagonal - rows.start, diagonal] += stream[rows]  # x_i added to (i, i)
        if block.norm_first:
            yield vectors, vectors.sum(dim=1) + out_bias
        else:
            yield normalised(block.norm, vectors, out_bias)


def normalised(norm: nn.Module, vectors: torch.Tensor, out_bias: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """A post-norm block's vectors through its norm, linearised with each position's own statistics, and the
    norm's output they add up to (with the biases)."""
    summed = vectors.sum(dim=1) + out_bias  # (T_q, d_model): the norm's input, x + sublayer(x)
    gain = norm.weight.double() if norm.weight is not None else torch.ones_like(out_bias)
    eps = norm.eps if norm.eps is not None else torch.finfo(norm.weight.dtype).eps
    if isinstance(norm, nn.LayerNorm):
        scale = (summed.var(dim=-1, unbiased=False) + eps).rsqrt()[:, None, None]
        centred = vectors - vectors.mean(dim=-1, keepdim=True)
        bias_term = (out_bias - out_bias.mean()) * scale[:, 0] * gain
        if norm.bias is not None:
            bias_term = bias_term + norm.bias.double()
    else:  # RMS norm: a scale, no centring
        scale = (summed.pow(2).mean(dim=-1) + eps).rsqrt()[:, None, None]
        centred = vectors
        bias_term = out_bias * scale[:, 0] * gain
    transformed = centred * scale * gain
    return transformed, transformed.sum(dim=1) + bias_term


def contribution_matrix(vectors: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    """ALTI's contributions (T_q, T_k): d_ij = max(0, ||y_i||_1 - ||y_i - T_i(x_j)||_1), each row divided by its
    sum (a row with nothing left, which no trained model gives, is spread evenly)."""
    closeness = output.abs().sum(dim=-1, keepdim=True) - (output[:, None, :] - vectors).abs().sum(dim=-1)
    closeness = closeness.clamp(min=0)
    totals = closeness.sum(dim=-1, keepdim=True)
    even = torch.full_like(closeness, 1 / closeness.size(1))
    return torch.where(totals > 0, closeness / totals.clamp(min=torch.finfo(totals.dtype).tiny), even)


def rolled_out(encoder_layers: list[torch.Tensor], self_layers: list[torch.Tensor], cross_layers: list[torch.Tensor]):
    """The encoder's rollout (S, S) and ALTI+ (T, S + T) from each layer's contributions."""
    sources = encoder_layers[0].size(0)
    encoder = torch.eye(sources, dtype=torch.float64)
    for layer in encoder_layers:
        encoder = layer @ encoder
    steps = self_layers[0].size(0)
    mix = torch.cat([torch.zeros(steps, sources, dtype=torch.float64), torch.eye(steps, dtype=torch.float64)], dim=1)
    for self_layer, cross in zip(self_layers, cross_layers):
        through_self = (self_layer * cross[:, -1:]) @ mix  # the residual's share, spread by the self block
        mix = through_self + torch.cat([cross[:, :-1] @ encoder, torch.zeros(steps, steps, dtype=torch.float64)], 1)
        mix = mix / mix.sum(dim=-1, keepdim=True)
    return encoder, mix


@torch.inference_mode()
def contributions(
    model: Transformer, src_ids: list[int], tgt_ids: list[int], chunk_bytes: int = CHUNK_BYTES
) -> Contributions:
    """ALTI of the encoder and ALTI+ of every output step, in one teacher-forced pass on tgt_ids (the model in
    eval mode: dropout would change the outputs the vectors must add up to), each block's vectors made chunk_bytes
    at a time."""
    if model.training:
        raise ValueError("contributions need the model in eval mode")
    device = next(model.parameters()).device
    config = model.config
    sites = [(AttentionKind.ENCODER, layer) for layer in range(config.n_encoder_layers)]
    sites += [
        (kind, layer)
        for layer in range(config.n_decoder_layers)
        for kind in (AttentionKind.DECODER, AttentionKind.CROSS)
    ]
    probe = Probe(record_at=frozenset(sites))
    decoder_input = torch.tensor([[config.start_id, *tgt_ids[:-1]]], device=device)
    model(torch.tensor([src_ids], device=device), decoder_input, probe=probe)
    layers: dict[AttentionKind, list[torch.Tensor]] = {kind: [] for kind in AttentionKind}
    for kind, layer in sites:
        module, block, record = (
            kind.module(model, layer),
            residual_block(model, kind, layer),
            probe.records[(kind, layer)],
        )
        chunks = vector_chunks(module, block, record, kind, max_bytes=chunk_bytes)
        layers[kind].append(torch.cat([contribution_matrix(vectors, output).cpu() for vectors, output in chunks]))
    encoder, alti_plus = rolled_out(
        layers[AttentionKind.ENCODER], layers[AttentionKind.DECODER], layers[AttentionKind.CROSS]
    )
    return Contributions(
        encoder.numpy(), alti_plus.numpy(), {kind: torch.stack(found).numpy() for kind, found in layers.items()}
    )
