"""Patching every site is budgeted by its passes and what each pass holds, asked before it runs (issue 81, item 9):
the deep upload with 200 words made 3,200 passes, and with 1,000 words `patch` reached 8.1 GB in 90 s."""

from __future__ import annotations

import pytest
from fixtures.crafted import deep_upload
from fixtures.patching_pair import CLEAN, CORRUPT
from helpers import errors, run_cli, start

from transformer.analysis.interventions import sites
from transformer.analysis.interventions.budget import PatchingTooLarge, check_patching, pass_numbers
from transformer.analysis.interventions.patching import SITES_PER_BATCH
from transformer.analysis.interventions.sites import batches
from transformer.io import memory
from transformer.io.checkpoint import save_checkpoint


def test_a_run_past_its_passes_is_refused_saying_how_short_a_pair_makes_few_enough():
    model, _ = deep_upload()
    assert batches(model, 201, SITES_PER_BATCH) > 3000  # 200 words and the end
    with pytest.raises(PatchingTooLarge, match=r"takes 3,\d{3} forward passes, over the 1,000 .* at most (\d+) pieces"):
        check_patching(model, 201, 10, 201, SITES_PER_BATCH, 1 << 30, max_passes=1000)
    passes = check_patching(model, 60, 10, 60, SITES_PER_BATCH, 1 << 30, max_passes=1000)  # what it said fits
    assert passes == batches(model, 60, SITES_PER_BATCH) <= 1000


def test_a_pass_holding_more_than_the_limit_is_refused_whatever_the_passes():
    model, _ = deep_upload()
    holds = 4 * pass_numbers(model.config, 1001, 20, SITES_PER_BATCH)
    assert holds > 1 << 30  # 64 runs' maps over 1,001 pieces
    with pytest.raises(
        PatchingTooLarge, match=r"passes of 64 patched runs that hold \d+\.\d GB each, over the 1\.1 GB"
    ):
        check_patching(model, 1001, 20, 1001, SITES_PER_BATCH, 1 << 30)


def test_the_command_line_refuses_in_one_line_before_it_decodes_or_patches(tmp_path, monkeypatch):
    model, tokenizer = deep_upload()
    save_checkpoint(tmp_path / "deep.safetensors", model, tokenizer)
    monkeypatch.setattr(memory, "memory_available", lambda: 1 << 30)
    monkeypatch.setattr(sites, "patch_every_site", lambda *a, **k: pytest.fail("patched"))
    sentence = " ".join(["w1"] * 999)
    done = run_cli(
        "patch",
        "--checkpoint",
        tmp_path / "deep.safetensors",
        "--clean",
        sentence,
        "--corrupt",
        sentence.replace("w1", "w2", 1),
        "--target",
        "w1",
        "--out",
        tmp_path / "p.npz",
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "shorten the sentence" in done.stderr, done.stderr
    assert not (tmp_path / "p.npz").exists()


def test_the_command_line_says_the_passes_before_it_runs(tmp_path):
    out = tmp_path / "p.npz"
    done = run_cli("patch", "--clean", CLEAN, "--corrupt", CORRUPT, "--target", "il", "--foil", "elle", "--out", out)
    assert done.returncode == 0 and "patching every site: 17 forward passes at most" in done.stderr, done.stderr


def test_the_cause_page_refuses_past_its_passes_before_the_run(monkeypatch):
    import ui.services.models as models

    monkeypatch.setattr(models, "PATCH_MAX_PASSES", 5)
    monkeypatch.setattr(models, "patch_every_site", lambda *a, **k: pytest.fail("patched"))
    at = start().switch_page("pages/cause.py").run()
    at = at.button[0].click().run()  # Try the example
    assert not at.exception
    assert "Cannot patch: patching every site of this pair takes 17 forward passes, over the 5" in errors(at), errors(
        at
    )
