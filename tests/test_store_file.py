"""The store's files without a model: random keys and values written and read back through KVStore, and every way a
file can be wrong (a flipped byte anywhere, a header field changed, another key, lengths that disagree, a cut file)
read as a miss. tests/test_store.py checks the same through the engine on the tiny model; these run in milliseconds,
so the mutation run (docs/testing.md) reaches the checksum with them."""

from __future__ import annotations

import json
import logging
import os
import struct
from dataclasses import asdict, replace

import pytest
import torch

from kvqa.cache.store import FORMAT, CacheKey, KVStore, file_bytes, text_sha256

KEY = CacheKey(model="m", weights="w" * 32, dtype="float32", device="cpu", attention="sdpa",
               text_sha256=text_sha256("a document"))
IDS = tuple(range(100, 107))


def tensors(tokens: int = len(IDS), layers: int = 2) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(tokens * 10 + layers)
    return [(torch.randn(1, 2, tokens, 4, generator=g), torch.randn(1, 2, tokens, 4, generator=g))
            for _ in range(layers)]


def written(tmp_path, **kw) -> tuple[KVStore, list]:
    store = KVStore(tmp_path / "store", 2**20)
    kv = tensors()
    assert store.write(KEY, IDS, "01 Dec 2026", kv, **kw)
    return store, kv


def test_a_file_reads_back_bit_for_bit_with_its_ids_date_and_read_time(tmp_path):
    store, kv = written(tmp_path, read_s=1.25)
    got = store.get(KEY)
    assert got.ids == IDS and got.date_string == "01 Dec 2026" and got.read_s == 1.25
    assert len(got.tensors) == len(kv)
    for (k, v), (k2, v2) in zip(kv, got.tensors):
        assert torch.equal(k, k2) and torch.equal(v, v2) and k2.dtype == k.dtype
    assert store.entries() == [store.path(KEY)] and store.path(KEY).name == KEY.digest + ".safetensors"
    store.write(KEY, IDS, "01 Dec 2026", kv)
    assert store.get(KEY).read_s is None  # not recorded


def miss(store: KVStore, caplog, says: str = "") -> None:
    """The key reads as a miss, with one warning line, and the file is gone."""
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kvqa.cache.store"):
        assert store.get(KEY) is None
    lines = [r.getMessage() for r in caplog.records if r.name == "kvqa.cache.store"]
    assert len(lines) == 1 and "ignoring" in lines[0] and says in lines[0], lines
    assert not store.path(KEY).exists()


@pytest.mark.parametrize("where", [0, 8, 50, 0.3, 0.5, 0.7, -1])
def test_a_flipped_byte_anywhere_is_a_miss(tmp_path, caplog, where):
    store, _ = written(tmp_path)
    path = store.path(KEY)
    data = bytearray(path.read_bytes())
    data[int(where * len(data)) if isinstance(where, float) else where % len(data)] ^= 0x5A
    path.write_bytes(bytes(data))
    miss(store, caplog)


def header(path) -> tuple[bytearray, dict]:
    data = bytearray(path.read_bytes())
    (size,) = struct.unpack("<Q", data[:8])
    return data, json.loads(data[8: 8 + size])


@pytest.mark.parametrize("field", ["written", "read_s", "date_string"])
def test_each_header_field_is_inside_the_checksum(tmp_path, caplog, field):
    store, _ = written(tmp_path, read_s=1.25)
    data, head = header(store.path(KEY))
    value = head["__metadata__"][field]
    at = data.index(f'"{field}":"{value}"'.encode(), 8) + len(field) + 4  # the value's first character
    data[at] = ord("7") if data[at] != ord("7") else ord("8")  # still valid JSON, still a plausible value
    store.path(KEY).write_bytes(bytes(data))
    miss(store, caplog, "checksum mismatch")


def test_a_tensor_changed_in_shape_but_not_in_bytes_is_a_miss(tmp_path, caplog):
    """The checksum covers each tensor's shape and dtype, not only its bytes: the same bytes read as another shape
    (a header rewritten with its offsets kept) do not pass."""
    store, _ = written(tmp_path)
    data, head = header(store.path(KEY))
    old = json.dumps(head["k.0"]["shape"]).replace(" ", "").encode()  # [1,2,7,4]
    new = b"[2,1,7,4]"
    assert len(old) == len(new) and data.count(old) >= 1
    at = data.index(b'"k.0"')
    data[data.index(old, at): data.index(old, at) + len(old)] = new
    store.path(KEY).write_bytes(bytes(data))
    miss(store, caplog, "checksum mismatch")


@pytest.mark.parametrize("field", [f for f in asdict(KEY) if f != "format"])
def test_a_file_made_for_another_key_is_a_miss_that_names_the_field(tmp_path, caplog, field):
    """A whole file under another key's name (copied, or a name collision) is refused for what differs."""
    store, _ = written(tmp_path)
    other = replace(KEY, **{field: "something else"})
    store.path(other).write_bytes(store.path(KEY).read_bytes())
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kvqa.cache.store"):
        assert store.get(other) is None
    assert f"made for another {field}" in caplog.text and not store.path(other).exists()
    assert store.get(KEY) is not None  # the file itself was whole


def test_a_foreign_format_is_a_miss(tmp_path, caplog, monkeypatch):
    import kvqa.cache.store

    store, _ = written(tmp_path)
    monkeypatch.setattr(kvqa.cache.store, "FORMAT", FORMAT + 1)
    miss(store, caplog, f"this kvqa reads {FORMAT + 1}")


def test_ids_that_disagree_with_the_tensors_are_a_miss(tmp_path, caplog):
    store = KVStore(tmp_path / "store", 2**20)
    assert store.write(KEY, IDS[:-1], "01 Dec 2026", tensors())  # one id fewer than the tensors' tokens
    miss(store, caplog, "tensor lengths differ")


@pytest.mark.parametrize("keep", [0, 7, 9, 0.5, -1])
def test_a_cut_file_is_a_miss(tmp_path, caplog, keep):
    store, _ = written(tmp_path)
    data = store.path(KEY).read_bytes()
    store.path(KEY).write_bytes(data[: int(keep * len(data)) if isinstance(keep, float) else keep % len(data)])
    miss(store, caplog)


def test_a_cache_larger_than_the_limit_is_not_written(tmp_path, caplog):
    """The limit counts the file's bytes, its header included, not only the tensors'."""
    store, kv = written(tmp_path / "roomy")
    nbytes = store.path(KEY).stat().st_size
    assert nbytes > sum(k.nbytes + v.nbytes for k, v in kv) + 8 * len(IDS)  # the header is outside the tensors
    with caplog.at_level(logging.WARNING, logger="kvqa.cache.store"):
        assert not KVStore(tmp_path / "small", nbytes - 1).write(KEY, IDS, "01 Dec 2026", kv)
    assert "larger than the store's limit" in caplog.text and not (tmp_path / "small").exists()
    assert file_bytes(store.path(KEY)) == store.size_bytes == nbytes and file_bytes(tmp_path / "small") is None
    assert KVStore(tmp_path / "exact", nbytes).write(KEY, IDS, "01 Dec 2026", kv)  # exactly the limit fits


def test_the_least_recently_used_files_make_room_and_only_as_many_as_needed(tmp_path):
    store, kv = written(tmp_path)
    size = store.path(KEY).stat().st_size
    a, b, c = KEY, replace(KEY, text_sha256="b"), replace(KEY, text_sha256="c")
    exact = KVStore(tmp_path / "store", 3 * size)  # room for all three files, exactly
    assert exact.write(b, IDS, "d", kv)
    os.utime(exact.path(a), (1000, 1000))
    os.utime(exact.path(b), (2000, 2000))
    assert exact.get(a) is not None  # a is now the most recently used
    assert exact.write(c, IDS, "d", kv) and len(exact.entries()) == 3  # it fits: nothing removed
    tight = KVStore(tmp_path / "store", 3 * size - 1)  # one byte short: the least recently used goes
    assert tight.write(replace(KEY, text_sha256="d"), IDS, "d", kv)
    assert not tight.path(b).exists() and tight.path(a).exists() and tight.path(c).exists()
    assert len(tight.entries()) == 3


def test_a_store_folder_is_made_with_its_parents(tmp_path):
    store = KVStore(tmp_path / "a" / "b" / "store", 2**20)
    assert store.write(KEY, IDS, "d", tensors()) and store.get(KEY) is not None


def test_the_limit_is_said_in_mebibytes(tmp_path, caplog, monkeypatch):
    """Tensors already over the limit are refused before they are serialised (no copy of a cache too large)."""
    import safetensors.torch

    monkeypatch.setattr(safetensors.torch, "save", lambda *a, **k: pytest.fail("serialised a cache over the limit"))
    big = [(torch.zeros(1, 8, 2**14, 4), torch.zeros(1, 8, 2**14, 4)) for _ in range(3)]  # 3 x 4 MiB
    with caplog.at_level(logging.WARNING, logger="kvqa.cache.store"):
        assert not KVStore(tmp_path, 2**20).write(KEY, range(2**14), "d", big)
    assert ("kvqa store: a cache of 12 MiB is larger than the store's limit (1 MiB, KVQA_STORE_MB); not written"
            in caplog.messages)


def test_a_full_disk_leaves_no_file_and_says_which(tmp_path, caplog, monkeypatch):
    import errno

    import kvqa.cache.store

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(kvqa.cache.store.os, "fsync", full)
    store = KVStore(tmp_path / "store", 2**20)
    with caplog.at_level(logging.WARNING, logger="kvqa.cache.store"):
        assert store.write(KEY, IDS, "d", tensors()) is False
    assert list((tmp_path / "store").iterdir()) == []  # the temporary file removed too
    assert caplog.messages == [f"kvqa store: could not write {store.path(KEY).name} ([Errno 28] No space left on "
                               "device); answers are unaffected"]


def test_the_time_written_is_utc_in_iso_form(tmp_path):
    import re
    import time

    store, _ = written(tmp_path)
    _, head = header(store.path(KEY))
    stamp = head["__metadata__"]["written"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", stamp)
    assert abs(time.mktime(time.strptime(stamp, "%Y-%m-%dT%H:%M:%SZ")) - time.mktime(time.gmtime())) < 120


def test_the_background_writer_says_what_happened_and_outlives_a_failed_write(tmp_path, caplog, monkeypatch):
    """put() writes in the background: its future says True once the file is there, False when the write raised
    (logged), and the writer goes on to the next one (mutmut: `_write_loop`'s `ok = True` first, a writer that
    dies or never starts)."""
    store = KVStore(tmp_path / "store", 2**20)
    kv = tensors()
    assert store.put(KEY, IDS, "01 Dec 2026", kv).result(timeout=30) is True and store.get(KEY) is not None
    real_write = KVStore.write

    def broken(self, *args, **kwargs):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(KVStore, "write", broken)
    with caplog.at_level(logging.WARNING, logger="kvqa.cache.store"):
        assert store.put(KEY, IDS, "01 Dec 2026", kv).result(timeout=30) is False
    assert "disk on fire" in caplog.text
    monkeypatch.setattr(KVStore, "write", real_write)
    other = replace(KEY, text_sha256=text_sha256("another document"))
    assert store.put(other, IDS, "01 Dec 2026", kv, read_s=2.0).result(timeout=30) is True
    store.flush()
    assert store.get(other).read_s == 2.0
