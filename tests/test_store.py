"""The disk tier: content-addressed cache files, restored bit for bit, and nothing on disk trusted."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import threading
from dataclasses import replace
from pathlib import Path

import pytest
import torch

import kvqa
from kvqa.cache.restore import cache_key
from kvqa.cache.store import FORMAT, KVStore, weights_fingerprint
from kvqa.engines.stored import StoredLocalEngine
from kvqa.session.ask import ask
from test_store_file import header

CONFIG = kvqa.Config.of(max_new_tokens=12, max_question_tokens=64, chunk_size=64)
DOC = kvqa.document_from_text("The lighthouse keeper's code word is pelican. The ferry leaves at nine. " * 12)
QUESTIONS = ["What is the code word?", "When does the ferry leave?"]
MB = 2**20


def engine_with_store(lm, folder: Path, *, limit_mb: float = 64, config=CONFIG) -> StoredLocalEngine:
    return StoredLocalEngine(config, lm=lm, store=KVStore(folder, int(limit_mb * MB)))


def stored_file(engine: StoredLocalEngine) -> Path:
    (path,) = engine.store.entries()
    return path


def prefilled_and_stored(lm, folder: Path) -> tuple[StoredLocalEngine, kvqa.PrefilledDocument]:
    engine = engine_with_store(lm, folder)
    doc = engine.prefill(DOC)
    engine.store.flush()
    return engine, doc


def assert_same_cache(a: kvqa.PrefilledDocument, b: kvqa.PrefilledDocument) -> None:
    assert a.ids == b.ids and a.cache.length == b.cache.length and a.cache_bytes == b.cache_bytes
    for (ka, va), (kb, vb) in zip(a.cache.tensors(), b.cache.tensors(), strict=True):
        assert torch.equal(ka, kb) and torch.equal(va, vb)


def test_a_restored_cache_is_bit_identical_and_answers_token_for_token(tiny_lm, tmp_path):
    engine, fresh = prefilled_and_stored(tiny_lm, tmp_path)
    restored = engine_with_store(tiny_lm, tmp_path).prefill(DOC)
    assert (fresh.origin, restored.origin) == ("prefill", "disk")
    assert abs(restored.read_s - fresh.prefill_s) < 1e-5  # the first read's time is kept with the cache
    assert restored.first_read_s == restored.read_s != restored.prefill_s
    assert restored.cache.capacity == fresh.cache.capacity
    assert_same_cache(fresh, restored)
    for q in QUESTIONS:
        assert ask(engine, restored, q).answer.token_ids == ask(engine, fresh, q).answer.token_ids
    assert_same_cache(fresh, restored)  # rolled back after every answer


def test_the_default_model_answers_the_same_from_a_restored_cache(default_lm, tmp_path):
    engine, fresh = prefilled_and_stored(default_lm, tmp_path)
    restored = engine_with_store(default_lm, tmp_path).prefill(DOC)
    assert restored.origin == "disk"
    assert_same_cache(fresh, restored)
    assert ask(engine, restored, QUESTIONS[0]).answer.text == ask(engine, fresh, QUESTIONS[0]).answer.text


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_caches_round_trip(default_lm, tmp_path, dtype):
    from tests.conftest import tiny_llama

    lm = tiny_llama(default_lm.tokenizer, dtype=dtype)
    _, fresh = prefilled_and_stored(lm, tmp_path)
    restored = engine_with_store(lm, tmp_path).prefill(DOC)
    assert restored.origin == "disk" and restored.cache.tensors()[0][0].dtype == dtype
    assert_same_cache(fresh, restored)


def test_an_int8_models_bfloat16_cache_round_trips(default_lm, tmp_path):
    """int8 weights with bfloat16's widening hold a bfloat16 cache for a float32 model: restored as it was, and
    answering from it as from the fresh one."""
    from kvqa.model.weights import TO_BFLOAT16
    from tests.conftest import tiny_llama

    lm = tiny_llama(default_lm.tokenizer, weights="int8", widening=TO_BFLOAT16)
    engine, fresh = prefilled_and_stored(lm, tmp_path)
    restored = engine_with_store(lm, tmp_path).prefill(DOC)
    assert restored.origin == "disk" and lm.dtype == torch.float32
    assert {t.dtype for pair in restored.cache.tensors() for t in pair} == {torch.bfloat16}
    assert_same_cache(fresh, restored)
    assert ask(engine, restored, QUESTIONS[0]).answer.token_ids == ask(engine, fresh, QUESTIONS[0]).answer.token_ids


def test_every_key_field_and_one_changed_token_make_a_miss(tiny_lm, default_lm, tmp_path):
    from tests.conftest import tiny_llama

    key = cache_key(tiny_lm, DOC, weights=weights_fingerprint(tiny_lm.model))
    other_weights = tiny_llama(default_lm.tokenizer, seed=5)
    assert weights_fingerprint(other_weights.model) != key.weights
    changed = [replace(key, model="other"), replace(key, weights=weights_fingerprint(other_weights.model)),
               replace(key, dtype="bfloat16"), replace(key, device="cuda"), replace(key, attention="eager"),
               replace(key, format=FORMAT + 1),
               cache_key(tiny_lm, kvqa.document_from_text(DOC.text.replace("pelican", "pelicans")),
                         weights=key.weights)]
    assert len({k.digest for k in [key, *changed]}) == len(changed) + 1
    engine, _ = prefilled_and_stored(tiny_lm, tmp_path)
    for other in changed:
        assert engine.store.get(other) is None
    assert engine.store.get(key) is not None
    assert engine_with_store(other_weights, tmp_path).prefill(DOC).origin == "prefill"


def test_a_file_for_another_key_under_this_name_is_refused(tiny_lm, tmp_path, caplog):
    """A file renamed (or a hash collision): the header's key must match, not just the name."""
    engine, _ = prefilled_and_stored(tiny_lm, tmp_path)
    other_doc = kvqa.document_from_text("Another document entirely. " * 10)
    engine.prefill(other_doc)
    engine.store.flush()
    this = engine.store.path(cache_key(tiny_lm, DOC, weights=engine.weights))
    other = engine.store.path(cache_key(tiny_lm, other_doc, weights=engine.weights))
    os.replace(other, this)
    with caplog.at_level(logging.WARNING, logger="kvqa.cache.store"):
        doc = engine_with_store(tiny_lm, tmp_path).prefill(DOC)
    assert doc.origin == "prefill" and "made for another text_sha256" in caplog.text


def test_stored_ids_that_differ_from_the_tokenizer_are_a_miss(tiny_lm, tmp_path, caplog):
    engine, doc = prefilled_and_stored(tiny_lm, tmp_path)
    key = cache_key(tiny_lm, DOC, weights=engine.weights)
    engine.store.write(key, (*doc.ids[:-1], doc.ids[-1] + 1), doc.prompt.date_string, doc.cache.tensors())
    with caplog.at_level(logging.WARNING):
        again = engine_with_store(tiny_lm, tmp_path).prefill(DOC)
    assert again.origin == "prefill" and "prefix ids differ" in caplog.text


@pytest.mark.parametrize("where", [0, 8, 100, 0.5, -1])
def test_a_corrupted_byte_anywhere_is_detected_and_the_document_read_again(tiny_lm, tmp_path, caplog, where):
    engine, fresh = prefilled_and_stored(tiny_lm, tmp_path)
    path = stored_file(engine)
    data = bytearray(path.read_bytes())
    at = int(where * len(data)) if isinstance(where, float) else where % len(data)
    data[at] ^= 0x5A
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="kvqa.cache.store"):
        doc = engine_with_store(tiny_lm, tmp_path).prefill(DOC)
    assert doc.origin == "prefill" and "kvqa store: ignoring" in caplog.text
    assert len([r for r in caplog.records if r.name == "kvqa.cache.store"]) == 1  # one line
    assert_same_cache(fresh, doc)


@pytest.mark.parametrize("field", ["written", "read_s", "date_string", "layers"])
def test_a_damaged_byte_in_any_header_field_is_detected(tiny_lm, tmp_path, caplog, field):
    """The header's own fields (the time written, the first read's time...) are inside the checksum: a flipped digit
    there was once restored as if whole, depending on where a fixed offset happened to land."""
    engine, fresh = prefilled_and_stored(tiny_lm, tmp_path)
    path = stored_file(engine)
    data, head = header(path)
    value = head["__metadata__"][field]
    at = data.index(f'"{field}":"{value}"'.encode(), 8) + len(field) + 4  # the value's first character
    data[at] = ord("7") if data[at] != ord("7") else ord("8")  # still valid JSON, still a plausible value
    path.write_bytes(bytes(data))
    with caplog.at_level(logging.WARNING, logger="kvqa.cache.store"):
        doc = engine_with_store(tiny_lm, tmp_path).prefill(DOC)
    assert doc.origin == "prefill" and "kvqa store: ignoring" in caplog.text
    assert_same_cache(fresh, doc)


@pytest.mark.parametrize("keep", [0, 7, 0.5, -1])
def test_a_truncated_file_is_detected(tiny_lm, tmp_path, keep):
    engine, _ = prefilled_and_stored(tiny_lm, tmp_path)
    path = stored_file(engine)
    data = path.read_bytes()
    path.write_bytes(data[: int(keep * len(data)) if isinstance(keep, float) else keep % len(data)])
    assert engine_with_store(tiny_lm, tmp_path).prefill(DOC).origin == "prefill"


def test_a_foreign_format_version_is_a_miss(tiny_lm, tmp_path, monkeypatch, caplog):
    engine, _ = prefilled_and_stored(tiny_lm, tmp_path)
    key = cache_key(tiny_lm, DOC, weights=engine.weights)
    import kvqa.cache.store as store

    monkeypatch.setattr(store, "FORMAT", FORMAT + 1)  # a newer kvqa wrote it (same file name)
    engine.store.path(key).unlink()
    doc = engine.prefill(DOC)
    engine.store.flush()
    monkeypatch.setattr(store, "FORMAT", FORMAT)
    with caplog.at_level(logging.WARNING, logger="kvqa.cache.store"):
        assert engine_with_store(tiny_lm, tmp_path).prefill(DOC).origin == "prefill"
    assert f"format '{FORMAT + 1}'" in caplog.text
    assert doc.origin == "prefill"


def test_a_store_too_small_or_read_only_only_logs(tiny_lm, tmp_path, caplog, monkeypatch):
    with caplog.at_level(logging.WARNING, logger="kvqa.cache.store"):
        tiny = engine_with_store(tiny_lm, tmp_path / "small", limit_mb=0.001)
        doc = tiny.prefill(DOC)
        tiny.store.flush()
    assert tiny.store.entries() == [] and "larger than the store's limit" in caplog.text
    assert ask(tiny, doc, QUESTIONS[0]).answer.text
    not_a_folder = tmp_path / "a-file"
    not_a_folder.write_text("")
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="kvqa.cache.store"):
        engine = engine_with_store(tiny_lm, not_a_folder)
        assert engine.prefill(DOC).origin == "prefill"
        engine.store.flush()
        assert engine.prefill(DOC).origin == "prefill"
    assert "could not write" in caplog.text
    folder = tmp_path / "read-only"
    folder.mkdir()
    folder.chmod(0o500)
    if os.geteuid() == 0:  # root writes into read-only folders: the refusal is the OS's answer to the rename
        def refused(*args, **kwargs):
            raise PermissionError(13, "Permission denied")

        monkeypatch.setattr("kvqa.cache.store.os.replace", refused)
    try:
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger="kvqa.cache.store"):
            engine = engine_with_store(tiny_lm, folder)
            engine.prefill(DOC)
            engine.store.flush()
        assert "could not write" in caplog.text and list(folder.iterdir()) == []
    finally:
        folder.chmod(0o700)


def test_put_says_when_and_whether_the_file_was_written(tiny_lm, tmp_path):
    """The ZeroGPU engine hands answers the file only once its write has succeeded."""
    engine, doc = prefilled_and_stored(tiny_lm, tmp_path)
    key = cache_key(tiny_lm, DOC, weights=engine.weights)
    assert engine.store.put(key, doc.ids, doc.prompt.date_string, doc.cache.tensors()).result(timeout=60) is True
    tiny = KVStore(tmp_path / "small", 1000)
    assert tiny.put(key, doc.ids, doc.prompt.date_string, doc.cache.tensors()).result(timeout=60) is False


def test_the_background_writer_waits_while_a_question_is_answered(tiny_lm, tmp_path):
    """A cache written right after a read (a take-over model's) must not slow the question asked meanwhile: the
    writer starts its work only once the answers running end; a write called directly goes on at once."""
    from kvqa.generation.activity import answering, wait_until_quiet

    engine, doc = prefilled_and_stored(tiny_lm, tmp_path)
    path = stored_file(engine)
    path.unlink()
    key = cache_key(tiny_lm, DOC, weights=engine.weights)
    with answering():
        assert not wait_until_quiet(0.01)
        written = engine.store.put(key, doc.ids, doc.prompt.date_string, doc.cache.tensors())
        assert not written.done() and not wait_until_quiet(0.5) and not written.done() and not path.exists()
        other = KVStore(tmp_path / "direct", 64 * MB)
        assert other.write(key, doc.ids, doc.prompt.date_string, doc.cache.tensors())
    assert written.result(timeout=60) is True and path.exists() and wait_until_quiet(0)


def test_an_answer_left_open_holds_the_writer_back_a_bounded_time(tiny_lm, tmp_path, monkeypatch):
    from kvqa.cache import store as store_module
    from kvqa.generation.activity import answering

    engine, doc = prefilled_and_stored(tiny_lm, tmp_path)
    stored_file(engine).unlink()
    monkeypatch.setattr(store_module, "QUIET_WAIT_S", 0.2)  # the whole write's patience, not each piece's
    with answering():
        written = engine.store.put(cache_key(tiny_lm, DOC, weights=engine.weights), doc.ids, doc.prompt.date_string,
                                   doc.cache.tensors())
        assert written.result(timeout=30) is True


def test_an_answer_counts_as_running_until_its_stream_ends(tiny_lm, tmp_path):
    from kvqa.generation.activity import wait_until_quiet

    engine, doc = prefilled_and_stored(tiny_lm, tmp_path)
    stream = ask(engine, doc, QUESTIONS[0])
    pieces = stream.events()
    next(pieces)  # the first piece of the answer: the question's turn has been read
    assert not wait_until_quiet(0.01)
    for _ in pieces:
        pass
    assert wait_until_quiet(0)


def test_a_full_disk_leaves_no_partial_file(tiny_lm, tmp_path, monkeypatch, caplog):
    engine, doc = prefilled_and_stored(tiny_lm, tmp_path)
    stored_file(engine).unlink()
    real_fsync = os.fsync

    def full(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with caplog.at_level(logging.WARNING, logger="kvqa.cache.store"):
        assert not engine.store.write(cache_key(tiny_lm, DOC, weights=engine.weights), doc.ids,
                                      doc.prompt.date_string, doc.cache.tensors())
    monkeypatch.setattr(os, "fsync", real_fsync)
    assert list(tmp_path.iterdir()) == [] and "No space left" in caplog.text


def test_least_recently_used_files_go_first(tiny_lm, tmp_path):
    docs = [kvqa.document_from_text(f"Document {i}: its code word is {w}. " * 15) for i, w in
            enumerate(["alpha", "bravo", "charlie"])]
    probe = engine_with_store(tiny_lm, tmp_path / "probe")
    probe.prefill(docs[0])
    probe.store.flush()
    one = probe.store.size_bytes
    engine = engine_with_store(tiny_lm, tmp_path / "store", limit_mb=2.5 * one / MB)  # room for two
    for d in docs[:2]:
        engine.prefill(d)
        engine.store.flush()
    first = engine.store.entries()[0]
    os.utime(first, (1, 1))  # make the order certain whatever the clock's resolution
    os.utime(engine.store.entries()[-1], (2, 2))
    assert engine.prefill(docs[0]).origin == "disk"  # reading it marks it used: the other is now oldest
    engine.prefill(docs[2])
    engine.store.flush()
    assert len(engine.store.entries()) == 2
    assert engine_with_store(tiny_lm, tmp_path / "store").prefill(docs[0]).origin == "disk"
    assert engine_with_store(tiny_lm, tmp_path / "store").prefill(docs[1]).origin == "prefill"


def test_concurrent_writers_of_one_key_leave_one_whole_file(tiny_lm, tmp_path):
    engine, doc = prefilled_and_stored(tiny_lm, tmp_path)
    key = cache_key(tiny_lm, DOC, weights=engine.weights)
    stores = [KVStore(tmp_path, 64 * MB) for _ in range(4)]
    threads = [threading.Thread(target=s.write, args=(key, doc.ids, doc.prompt.date_string, doc.cache.tensors()))
               for s in stores for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert [p.name for p in tmp_path.iterdir()] == [stored_file(engine).name]  # no temporary left behind
    assert_same_cache(doc, engine_with_store(tiny_lm, tmp_path).prefill(DOC))


KILLED_WRITER = """
import os, sys, torch
from kvqa.cache.store import CacheKey, KVStore
key = CacheKey(model="m", weights="w", dtype="float32", device="cpu", attention="sdpa", text_sha256="t")
store = KVStore(sys.argv[1], 2**30)
real_fsync = os.fsync
def die(fd):
    print("writing", flush=True)
    os._exit(9)  # killed after the data, before the rename
os.fsync = die
store.write(key, [1, 2], "", [(torch.ones(1, 2, 2, 4), torch.ones(1, 2, 2, 4))])
"""


def test_a_writer_killed_mid_write_leaves_nothing_that_is_read(tmp_path):
    from kvqa.cache.store import CacheKey

    run = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(tmp_path)], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 9 and "writing" in run.stdout
    assert [p.suffix for p in tmp_path.iterdir()] == [".tmp"]  # the partial file, never renamed into place
    store = KVStore(tmp_path, 2**30)
    key = CacheKey(model="m", weights="w", dtype="float32", device="cpu", attention="sdpa", text_sha256="t")
    assert store.get(key) is None and store.entries() == []
    old = next(tmp_path.iterdir())
    os.utime(old, (1, 1))
    KVStore(tmp_path, 2**30)  # a writer that died long ago: its temporary is cleared when a store opens
    assert list(tmp_path.iterdir()) == []


RESTARTED = """
import json, sys
import kvqa
from kvqa.cache.store import KVStore
lm = kvqa.load_model(kvqa.Config())
engine = kvqa.make_engine(kvqa.Config.of(max_new_tokens=12, max_question_tokens=64), {}, lm=lm,
                          store=KVStore(sys.argv[1], 2**30))
doc = engine.prefill(kvqa.document_from_text(sys.argv[2]))
engine.store.flush()
print(json.dumps({"source": doc.origin, "answer": kvqa.ask(engine, doc, "What is the code word?").answer.text}))
"""


@pytest.mark.model  # loads the model itself (a subprocess or the app)
def test_a_second_process_restores_without_prefilling(tmp_path):
    runs = [subprocess.run([sys.executable, "-c", RESTARTED, str(tmp_path), DOC.text], capture_output=True,
                           text=True, timeout=300) for _ in range(2)]
    results = [json.loads(r.stdout.strip().splitlines()[-1]) for r in runs]
    assert [r["source"] for r in results] == ["prefill", "disk"]
    assert results[0]["answer"] == results[1]["answer"]


def test_a_llama3_date_line_from_another_day_is_restored_with_its_date(tiny_llama3_lm, tmp_path, monkeypatch):
    import kvqa.prompt as prompt

    monkeypatch.setattr(prompt, "today", lambda: "29 Nov 2026")
    engine, fresh = prefilled_and_stored(tiny_llama3_lm, tmp_path)
    monkeypatch.setattr(prompt, "today", lambda: "30 Nov 2026")
    restored = engine_with_store(tiny_llama3_lm, tmp_path).prefill(DOC)
    assert restored.origin == "disk" and restored.prompt.date_string == "29 Nov 2026"
    assert_same_cache(fresh, restored)
    assert ask(engine, restored, QUESTIONS[0]).answer.token_ids == ask(engine, fresh, QUESTIONS[0]).answer.token_ids


def test_a_restore_that_fails_after_its_checks_reads_the_document_again(tiny_lm, tmp_path, monkeypatch, caplog):
    import kvqa.cache.restore as restore

    engine, fresh = prefilled_and_stored(tiny_lm, tmp_path)

    def broken(*args, **kwargs):
        raise RuntimeError("shapes do not fit")

    monkeypatch.setattr(restore, "cache_from_tensors", broken)
    with caplog.at_level(logging.WARNING, logger="kvqa.cache.restore"):
        doc = engine.prefill(DOC)
    assert doc.origin == "prefill" and "could not restore the cache (RuntimeError" in caplog.text
    assert_same_cache(fresh, doc)


def test_the_default_settings_make_a_store_under_the_cache_folder(tmp_path):
    """Regression: with KVQA_STORE_DIR unset, store_for() must use cache_dir/store (it was handed None and the app
    failed to start with the store on; the tests run with it off)."""
    from kvqa.cache.store import store_for

    store = store_for(kvqa.Config.of(cache_dir=tmp_path))
    assert store is not None and store.folder == tmp_path / "store"
    assert store.limit_bytes == kvqa.Config().store.store_mb * 2**20
    assert store_for(kvqa.Config.of(cache_dir=tmp_path, store_mb=3)).limit_bytes == 3 * 2**20
    assert store_for(kvqa.Config.of(cache_dir=tmp_path, store_mb=0)) is None


def test_a_text_with_a_lone_surrogate_gets_its_own_key():
    """Text extracted from a file can hold a lone surrogate (invalid UTF-8 on its own); its digest is still made, and
    differs from the text without it."""
    from kvqa.cache.store import text_sha256

    assert text_sha256("notes \ud800") != text_sha256("notes ") == text_sha256("notes ")


def test_the_engine_restores_or_reads_whichever_it_has_done_faster(tiny_lm, tmp_path):
    """Rates are learnt from what the engine did; with none known it restores. A disk slower than reading (as a slow
    disk beside a fast GPU would be) makes it read again, and the file stays for later."""
    engine, fresh = prefilled_and_stored(tiny_lm, tmp_path)
    assert engine.read_rate == pytest.approx(fresh.tokens / fresh.prefill_s) and engine.restore_rate is None
    restored = engine.prefill(DOC)
    assert restored.origin == "disk" and engine.restore_rate > 0  # measured now
    file_bytes = stored_file(engine).stat().st_size
    assert engine.restore_is_faster(fresh.tokens, file_bytes) == (
        file_bytes / engine.restore_rate <= fresh.tokens / engine.read_rate)
    engine.restore_rate = 1.0  # a byte a second: reading is faster
    read_again = engine.prefill(DOC)
    assert read_again.origin == "prefill" and read_again.read_s is None
    engine.store.flush()
    assert [stored_file(engine)] == engine.store.entries()  # the file was kept, not written again
    assert_same_cache(fresh, read_again)
    engine.read_rate = 1e-9  # reading takes forever: restoring is faster again
    assert engine.prefill(DOC).origin == "disk"
