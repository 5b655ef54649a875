import re
import subprocess
import sys
from dataclasses import replace

import numpy as np
import pytest
import sacrebleu
import torch
from helpers import REPO, reversal_corpus, reversal_settings, run_cli, start, step_view, tiny_training_options, upload

from transformer.io.checkpoint import load_checkpoint, update_metadata
from transformer.training.evaluate import score
from transformer.training.state import Progress
from transformer.training.train import time_left, train


def test_translate_and_inspect_end_to_end(tmp_path, checkpoint_path):
    done = subprocess.run(
        [sys.executable, "-m", "transformer", "translate", "--checkpoint", str(checkpoint_path)],
        input="the dog\n\na cat\n",
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr
    assert len(done.stdout.split("\n")) == 4  # three lines out, in order
    out = tmp_path / "maps.npz"
    done = run_cli("inspect", "--checkpoint", str(checkpoint_path), "--text", "the red ball", "--out", str(out))
    assert done.returncode == 0, done.stderr
    arrays = np.load(out)
    layers, heads, steps, src = arrays["cross"].shape
    assert arrays["encoder_self"].shape == (2, heads, src, src)
    assert arrays["decoder_self"].shape == (layers, heads, steps, steps)
    assert arrays["topk_probs"].shape[0] == steps == len(arrays["tgt_pieces"])
    assert arrays["layer_top_pieces"].shape == arrays["layer_top_probs"].shape == (layers, steps, 5)
    assert arrays["layer_chosen_rank"].shape == arrays["layer_chosen_probs"].shape == (layers, steps)
    assert list(arrays["layer_top_pieces"][-1, :, 0]) == list(arrays["topk_pieces"][:, 0])  # the last layer's guess


def test_bad_bytes_cost_only_their_own_line(tmp_path):
    done = run_cli("translate", stdin=b"A dog.\n\xff\nTwo cats.\n")
    out, err = done.stdout, done.stderr
    assert done.returncode == 1 and "Traceback" not in err, err
    assert out.count("\n") == 3 and out.split("\n")[0] and out.split("\n")[2] and not out.split("\n")[1]
    assert "line 2 is not UTF-8 text (byte 0xff" in err
    (tmp_path / "latin1.txt").write_bytes("Un caf\xe9.\nA dog runs.\n".encode("latin-1"))
    done = run_cli("translate", "--input", str(tmp_path / "latin1.txt"))
    assert done.returncode == 1 and "line 1 is not UTF-8 text (byte 0xe9 at byte 7 of the line)" in done.stderr
    assert done.stdout.split("\n")[1]  # the good line is translated
    done = subprocess.run(
        [sys.executable, "-m", "transformer", "inspect", "--text", b"\xff", "--out", tmp_path / "x"],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=300,
    )
    assert (
        done.returncode == 2
        and done.stderr == "error: --text is not UTF-8 text (byte 0xff); give the sentence as UTF-8\n"
    )


def test_a_directory_as_input_is_one_clear_line(tmp_path):
    done = run_cli("translate", "--input", str(tmp_path))
    assert (
        done.returncode == 2
        and done.stderr == f"error: {tmp_path} is a directory: give a text file, one sentence a line\n"
    )


def test_the_command_line_says_when_it_cuts_a_long_sentence(tmp_path):
    long = " ".join(["the dog runs in the park"] * 40)
    done = run_cli("inspect", "--text", long, "--out", str(tmp_path / "maps.npz"))
    assert done.returncode == 0 and "note: The sentence is longer than this model reads (128 tokens" in done.stderr
    done = run_cli("translate", stdin=f"A dog.\n{long}\n")
    assert done.returncode == 0 and "line 2: The sentence is longer" in done.stderr and "line 1" not in done.stderr


def test_cli_reports_bad_checkpoints_clearly(tmp_path):
    bad = tmp_path / "bad.safetensors"
    bad.write_bytes(b"nonsense")
    done = run_cli("translate", "--checkpoint", str(bad), stdin="hello\n")
    assert done.returncode == 2 and "error:" in done.stderr and "Traceback" not in done.stderr


def test_evaluate_bleu_equals_sacrebleu():
    hypotheses, references = ["le chat est assis", "un chien court"], ["le chat est assis .", "un chien rouge court"]
    assert score(hypotheses, references).bleu == sacrebleu.corpus_bleu(hypotheses, [references]).score


def test_evaluate_scores_several_sets_and_widths_in_one_table_or_says_what_is_missing(checkpoint_path, tmp_path):
    first, second = tmp_path / "flores.dev.en", tmp_path / "news.en"
    first.write_text("two dogs run\n"), second.write_text("a cat sleeps\na man walks\n")
    references = [str(tmp_path / "flores.dev.fr"), str(tmp_path / "news.fr")]
    (tmp_path / "flores.dev.fr").write_text("deux chiens courent\n")
    (tmp_path / "news.fr").write_text("un chat dort\nun homme marche\n")
    args = ["evaluate", "--checkpoint", str(checkpoint_path), "--src", str(first), str(second), "--ref", *references]
    done = run_cli(*args, "--beam", "1", "3")
    assert done.returncode == 0, done.stderr
    rows = [line.split(" | ")[:2] for line in done.stdout.splitlines()[2:]]
    assert rows == [["| flores.dev", "greedy"], ["| flores.dev", "beam 3"], ["| news", "greedy"], ["| news", "beam 3"]]
    done = run_cli(*args[:-1])  # two sources, one reference
    assert done.returncode == 2 and "2 source files but 1 reference files" in done.stderr


def test_training_lowers_the_loss_and_writes_a_loadable_checkpoint(tmp_path):
    progress = train(reversal_settings(tmp_path, epochs=3), quiet=True)
    assert sum(progress.loss_curve[-5:]) < sum(progress.loss_curve[:5])
    loaded = load_checkpoint(tmp_path / "m.safetensors")
    assert loaded.metadata["training"]["steps"] == progress.step
    assert len(loaded.metadata["training"]["validation"]) == 3
    # the validation file's name and the lines read from it (it held the sentences themselves)
    assert loaded.metadata["data"]["val 1"] == {"path": str(reversal_settings(tmp_path).val_src[0]), "lines": 20}


def test_resumed_training_equals_uninterrupted(tmp_path):
    whole_dir, parts_dir = tmp_path / "whole", tmp_path / "parts"
    whole_dir.mkdir(), parts_dir.mkdir()
    whole = train(reversal_settings(whole_dir), quiet=True)
    interrupted = train(reversal_settings(parts_dir, max_steps=whole.step // 2 + 1), quiet=True)
    assert interrupted.step == whole.step // 2 + 1
    resumed = train(reversal_settings(parts_dir), resume=True, quiet=True)
    a = load_checkpoint(whole_dir / "m.safetensors").model.state_dict()
    b = load_checkpoint(parts_dir / "m.safetensors").model.state_dict()
    if torch.cuda.is_available():
        # CUDA's kernels sum in an order that varies from run to run (atomics, split reductions): two identical
        # runs already differ in the 7th digit of the loss (3.828808069 against 3.828807592), and bfloat16 can
        # round such a difference up to its own step of 2**-8. So on CUDA: equal to bfloat16's precision.
        assert np.allclose(resumed.loss_curve, whole.loss_curve, rtol=2**-8)
        assert all(torch.allclose(a[k], b[k], rtol=2**-8, atol=1e-4) for k in a)
    else:  # on the CPU every kernel is deterministic: bit for bit
        assert resumed.loss_curve == whole.loss_curve
        assert all(torch.equal(a[k], b[k]) for k in a)


def test_a_lost_run_continues_from_its_checkpoint(tmp_path):
    """The run directory gone (a new machine), its shipped checkpoint holds enough to go on: the weights, the
    vocabulary and the progress (the next epoch is the second, validated as such), Adam's moments anew."""
    first_dir, lost_dir = tmp_path / "first", tmp_path / "lost"
    first_dir.mkdir(), lost_dir.mkdir()
    first = train(reversal_settings(first_dir, epochs=1), quiet=True)
    shipped = first_dir / "m.safetensors"
    went_on = train(reversal_settings(lost_dir, epochs=2), quiet=True, continue_from=shipped)
    assert went_on.epoch == 2 and went_on.step > first.step
    assert [e["epoch"] for e in went_on.epochs] == [1, 2] and went_on.epochs[0] == first.epochs[0]
    assert len(went_on.loss_curve) == went_on.step
    assert went_on.loss_curve[first.step] < np.mean(first.loss_curve[:5])  # began where the first run ended
    best = load_checkpoint(lost_dir / "m.safetensors")  # the shipped one until an epoch beats it, whole curves
    assert best.tokenizer.model_proto == load_checkpoint(shipped).tokenizer.model_proto
    assert len(best.metadata["training"]["validation"]) == 2
    (tmp_path / "notes.txt").write_text("not a checkpoint")
    done = run_cli(
        *_train_command(tmp_path),
        "--out",
        str(tmp_path / "x.safetensors"),
        "--continue-from",
        str(tmp_path / "notes.txt"),
    )
    assert done.returncode == 2 and done.stderr.count("\n") == 1 and "cannot continue from" in done.stderr


def test_max_seconds_is_the_budget_of_this_call_not_of_the_whole_run(tmp_path):
    """A run that has trained for days goes on for a session's hour: --max-seconds counts from this call, so a
    continued run is not stopped after its first epoch because of the time its earlier calls took."""
    first_dir, later_dir = tmp_path / "first", tmp_path / "later"
    first_dir.mkdir(), later_dir.mkdir()
    train(reversal_settings(first_dir, epochs=1), quiet=True)
    days = 3 * 24 * 3600.0
    update_metadata(first_dir / "m.safetensors", lambda metadata: metadata["training"].update(seconds=days))
    went_on = train(
        reversal_settings(later_dir, epochs=3, max_seconds=3600), quiet=True, continue_from=first_dir / "m.safetensors"
    )
    assert went_on.epoch == 3  # before: stopped after epoch 2, the run's days being over the hour
    assert went_on.elapsed_seconds > days  # the run's own clock still counts the whole run
    # The bar's estimate (epochs of ten 1-second batches, nine to go) allows what is left of this call's budget.
    settings, long_run = reversal_settings(later_dir, epochs=9, max_seconds=30), Progress(elapsed_seconds=days)
    assert time_left(settings, long_run, 10, 1.0, call_seconds=0.0) == "0m30s"  # this epoch and two more
    assert time_left(settings, long_run, 10, 1.0, call_seconds=25.0) == "0m10s"  # this epoch only
    assert time_left(replace(settings, max_seconds=0), long_run, 10, 1.0, call_seconds=25.0) == "1m30s"


@pytest.mark.parametrize(
    "variant",
    [["--norm-first"], ["--activation", "gelu"], ["--positional", "learned"], ["--no-tie-embeddings"]],
    ids=["pre-norm", "gelu", "learned-positions", "untied"],
)
def test_each_model_variant_trains_from_the_command_line_and_opens_in_the_app(tmp_path, variant):
    from transformer.cli import main

    out = tmp_path / "variant.safetensors"
    assert main([*_train_command(tmp_path), *variant, "--out", str(out)]) == 0
    config = load_checkpoint(out).config
    expected = {
        "pre-norm": ("norm_first", True),
        "gelu": ("activation", "gelu"),
        "learned-positions": ("positional", "learned"),
        "untied": ("tie_embeddings", False),
    }
    name, value = expected[
        {
            "--norm-first": "pre-norm",
            "--activation": "gelu",
            "--positional": "learned-positions",
            "--no-tie-embeddings": "untied",
        }[variant[0]]
    ]
    assert getattr(config, name) == value and config.d_model == 16
    at = upload(start(), "variant.safetensors", out.read_bytes())
    assert not at.error and at.session_state["checkpoint"] == "variant (uploaded)"
    at = at.switch_page("pages/explorer.py").run()
    assert not at.exception and step_view(at)["steps"] >= 1  # the steps' candidates and attention sent


def _train_command(tmp_path) -> list[str]:
    """`train` on a tiny reversal task, as typed on the command line (without --out)."""
    s, t = reversal_corpus(tmp_path, 120, seed=5)
    data = ["train", "--train-src", s, "--train-tgt", t, "--val-src", s, "--val-tgt", t]
    sizes = tiny_training_options(epochs=1, val_limit=10)
    return [*data, *sizes]


@pytest.fixture
def trained_with_state(tmp_path):
    """A finished one-epoch run: its checkpoint and the resumable state beside it."""
    out = tmp_path / "m.safetensors"
    assert run_cli(*_train_command(tmp_path), "--out", str(out)).returncode == 0
    return tmp_path, out, out.with_suffix(".state.safetensors")


def test_a_corrupt_training_state_is_one_clear_line_and_the_checkpoint_is_kept(trained_with_state):
    tmp_path, out, state = trained_with_state
    best = out.read_bytes()
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])  # a disk that filled during a save
    done = run_cli(*_train_command(tmp_path), "--out", str(out), "--resume", "--epochs", "2")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1 and str(state) in done.stderr and "without --resume" in done.stderr
    assert out.read_bytes() == best


def test_resuming_with_another_model_names_the_differing_settings(trained_with_state):
    tmp_path, out, _ = trained_with_state
    done = run_cli(*_train_command(tmp_path), "--out", str(out), "--resume", "--d-model", "32", "--n-heads", "4")
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.count("\n") == 1
    assert "--d-model 16 there, 32 here" in done.stderr and "--n-heads 2 there, 4 here" in done.stderr


def test_a_resumed_run_may_change_its_dropout(trained_with_state):
    from transformer.training.state import load_state

    tmp_path, out, state = trained_with_state
    assert load_state(state).config.dropout == 0.1
    done = run_cli(*_train_command(tmp_path), "--out", str(out), "--resume", "--epochs", "2", "--dropout", "0")
    assert done.returncode == 0, done.stderr
    resumed = load_state(state)
    assert resumed.config.dropout == 0.0 and resumed.progress.epoch == 2


def test_temporaries_of_interrupted_saves_are_removed(trained_with_state, tmp_path):
    from transformer.io.checkpoint import write_atomically

    _, out, state = trained_with_state
    killed = [tmp_path / f".{state.name}.k1llxd", tmp_path / f".{out.name}.k2llxd"]  # what kill -9 leaves
    for path in killed:
        path.write_bytes(b"partial")
    other = tmp_path / ".notes.txt.abc"
    other.write_bytes(b"not ours")
    done = run_cli(*_train_command(tmp_path), "--out", str(out), "--resume", "--epochs", "2")
    assert done.returncode == 0, done.stderr
    assert not any(path.exists() for path in killed) and other.exists()
    assert "removed 2 temporary file(s)" in done.stdout
    with pytest.raises(TypeError):
        write_atomically(tmp_path / "x.safetensors", "not bytes")  # fails mid-write: its temporary goes too
    assert not list(tmp_path.glob(".x.safetensors.*"))


def test_a_full_disk_during_training_is_one_line(tmp_path, monkeypatch, capsys):
    import errno

    import transformer.training.train
    from transformer.cli import main

    def disk_full(path, *args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device", str(path))

    monkeypatch.setattr(transformer.training.train, "save_state", disk_full)
    out = tmp_path / "m.safetensors"
    assert main([*_train_command(tmp_path), "--out", str(out), "--save-every", "1"]) == 2
    err = capsys.readouterr().err
    errors = re.findall(r"error: [^\n]*", err)  # after the progress bar's last line
    assert len(errors) == 1, err
    error = errors[0]
    assert error.startswith("error: No space left on device") and "m.state.safetensors" in error
    assert "Traceback" not in err


@pytest.mark.parametrize("cpu_bfloat16", [False, True])
def test_cpu_bfloat16_runs_the_matrix_products_in_bfloat16_and_still_learns(tmp_path, monkeypatch, cpu_bfloat16):
    """--cpu-bfloat16 computes the training steps' layers in bfloat16 (autocast); the weights stay float32."""
    monkeypatch.setattr("transformer.training.train.device_for_rank", lambda rank: torch.device("cpu"))
    seen: set[torch.dtype] = set()

    def linear_outputs(module, _inputs, output):
        if isinstance(module, torch.nn.Linear):
            seen.add(output.dtype)

    with torch.nn.modules.module.register_module_forward_hook(linear_outputs):
        progress = train(reversal_settings(tmp_path, epochs=3, cpu_bfloat16=cpu_bfloat16), quiet=True)
    assert (torch.bfloat16 in seen) is cpu_bfloat16  # validation's decoding stays in float32 either way
    assert sum(progress.loss_curve[-5:]) < sum(progress.loss_curve[:5])
    loaded = load_checkpoint(tmp_path / "m.safetensors")
    assert loaded.metadata["settings"]["cpu_bfloat16"] is cpu_bfloat16
    assert all(p.dtype == torch.float32 for p in loaded.model.parameters())
