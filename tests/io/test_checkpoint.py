import copy
import json
import pickle
import struct
import warnings

import pytest
import torch
from helpers import REPO, SMALL_FILE_HUGE_CONFIG, measured, tiny_config, with_config, with_header, with_metadata
from hypothesis import given, settings
from hypothesis import strategies as st
from safetensors.torch import save as save_safetensors

from transformer.decoding.greedy import decode_with_chooser
from transformer.io.checkpoint import (
    CheckpointError,
    CheckpointTooLarge,
    CheckpointWarning,
    checkpoint_bytes,
    describe,
    load_checkpoint,
    load_checkpoint_bytes,
    load_cost,
    save_checkpoint,
    unique_state,
    update_metadata,
)
from transformer.io.header import _without_duplicates, read_header
from transformer.model.encoder_decoder import Transformer
from transformer.model.linear import hold_transposed


@pytest.mark.parametrize("source_eos", [True, False])
def test_whether_a_source_ends_with_eos_is_kept_in_the_file(model, tokenizer, source_eos):
    told = tokenizer if source_eos else tokenizer.without_source_eos()
    data = checkpoint_bytes(model, told)
    assert ("source_eos" in read_header(data)["__metadata__"]) != source_eos  # written where it is not the default
    loaded = load_checkpoint_bytes(data)
    assert loaded.tokenizer.source_eos == source_eos and loaded.tokenizer.same_as(told)


def test_a_source_eos_other_than_true_or_false_is_refused_naming_it(model, tokenizer):
    data = with_metadata(checkpoint_bytes(model, tokenizer), source_eos="no")
    with pytest.raises(CheckpointError, match="source_eos is 'no', neither 'true' nor 'false'"):
        load_checkpoint_bytes(data)


def test_round_trip_gives_identical_outputs(checkpoint_path, model, tokenizer):
    loaded = load_checkpoint(checkpoint_path)
    assert loaded.config == model.config
    assert loaded.metadata["languages"] == {"src": "en", "tgt": "en"}
    assert loaded.tokenizer.model_proto == tokenizer.model_proto
    twin = copy.deepcopy(model)
    hold_transposed(twin)  # as a loaded model's weights are laid out: the same products, to the last bit
    original = decode_with_chooser(twin, tokenizer, "the dog runs", max_new_tokens=6)
    again = decode_with_chooser(loaded.model, loaded.tokenizer, "the dog runs", max_new_tokens=6)
    assert again.tgt_ids == original.tgt_ids
    torch.testing.assert_close(again.cross, original.cross, atol=0, rtol=0)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
def test_the_file_written_tensor_by_tensor_reads_in_safetensors_own_reader(tmp_path, model, tokenizer, dtype):
    from safetensors import safe_open

    save_checkpoint(tmp_path / "m.safetensors", model, tokenizer, {"note": "é"}, dtype)
    with safe_open(tmp_path / "m.safetensors", "pt") as opened:
        theirs = {name: opened.get_tensor(name) for name in opened.keys()}
        header = opened.metadata()
    ours = unique_state(model)
    assert theirs.keys() == ours.keys() and json.loads(header["metadata"]) == {"note": "é"}
    for name, tensor in ours.items():
        assert theirs[name].dtype == dtype and torch.equal(theirs[name], tensor.detach().to(dtype)), name
    assert (tmp_path / "m.safetensors").read_bytes() == checkpoint_bytes(model, tokenizer, {"note": "é"}, dtype)


def test_a_save_holds_one_tensors_copy_beside_the_model_never_the_files_bytes(tmp_path, tokenizer):
    """safetensors' save built the whole file's bytes after a contiguous copy of every (laid-out, transposed)
    weight: 4 times the weights with the model, and `import-hf` of NLLB-1.3B's shape was killed for memory at 21 GB."""
    import dataclasses

    from helpers import tiny_config

    config = dataclasses.replace(tiny_config(tokenizer), d_model=1024, n_heads=8, d_ff=4096, dropout=0.0)
    save_checkpoint(tmp_path / "wide.safetensors", Transformer(config), tokenizer)
    loaded = load_checkpoint(tmp_path / "wide.safetensors").model  # its weights laid out, as an import's are
    weights_mb = sum(t.nbytes for t in unique_state(loaded).values()) / 2**20
    with measured() as cost:
        save_checkpoint(tmp_path / "again.safetensors", loaded, tokenizer)
    largest_mb = max(t.nbytes for t in unique_state(loaded).values()) / 2**20
    assert weights_mb > 150 and cost.peak_growth_mb < 0.3 * weights_mb, (weights_mb, largest_mb, cost)
    assert (tmp_path / "again.safetensors").read_bytes() == (tmp_path / "wide.safetensors").read_bytes()


def test_float16_storage_halves_the_file_and_keeps_the_output(model, tokenizer):
    full = checkpoint_bytes(model, tokenizer)
    half = checkpoint_bytes(model, tokenizer, dtype=torch.float16)
    stored = sum(t.numel() for t in unique_state(model).values())
    assert len(full) - len(half) == pytest.approx(2 * stored, abs=64)  # two bytes saved per number
    loaded = load_checkpoint_bytes(half)
    assert next(loaded.model.parameters()).dtype == torch.float32
    assert (
        decode_with_chooser(loaded.model, loaded.tokenizer, "a cat", max_new_tokens=4).tgt_ids
        == decode_with_chooser(model, tokenizer, "a cat", max_new_tokens=4).tgt_ids
    )


def test_loaded_model_is_read_only_and_in_eval_mode(checkpoint_path):
    loaded = load_checkpoint(checkpoint_path)
    assert not loaded.model.training
    assert not any(p.requires_grad for p in loaded.model.parameters())


def test_update_metadata_keeps_the_tensors(tmp_path, checkpoint_path):
    path = tmp_path / "copy.safetensors"
    path.write_bytes(checkpoint_path.read_bytes())
    update_metadata(path, lambda m: m.update({"scores": {"test": 1.5}}))
    loaded, original = load_checkpoint(path), load_checkpoint(checkpoint_path)
    assert loaded.metadata["scores"] == {"test": 1.5}
    for a, b in zip(loaded.model.parameters(), original.model.parameters()):
        assert torch.equal(a, b)


def test_update_metadata_writes_through_a_link_and_keeps_it(tmp_path, checkpoint_path):
    """`evaluate --save` on a link to a checkpoint replaced the link with a changed copy, the file left unscored."""
    real, link = tmp_path / "real.safetensors", tmp_path / "link.safetensors"
    real.write_bytes(checkpoint_path.read_bytes())
    link.symlink_to(real)
    update_metadata(link, lambda m: m.update({"scores": {"test": 2.5}}))
    assert link.is_symlink() and load_checkpoint(real).metadata["scores"] == {"test": 2.5}


def test_update_metadata_copies_the_tensors_through_never_holding_the_file(tmp_path, tokenizer):
    """`evaluate` stores its scores in the checkpoint it scored: the rewrite read the whole file, then a copy of every
    tensor and the new file's bytes, three times the file beside the model (15 GB for NLLB-1.3B's 5.1 GB)."""
    import dataclasses

    from helpers import tiny_config

    config = dataclasses.replace(tiny_config(tokenizer), d_model=1024, n_heads=8, d_ff=4096, dropout=0.0)
    path = tmp_path / "wide.safetensors"
    save_checkpoint(path, Transformer(config), tokenizer, {"note": "é"})
    before = load_checkpoint(path)
    with measured() as cost:
        update_metadata(path, lambda m: m.setdefault("scores", {}).update({"test": {"bleu": 1.5}}))
    file_mb = path.stat().st_size / 2**20
    assert file_mb > 150 and cost.peak_growth_mb < 0.1 * file_mb, (file_mb, cost)
    after = load_checkpoint(path)
    assert after.metadata["scores"] == {"test": {"bleu": 1.5}} and after.metadata["note"] == "é"
    assert after.config == before.config
    for (name, a), b in zip(before.model.state_dict().items(), after.model.state_dict().values()):
        assert torch.equal(a, b), name

    damaged = path.read_bytes()[:-4]
    path.write_bytes(damaged)
    with pytest.raises(CheckpointError, match="damaged"):
        update_metadata(path, lambda m: m.update({"more": 1}))
    assert path.read_bytes() == damaged


def test_a_pickle_that_would_run_code_is_refused_without_running(tmp_path):
    marker = tmp_path / "pwned"

    class Payload:
        def __reduce__(self):
            return (open, (str(marker), "w"))

    path = tmp_path / "evil.safetensors"
    path.write_bytes(pickle.dumps(Payload()))
    with pytest.raises(CheckpointError, match="pickle"):
        load_checkpoint(path)
    assert not marker.exists()
    torch.save({"x": torch.zeros(1)}, tmp_path / "zip.pt")  # PyTorch's zip container
    with pytest.raises(CheckpointError, match="pickle"):
        load_checkpoint(tmp_path / "zip.pt")


@pytest.mark.parametrize("cut", [0, 5, 100, -10])
def test_truncated_files_are_refused(tmp_path, checkpoint_path, cut):
    data = checkpoint_path.read_bytes()
    path = tmp_path / "cut.safetensors"
    path.write_bytes(data[:cut])
    with pytest.raises(CheckpointError, match="truncated|corrupt|inconsistent"):
        load_checkpoint(path)


def test_huge_or_malformed_headers_are_refused():
    with pytest.raises(
        CheckpointError, match="^this is not a checkpoint file .* a header of 1,152,921,504,606,846,976"
    ):
        load_checkpoint_bytes(struct.pack("<Q", 2**60) + b"{}")
    with pytest.raises(CheckpointError, match="not valid JSON"):
        load_checkpoint_bytes(struct.pack("<Q", 4) + b"{{{{")
    with pytest.raises(CheckpointError, match="not a checkpoint of this project"):
        load_checkpoint_bytes(save_safetensors({"w": torch.zeros(2)}, metadata={"format": "other"}))


def test_absurd_config_is_refused_before_allocating(checkpoint_path, config):
    absurd = json.loads(config.to_json()) | {"d_model": 65536, "d_ff": 1_000_000, "n_heads": 8}
    with pytest.raises(CheckpointError, match="over the limit"):
        load_checkpoint_bytes(with_metadata(checkpoint_path.read_bytes(), config=json.dumps(absurd)))


def test_tensors_that_do_not_match_the_config_are_named(checkpoint_path, config):
    other = json.loads(config.to_json()) | {"d_ff": 64}
    with pytest.raises(CheckpointError, match="shape"):
        load_checkpoint_bytes(with_metadata(checkpoint_path.read_bytes(), config=json.dumps(other)))
    deeper = json.loads(config.to_json()) | {"n_encoder_layers": 3}
    with pytest.raises(CheckpointError, match="missing encoder_layers.2"):
        load_checkpoint_bytes(with_metadata(checkpoint_path.read_bytes(), config=json.dumps(deeper)))


def test_tokenizer_that_does_not_match_the_vocabulary_is_refused(checkpoint_path, config, tokenizer):
    smaller = json.loads(config.to_json()) | {"src_vocab_size": 50, "tgt_vocab_size": 50}
    model = Transformer(type(config)(**smaller))
    data = save_safetensors(
        {k: v.contiguous() for k, v in unique_state(model).items()},
        metadata=read_header(checkpoint_path.read_bytes())["__metadata__"] | {"config": json.dumps(smaller)},
    )
    with pytest.raises(CheckpointError, match=f"tokenizer has {tokenizer.vocab_size} pieces"):
        load_checkpoint_bytes(data)
    with pytest.raises(CheckpointError, match="tokenizer"):
        load_checkpoint_bytes(with_metadata(checkpoint_path.read_bytes(), tokenizer="bm90IGEgbW9kZWw="))


def test_nan_weights_load_with_a_warning(model, tokenizer):
    broken = Transformer(model.config)
    broken.load_state_dict(model.state_dict())
    with torch.no_grad():
        broken.encoder_layers[0].feed_forward.inner.weight[0, 0] = float("nan")
    with pytest.warns(CheckpointWarning, match="NaN"):
        load_checkpoint_bytes(checkpoint_bytes(broken, tokenizer))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_checkpoint_bytes(checkpoint_bytes(model, tokenizer))


def test_missing_file_and_wrong_file_types(tmp_path):
    with pytest.raises(CheckpointError, match="no checkpoint file"):
        load_checkpoint(tmp_path / "absent.safetensors")
    text = tmp_path / "notes.txt"
    text.write_text("hello, this is not a model at all")
    with pytest.raises(CheckpointError):
        load_checkpoint(text)
    with pytest.raises(CheckpointError, match="over the limit"):
        load_checkpoint(text, max_bytes=10)


def test_a_small_file_claiming_a_huge_model_is_refused_before_allocating(tmp_path):
    path = tmp_path / "bomb.safetensors"
    path.write_bytes(with_config((REPO / "checkpoints" / "reverse.safetensors").read_bytes(), **SMALL_FILE_HUGE_CONFIG))
    with measured() as cost, pytest.raises(CheckpointError, match="has shape"):
        load_checkpoint(path)
    assert cost.peak_growth_mb < 100, cost  # was 5.4 GB: the model was built first


def test_the_cli_refuses_it_with_one_line_and_no_allocation(tmp_path, capsys):
    from transformer.cli import main

    path = tmp_path / "bomb.safetensors"
    path.write_bytes(with_config((REPO / "checkpoints" / "reverse.safetensors").read_bytes(), **SMALL_FILE_HUGE_CONFIG))
    with measured() as cost:
        code = main(["inspect", "--checkpoint", str(path), "--text", "one two", "--out", str(tmp_path / "m.npz")])
    assert code == 2 and capsys.readouterr().err.startswith("error: tensor ")
    assert cost.peak_growth_mb < 100, cost


def test_tensor_extents_must_tile_the_payload(checkpoint_path):
    """Tensors sharing bytes would let a small file describe many large tensors."""
    data = checkpoint_path.read_bytes()
    header = read_header(data)
    query, key = "encoder_layers.0.self_attn.q_proj.weight", "encoder_layers.0.self_attn.k_proj.weight"
    header[key]["data_offsets"] = header[query]["data_offsets"]
    with pytest.raises(CheckpointError, match="overlaps or leaves gaps"):
        load_checkpoint_bytes(with_header(data, json.dumps(header).encode()))


def test_a_huge_max_len_costs_only_the_positions_a_sentence_reaches(checkpoint_path):
    data = checkpoint_path.read_bytes()
    long_positions = with_config(data, max_len=262_144)  # a valid file: sinusoids are computed, not stored
    config = load_checkpoint_bytes(data).config
    long_config, cost_counted = load_cost(long_positions)  # what a budget is asked for: two tables of 1,024 rows
    assert long_config.element_count() <= config.parameter_count() + 2 * 1024 * config.d_model
    assert cost_counted < long_config.parameter_count() + 2 * 262_144 * config.d_model
    with measured() as cost:
        loaded = load_checkpoint_bytes(long_positions)
    assert loaded.config.max_len == 262_144 and cost.peak_growth_mb < 100, cost  # tables of 1,024 rows, not 262,144


def test_repeated_tensor_names_are_refused(checkpoint_path):
    data = checkpoint_path.read_bytes()
    length = struct.unpack("<Q", data[:8])[0]
    text = data[8 : 8 + length].decode()
    name = next(n for n in read_header(data) if n != "__metadata__")
    entry = json.dumps({name: read_header(data)[name]})[1:-1]
    doubled = text.replace("{", "{" + entry + ",", 1).encode()
    with pytest.raises(CheckpointError, match="repeats"):
        load_checkpoint_bytes(with_header(data, doubled))


class _CountedName(str):
    """A tensor name that counts how often it is compared with another."""

    comparisons = 0

    def __eq__(self, other: object) -> bool:
        _CountedName.comparisons += 1
        return str.__eq__(self, other)

    __hash__ = str.__hash__


def test_the_repeated_name_check_compares_no_name_with_every_other():
    """Counting each name among all the others took 16 s for a header of 40,000 names (a 1.9 MB upload kept a
    core busy for minutes); one pass with a set compares a name only on a hash collision."""
    names = [_CountedName(f"layer.{i}.weight") for i in range(1000)]
    _CountedName.comparisons = 0
    with pytest.raises(CheckpointError, match="'layer.999.weight' repeats"):
        _without_duplicates([(name, {}) for name in names] + [(_CountedName("layer.999.weight"), {})])
    assert _CountedName.comparisons < 10 * len(names)


@pytest.mark.parametrize("where", ["header", "config", "metadata"])
def test_a_number_of_5000_digits_is_refused_as_any_bad_json_is(checkpoint_path, tmp_path, where):
    """Past Python's 4,300 digits int() raises a plain ValueError, which the JSON checks let through."""
    data = checkpoint_path.read_bytes()
    huge = "9" * 5000
    if where == "header":
        length = struct.unpack("<Q", data[:8])[0]
        crafted = with_header(data, data[8 : 8 + length].rstrip().replace(b"{", b'{"n": ' + huge.encode() + b", ", 1))
    elif where == "config":
        crafted = with_metadata(
            data, config=read_header(data)["__metadata__"]["config"][:-1] + f', "d_model": {huge}}}'
        )
    else:
        crafted = with_metadata(data, metadata=f'{{"languages": {huge}}}')
    with pytest.raises(CheckpointError):
        load_checkpoint_bytes(crafted)
    path = tmp_path / "digits.safetensors"
    path.write_bytes(crafted)
    assert describe(path).startswith("digits · ")  # the checkpoint list's label, read on every page


def test_special_ids_of_tokenizer_and_config_must_agree(checkpoint_path):
    """Sources end with the tokenizer's eos and decoding stops at the config's: they must be one id."""
    swapped = with_config(checkpoint_path.read_bytes(), bos_id=3, eos_id=2)
    with pytest.raises(CheckpointError, match="pad/unk/bos/eos ids are 0/1/2/3, the config's 0/1/3/2"):
        load_checkpoint_bytes(swapped)


@pytest.mark.parametrize("low_bytes", [b"\x80", b"PK"], ids=["pickle-like", "zip-like"])
def test_a_header_length_that_starts_like_a_pickle_or_zip_still_loads(checkpoint_path, low_bytes):
    """The first bytes of a safetensors file are its header length: 0x80 or 'PK' there is no pickle or zip."""
    data = checkpoint_path.read_bytes()
    wanted = int.from_bytes(low_bytes, "little")
    modulus = 256 ** len(low_bytes)
    unpadded = with_metadata(data, padding="")
    raw_length = len(unpadded[8 : 8 + struct.unpack("<Q", unpadded[:8])[0]].rstrip(b" "))
    crafted = with_metadata(data, padding="x" * ((wanted - raw_length) % modulus))  # the length ends in those bytes
    assert crafted[: len(low_bytes)] == low_bytes
    assert load_checkpoint_bytes(crafted).config == load_checkpoint_bytes(data).config


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70) | st.floats() | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=6,
)
REVERSE = (REPO / "checkpoints" / "reverse.safetensors").read_bytes()


def _mutated_header(header: dict, draw) -> bytes:
    """The header with one random change: a tensor entry, a metadata entry, a config field, or a raw byte."""
    where = draw(st.sampled_from(["tensor", "metadata", "config", "raw", "nested"]))
    meta = header["__metadata__"]
    if where == "tensor":
        name = draw(st.sampled_from(sorted(set(header) - {"__metadata__"})))
        key = draw(st.sampled_from(["dtype", "shape", "data_offsets", "extra"]))
        if draw(st.booleans()):
            header[name].pop(key, None)
        else:
            header[name][key] = draw(JSON_VALUES)
    elif where == "metadata":
        key = draw(st.sampled_from(["format", "format_version", "config", "tokenizer", "metadata"]))
        meta[key] = draw(JSON_VALUES | JSON_VALUES.map(json.dumps))
    elif where == "config":
        config = json.loads(meta["config"])
        key = draw(st.sampled_from([*config, "unknown"]))
        config[key] = draw(JSON_VALUES)
        meta["config"] = json.dumps(config)
    elif where == "nested":
        depth = draw(st.integers(10, 100_000))
        meta[draw(st.sampled_from(["config", "metadata"]))] = "[" * depth + "]" * depth
    encoded = json.dumps(header).encode()
    if where == "raw":
        at = draw(st.integers(0, len(encoded) - 1))
        encoded = encoded[:at] + bytes([draw(st.integers(0, 255))]) + encoded[at + 1 :]
    return encoded


def test_a_tokenizer_field_of_non_ascii_text_is_refused_clearly():
    header = read_header(REVERSE)
    header["__metadata__"]["tokenizer"] = "\x80"  # found by the property test below: base64 raised ValueError
    with pytest.raises(CheckpointError, match="invalid tokenizer"):
        load_checkpoint_bytes(with_header(REVERSE, json.dumps(header).encode()))


@settings(max_examples=400, deadline=None)
@given(data=st.data())
def test_any_mutated_header_loads_correctly_or_is_refused_clearly(data):
    encoded = _mutated_header(read_header(REVERSE), data.draw)
    try:
        checkpoint = load_checkpoint_bytes(with_header(REVERSE, encoded))
    except CheckpointError as error:
        assert str(error) and "\n" not in str(error)
        return
    assert checkpoint.model.config.d_model > 0 and isinstance(checkpoint.metadata, dict)


@pytest.mark.parametrize(
    "change",
    [
        lambda data: with_config(data, d_model=int("9" * 4000)),  # a 4,077-character line before
        lambda data: with_config(data, dropout="x" * 4000),
        lambda data: with_metadata(data, format_version="9" * 4000),
    ],
)
def test_a_refusal_quotes_a_huge_value_shortened(checkpoint_path, change):
    with pytest.raises(CheckpointError) as refused:
        load_checkpoint_bytes(change(checkpoint_path.read_bytes()))
    assert len(str(refused.value)) < 300 and "..." in str(refused.value), str(refused.value)[:400]


def test_the_file_limit_follows_the_machines_free_memory(checkpoint_path, monkeypatch):
    """A fixed 2 GiB refused the 2.47 GB file an import of NLLB-600M's shape wrote, on a machine with 20 GB free."""
    from transformer.io import checkpoint as module

    assert module.file_limit(20 * 10**9) > 2.47e9 and module.file_limit(None) == 2 * 1024**3
    assert module.file_limit(module.APP_ROOM_BYTES // 2) == 0
    size = checkpoint_path.stat().st_size
    monkeypatch.setattr(module, "memory_available", lambda: module.APP_ROOM_BYTES + 2 * size)
    assert load_checkpoint(checkpoint_path).config.d_model > 0  # just fits
    monkeypatch.setattr(module, "memory_available", lambda: module.APP_ROOM_BYTES + size)
    with pytest.raises(CheckpointTooLarge, match=r"opening it needs about [\d.]+ GB of memory .* GB is free now"):
        load_checkpoint(checkpoint_path)


def test_a_file_longer_than_its_header_says_is_refused_before_its_body_is_read(checkpoint_path, tmp_path):
    """With a limit that follows the machine's memory, a 3 GB sparse file was read whole before it was refused."""
    grown = tmp_path / "grown.safetensors"
    grown.write_bytes(checkpoint_path.read_bytes())
    with open(grown, "r+b") as file:
        file.truncate(checkpoint_path.stat().st_size + 2**30)  # a gigabyte of zeros after the tensors, sparse
    with measured() as cost:
        with pytest.raises(CheckpointError, match="but its header describes .*: it is damaged"):
            load_checkpoint(grown)
    assert cost.peak_growth_mb < 100, cost


def test_float16_weights_are_counted_as_the_float32_they_are_laid_out_in(tmp_path, tokenizer, monkeypatch):
    """A checkpoint's or a Hugging Face directory's F16 weights were counted at their file's bytes, half what the
    model lays out: 5.54 GB of them passed with 21.8 GB free and were killed past 8 GB."""
    from safetensors.torch import save_file

    from transformer.hugging_face import files
    from transformer.io import checkpoint as module

    model = Transformer(tiny_config(tokenizer, d_model=64, d_ff=1024))  # its weights' bytes well over its header's
    path = tmp_path / "half.safetensors"
    save_checkpoint(path, model, tokenizer, dtype=torch.float16)
    size = path.stat().st_size
    elements = sum(t.numel() for t in unique_state(model).values())
    monkeypatch.setattr(module, "memory_available", lambda: module.APP_ROOM_BYTES + size + 4 * elements - 1)
    with pytest.raises(CheckpointTooLarge, match=r"its weights in float32"):
        load_checkpoint(path)
    monkeypatch.setattr(module, "memory_available", lambda: module.APP_ROOM_BYTES + size + 4 * elements)
    assert load_checkpoint(path).model.src_embed.lookup.weight.dtype == torch.float32  # just fits

    directory = tmp_path / "hf"
    directory.mkdir()
    save_file({"w": torch.zeros(1000, 1000, dtype=torch.float16)}, directory / "model.safetensors")
    monkeypatch.setattr(files, "memory_available", lambda: module.APP_ROOM_BYTES + 3_000_000)
    with pytest.raises(CheckpointTooLarge, match=r"its weights need 0\.0 GB"):
        files.hf_weights(directory)
    monkeypatch.setattr(files, "memory_available", lambda: module.APP_ROOM_BYTES + 4_000_000)
    assert files.hf_weights(directory)["w"].shape == (1000, 1000)
