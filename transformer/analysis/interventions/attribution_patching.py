"""Attribution patching (Nanda 2023; Syed et al. 2024): every site's effect estimated from the two recorded runs and
one backward pass, (source activation − run activation) · ∂metric/∂activation at the run patched, at the sites and
in the arrays of exact patching (`sites.Patching`), as shares of the same difference. It is the first-order term of
what patching the site would change: exact where the metric is linear in the site (the decoder's last layer output
of a post-norm model, read by the output layer alone), an estimate elsewhere, and said to be one wherever shown, with
its agreement to the exact run (`agreement`)."""

from __future__ import annotations

import numpy as np
import torch
from scipy.stats import spearmanr

from transformer.analysis.interventions.patching import Contrast, Span, each_position, step_metric
from transformer.analysis.interventions.sites import SHARE_FAMILIES, Patching, Site, recorded_runs, sublayers
from transformer.decoding.result import model_device
from transformer.model.encoder_decoder import Transformer
from transformer.model.kinds import AttentionKind
from transformer.model.probes import Probe

STRONGEST = 10  # the sites whose overlap `agreement` reports


class _Gradients:
    """∂metric/∂activation at every site of one run: each head's outputs (H, T, d_head), the encoder's stream at
    each boundary (S, d_model) and the decoder's (T, d_model), from zero additions made leaves of the graph."""

    def __init__(self, model: Transformer, src: list[int], contrast: Contrast) -> None:
        self.heads: dict[Site, torch.Tensor] = {}
        self.encoder: list[torch.Tensor] = []
        self.decoder: list[torch.Tensor] = []
        with torch.inference_mode(False), torch.enable_grad():
            probe = Probe(head_edits={site: self._adding(site) for site in sublayers(model)})
            tensor = torch.tensor([src], device=model_device(model))
            metric = step_metric(
                model, tensor, contrast, self._stream(self.encoder), None, probe, self._stream(self.decoder)
            )
            leaves = [*self.heads.values(), *self.encoder, *self.decoder]
            grads = torch.autograd.grad(metric.sum(), leaves)
        found = iter(grad[0].detach() for grad in grads)
        self.heads = {site: next(found) for site in self.heads}
        self.encoder = [next(found) for _ in self.encoder]
        self.decoder = [next(found) for _ in self.decoder]

    def _adding(self, site: Site):
        def add(outputs: torch.Tensor) -> torch.Tensor:
            self.heads[site] = torch.zeros_like(outputs, requires_grad=True)
            return outputs + self.heads[site]

        return add

    @staticmethod
    def _stream(kept: list[torch.Tensor]):
        def add(layer: int, x: torch.Tensor) -> torch.Tensor:
            kept.append(torch.zeros_like(x, requires_grad=True))
            return x + kept[-1]

        return add


@torch.inference_mode()
def attribution_patching(
    model: Transformer, contrast: Contrast, noising: bool = False, spans: list[Span] | None = None
) -> Patching:
    """Every site's estimated share (denoising: the corrupted run given the clean run's activation; noising: the
    other way), as patch_every_site's arrays; `spans` sum a word's positions as exact patching patches them
    together."""
    clean, corrupt = recorded_runs(model, [contrast.clean_src, contrast.corrupt_src], contrast)
    run_src, run, source = (contrast.clean_src, clean, corrupt) if noising else (contrast.corrupt_src, corrupt, clean)
    difference = clean.metric - corrupt.metric
    spans = spans or each_position(len(run_src))
    grads = _Gradients(model, run_src, contrast)

    def by_span(products: torch.Tensor) -> np.ndarray:  # (..., S) -> (..., spans)
        return torch.stack([products[..., start:end].sum(-1) for start, end in spans], dim=-1).double().numpy()

    encoder = [
        by_span(((s - r) * g).sum(-1))
        for s, r, g in zip(source.encoder_streams, run.encoder_streams, grads.encoder, strict=True)
    ]
    config = model.config
    heads = {site: ((source.heads[site] - run.heads[site]) * grads.heads[site]).sum(-1) for site in grads.heads}
    decoder = [
        float(((s[-1] - r[-1]) * g[-1]).sum())
        for s, r, g in zip(source.decoder_streams, run.decoder_streams, grads.decoder, strict=True)
    ]

    def at_the_step(kind: AttentionKind) -> np.ndarray:
        return np.array([heads[(kind, layer)][:, -1].double().numpy() for layer in range(config.n_decoder_layers)])

    return Patching(
        np.stack(encoder) / difference,
        np.stack([by_span(heads[(AttentionKind.ENCODER, layer)]) for layer in range(config.n_encoder_layers)])
        / difference,
        at_the_step(AttentionKind.CROSS) / difference,
        at_the_step(AttentionKind.DECODER) / difference,
        np.array(decoder) / difference,
        clean.metric,
        corrupt.metric,
        noising,
    )


def agreement(estimated: Patching, exact: Patching) -> tuple[float, float]:
    """How far the estimate can stand in for the exact run: Spearman's ρ over every site of every family, and the
    share of the exact run's STRONGEST sites (by |share|) that are among the estimate's."""
    first, second = (np.concatenate([np.ravel(getattr(p, f)) for f in SHARE_FAMILIES]) for p in (estimated, exact))
    kept = ~(np.isnan(first) | np.isnan(second))
    first, second = first[kept], second[kept]
    rho = float(spearmanr(first, second).statistic) if len(first) > 1 else float("nan")
    top = min(STRONGEST, len(first))
    strongest = [set(np.argsort(-np.abs(values))[:top].tolist()) for values in (first, second)]
    return rho, len(strongest[0] & strongest[1]) / top if top else float("nan")
