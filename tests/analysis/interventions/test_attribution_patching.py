"""Attribution patching (issue 82, item 4): each site's estimate is the first-order term of patching it, checked where
it is exact by construction, against finite differences of the model itself in float64, and against exact patching
(its agreement reported, not assumed)."""

from __future__ import annotations

import copy
import json

import numpy as np
import pytest
import torch
from fixtures.patching_pair import CLEAN, CORRUPT
from helpers import run_cli

from transformer.analysis.interventions.attribution_patching import agreement, attribution_patching
from transformer.analysis.interventions.patching import contrast_of_texts, step_metric
from transformer.analysis.interventions.sites import patch_every_site, recorded_runs
from transformer.io.checkpoint import DEFAULT_CHECKPOINT, load_checkpoint
from transformer.model.kinds import AttentionKind
from transformer.model.probes import Probe


@pytest.fixture(scope="module")
def the_it_pair():
    checkpoint = load_checkpoint(DEFAULT_CHECKPOINT)
    model = copy.deepcopy(checkpoint.model).double()  # float64: the finite differences below need its precision
    contrast = contrast_of_texts(model, checkpoint.tokenizer, CLEAN, CORRUPT, "il", "elle")[0]
    return model, contrast


@pytest.mark.parametrize("noising", [False, True])
def test_where_the_metric_is_linear_in_the_site_the_estimate_is_exact(the_it_pair, noising):
    """The default is post-norm: its decoder's last layer output at the step is read by the output layer alone, a
    linear map, so the estimate there is the whole difference (1, or -1 noising) as exact patching's is."""
    model, contrast = the_it_pair
    assert not model.config.norm_first
    estimate = attribution_patching(model, contrast, noising)
    exact = patch_every_site(model, contrast, noising)
    expected = -1.0 if noising else 1.0
    assert estimate.decoder_residual[-1] == pytest.approx(expected, abs=1e-9)
    assert exact.decoder_residual[-1] == pytest.approx(expected, abs=1e-6)
    assert estimate.decoder_residual[0] == 0  # the embedded decoder input: the same in both runs


def moved(base: torch.Tensor, toward: torch.Tensor, step: float, at) -> torch.Tensor:
    changed = base.clone()
    changed[at] = base[at] + step * (toward[at] - base[at])
    return changed


def test_each_estimate_is_the_derivative_of_the_model_patched_a_little_toward_the_other_run(the_it_pair):
    """Finite differences of the model itself: the corrupted run with one site moved a step t toward the clean run's
    activation changes the metric by t times the estimate (times the difference), to first order."""
    model, contrast = the_it_pair
    clean, corrupt = recorded_runs(model, [contrast.clean_src, contrast.corrupt_src], contrast)
    difference = clean.metric - corrupt.metric
    estimate = attribution_patching(model, contrast)
    source = torch.tensor([contrast.corrupt_src])
    t = 1e-4
    for layer, position in [(2, 12), (3, 11), (4, 9)]:  # encoder stream sites the exact run finds strong
        at = (position,)

        def edit(boundary, x, layer=layer, at=at):
            if boundary != layer:
                return x
            return moved(x[0], clean.encoder_streams[layer], t, at)[None]

        with torch.inference_mode():
            changed = step_metric(model, source, contrast, edit).item()
        assert (changed - corrupt.metric) / (t * difference) == pytest.approx(
            estimate.encoder_residual[layer, position], abs=1e-4
        ), (layer, position)
    for kind, layer, head in [(AttentionKind.CROSS, 2, 4), (AttentionKind.CROSS, 2, 1)]:  # heads at the step
        site = (kind, layer)

        def head_edit(outputs, site=site, head=head):
            return moved(outputs[0], clean.heads[site], t, (head, -1))[None]

        with torch.inference_mode():
            changed = step_metric(model, source, contrast, probe=Probe(head_edits={site: head_edit})).item()
        assert (changed - corrupt.metric) / (t * difference) == pytest.approx(
            estimate.cross_heads[layer, head], abs=1e-4
        ), (layer, head)


def test_on_the_it_pair_it_ranks_the_sites_as_exact_patching_does_and_says_how_far():
    checkpoint = load_checkpoint(DEFAULT_CHECKPOINT)
    contrast = contrast_of_texts(checkpoint.model, checkpoint.tokenizer, CLEAN, CORRUPT, "il", "elle")[0]
    rho, overlap = agreement(
        attribution_patching(checkpoint.model, contrast), patch_every_site(checkpoint.model, contrast)
    )
    assert rho > 0.9 and overlap >= 0.7  # measured: 0.937 and 0.8
    exact = patch_every_site(checkpoint.model, contrast)
    assert agreement(exact, exact) == (pytest.approx(1.0), 1.0)


def test_patch_set_writes_the_estimate_beside_exact_patching_and_their_agreement(tmp_path):
    pair = {"id": "it", "clean": CLEAN, "corrupt": CORRUPT, "target": "il", "foil": "elle"}
    (tmp_path / "set.jsonl").write_text(json.dumps(pair) + "\n")
    both = run_cli("patch-set", "--pairs", tmp_path / "set.jsonl", "--out", tmp_path / "both", "--method", "both")
    assert both.returncode == 0 and "attribution patching against exact: mean ρ 0.9" in both.stderr, both.stderr
    with np.load(tmp_path / "both" / "pairs" / "it.npz") as arrays:
        assert {"encoder_residual", "attribution_encoder_residual", "attribution_cross_heads"} <= set(arrays.files)
        assert not np.array_equal(arrays["encoder_residual"], arrays["attribution_encoder_residual"])
    rows = (tmp_path / "both" / "agreement.csv").read_text().splitlines()
    assert rows[0] == "id,spearman_rho,top10_overlap" and rows[1].startswith("it,0.9")
    alone = run_cli(
        "patch-set", "--pairs", tmp_path / "set.jsonl", "--out", tmp_path / "one", "--method", "attribution"
    )
    assert alone.returncode == 0, alone.stderr
    with np.load(tmp_path / "one" / "pairs" / "it.npz") as arrays:
        assert "encoder_residual" not in arrays.files and "attribution_encoder_residual" in arrays.files
    with np.load(tmp_path / "one" / "effects.npz") as effects:
        assert bool(effects["estimate"])  # an estimate says it is one
