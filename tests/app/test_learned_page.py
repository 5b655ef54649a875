"""How it learned: the page sends one probe's every epoch to the browser, opens the view a link names, and says in
one line when a timeline cannot be read."""

from __future__ import annotations

import json
import pickle

import numpy as np
from helpers import REPO, errors
from streamlit.testing.v1 import AppTest

import ui.services.models
from transformer.io.checkpoint import DEFAULT_CHECKPOINT
from transformer.io.timeline_file import load_timeline, timeline_path
from transformer.model.kinds import AttentionKind
from ui.players.packing import unpacked

TIMELINE = load_timeline(timeline_path(DEFAULT_CHECKPOINT))


def opened(query: dict[str, str] | None = None) -> AppTest:
    """The page opened by its own link (the explorer never ran before it to rewrite the address)."""
    at = AppTest.from_file(str(REPO / "app.py"), default_timeout=120)
    at.query_params.update(query or {})
    return at.switch_page("pages/learned.py").run()


def sent(at) -> dict:
    """What the page sent its epoch view."""
    (data,) = json.loads(at.get("bidi_component")[0].proto.json)
    return data


def test_the_page_sends_every_epoch_of_the_probe_chosen():
    at = opened()
    assert not at.exception
    data = sent(at)
    assert data["labels"] == [s.label for s in TIMELINE.snapshots] and data["snapshot"] == len(data["labels"]) - 1
    probe = TIMELINE.probes[0]
    layers, heads = probe.maps[AttentionKind.CROSS].shape[1:3]
    cross = unpacked(data["maps"]["cross"]).reshape(len(data["labels"]), layers, heads + 1, len(data["tgt"]), -1)
    np.testing.assert_allclose(cross[:, :, :heads], probe.maps[AttentionKind.CROSS], atol=1e-3)  # every epoch's
    np.testing.assert_allclose(cross[:, :, heads], probe.maps[AttentionKind.CROSS].astype(float).mean(2), atol=1e-3)
    assert data["outputs"] == probe.outputs and data["reference"] == probe.reference
    assert at.query_params["probe"] == "1"
    at.selectbox(key="widget_probe").select(2).run()
    assert sent(at)["reference"] == TIMELINE.probes[2].reference and at.query_params["probe"] == "3"


def test_a_link_opens_the_epoch_probe_and_head_it_names():
    at = opened({"epoch": "1", "kind": "decoder", "layer": "2", "head": "4", "probe": "2"})
    data = sent(at)
    epoch_one = next(i for i, s in enumerate(TIMELINE.snapshots) if s.epoch == 1)
    assert (data["snapshot"], data["kind"], data["layer"], data["head"]) == (epoch_one, "decoder", 1, 3)
    assert data["reference"] == TIMELINE.probes[1].reference
    at = opened({"epoch": "99", "kind": "nonsense", "layer": "99", "head": "x"})
    data = sent(at)  # what the link cannot mean opens the last epoch's mean of the last layer's heads
    assert not at.exception and (data["snapshot"], data["kind"], data["head"]) == (
        len(data["labels"]) - 1,
        "cross",
        "mean",
    )


def test_a_hostile_timeline_is_one_line_on_the_page(monkeypatch, tmp_path):
    hostile = tmp_path / "hostile.safetensors"
    hostile.write_bytes(pickle.dumps({"epochs": 3}))
    monkeypatch.setattr(ui.services.checkpoints, "timeline_path", lambda path: hostile)
    at = opened()
    assert not at.exception
    assert "cannot be read" in errors(at) and "refused because loading one can execute code" in errors(at)


def test_a_typed_sentence_is_read_through_every_epoch_whose_checkpoint_is_here():
    """Of the run's epochs only the first and the default's are shipped: the page reads the sentence with the
    untrained start (rebuilt from the run's seed), epoch 1 and the default's epoch, and names the epochs it could not
    read; the link keeps the sentence."""
    from transformer.decoding.forcing import teacher_force
    from transformer.decoding.greedy import decode_with_chooser
    from transformer.io.checkpoint import load_checkpoint

    sentence = "The small dog is sleeping."
    at = opened({"sentence": sentence})
    assert not at.exception and not at.error
    data = sent(at)
    labels = [s.label for s in TIMELINE.snapshots]
    assert data["labels"] == ["before training", "epoch 1", labels[-1]]
    missing = ", ".join(labels[2:-1])
    assert f"Not here: {missing} (" in at.caption[0].value.replace("\\", "") and at.query_params["sentence"] == sentence
    final = load_checkpoint(DEFAULT_CHECKPOINT)
    own = decode_with_chooser(final.model, final.tokenizer, sentence).text
    assert data["reference"] == own and data["outputs"][-1] == own
    forced = teacher_force(final.model, final.tokenizer, sentence, own)
    layers, heads = forced.cross.shape[:2]
    cross = unpacked(data["maps"]["cross"]).reshape(3, layers, heads + 1, len(data["tgt"]), -1)
    np.testing.assert_allclose(cross[-1, :, :heads], forced.cross.numpy(), atol=2e-3)  # the last epoch's own maps
    at.text_input(key="learned_text").set_value("").run()
    assert sent(at)["labels"] == [s.label for s in TIMELINE.snapshots] and "sentence" not in at.query_params


def test_typed_sentences_share_the_servers_checkpoints_and_read_in_a_slot(monkeypatch):
    """8 tabs typing at once each loaded every epoch's checkpoint from disk outside the slots (+1.4 GB that stayed):
    the reading now takes the server's one copy of each file, in a heavy-job slot."""
    import transformer.training.snapshots
    import ui.services.work

    from_disk, in_slot = [], []
    monkeypatch.setattr(transformer.training.snapshots, "load_checkpoint", lambda path: from_disk.append(path))
    reading = ui.services.models.sentence_timeline

    def recorded(*args, **kwargs):
        in_slot.append(getattr(ui.services.work._THIS_THREAD, "holds_slot", False))
        return reading(*args, **kwargs)

    monkeypatch.setattr(ui.services.models, "sentence_timeline", recorded)
    for sentence in ("A small dog sleeps.", "The red car is fast."):
        at = opened({"sentence": sentence})
        assert not at.exception and len(sent(at)["labels"]) >= 2
    assert from_disk == [] and in_slot == [True, True]


def test_a_long_typed_sentence_is_shortened_in_the_link():
    """2,000 emoji made a 24 KB address that the proxy refuses (414)."""
    from urllib.parse import quote

    from ui.state.url import MAX_URL_TEXT_BYTES

    sentence = "🙂" * 2000
    at = opened({"sentence": sentence})
    written = at.query_params["sentence"]
    assert sentence.startswith(written) and 0 < len(quote(written)) <= MAX_URL_TEXT_BYTES


def test_a_long_run_sends_the_player_what_one_page_can_carry(monkeypatch):
    """A 30 MB timeline sent 43.6 MB to every tab: the player gets evenly spaced snapshots within its budget, the
    first and the last among them, and the page says so."""
    from ui.players.epoch_player import MAX_PLAYER_MAP_BYTES

    count = len(TIMELINE.snapshots)
    long_run = TIMELINE.at([e for e in range(count) for _ in range(60)])  # each snapshot 60 times over
    monkeypatch.setattr(ui.services.checkpoints, "timeline", lambda name: long_run)
    at = opened()
    assert not at.exception
    payload = at.get("bidi_component")[0].proto.json
    data = json.loads(payload)[0]
    assert len(payload) < MAX_PLAYER_MAP_BYTES + 2**20
    assert 2 <= len(data["labels"]) < len(long_run.snapshots)
    assert data["labels"][0] == TIMELINE.snapshots[0].label and data["labels"][-1] == TIMELINE.snapshots[-1].label
    shown = f"the player shows {len(data['labels'])} of its {len(long_run.snapshots)} snapshots"
    assert any(shown in c.value for c in at.caption)


def test_a_run_whose_two_snapshots_pass_the_budget_sends_each_layers_mean_alone(monkeypatch):
    """`within_budget` kept at least two snapshots whatever they held: a 30 MB timeline of two snapshots still sent
    43.57 MB to every tab. Where two snapshots of every head would pass the budget, the means go alone."""
    import ui.players.epoch_player as player

    probe = TIMELINE.probes[0]
    cells = sum(maps[0].size // maps.shape[2] for maps in probe.maps.values())
    heads = probe.maps[AttentionKind.CROSS].shape[2]
    budget = int(2 * cells * (heads + 1) * player.PACKED_BYTES) - 1  # two snapshots of every head: just too many
    monkeypatch.setattr(player, "MAX_PLAYER_MAP_BYTES", budget)
    at = opened({"head": "2"})
    assert not at.exception
    data = sent(at)
    assert data["map_heads"] == 0 and data["head"] == "mean" and data["heads"] == heads
    assert sum(len(text) for text in data["maps"].values()) <= budget
    shown = TIMELINE.at([TIMELINE.snapshots.index(s) for s in TIMELINE.snapshots if s.label in data["labels"]])
    cross = shown.probes[0].maps[AttentionKind.CROSS]
    np.testing.assert_allclose(
        unpacked(data["maps"]["cross"]).reshape(cross.shape[0], cross.shape[1], *cross.shape[3:]),
        cross.astype(np.float64).mean(axis=2),
        atol=1e-4,
    )
    assert any("each layer's mean of the heads" in caption.value for caption in at.caption)
