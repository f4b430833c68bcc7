"""ZeroGPU, as far as a machine without a GPU allows: a fake `spaces` whose decorator runs the function on pickled
copies of its arguments and returns pickled copies of its results, as the real one does across processes (a forked
worker on the same disk, spaces 0.51), recording every tensor and byte that crosses."""

from __future__ import annotations

import importlib
import importlib.machinery
import inspect
import io
import logging
import pickle
import sys
import types
from concurrent.futures import Future

import pytest
import torch

import kvqa
from kvqa.cache.store import KVStore
from kvqa.engines import LocalEngine, make_engine, zerogpu_status
from kvqa.engines.zerogpu import ZeroGPUEngine
from kvqa.session.ask import ask
from kvqa.session.session import Session

CONFIG = kvqa.Config.of(max_new_tokens=16, weights="fp32")  # the fake GPU is this CPU: float32 weights, as default_lm


def local_answer(lm, doc, question: str) -> tuple[int, ...]:
    """What the local engine answers with the same settings (the passage quoted, as on ZeroGPU): the reference."""
    return ask(LocalEngine(CONFIG, lm=lm), doc, question).answer.token_ids
TEXT = "The secret word is pelican. The museum opens at 9 am. " * 10


class Crossing(pickle.Pickler):
    """Pickles like the boundary does, recording every tensor that crosses it."""

    def __init__(self, file, seen: list):
        super().__init__(file)
        self.seen = seen

    def persistent_id(self, obj):
        if isinstance(obj, torch.Tensor):
            self.seen.append(obj.device.type)
        return None


def cross(value, seen: list, sent: list | None = None):
    buffer = io.BytesIO()
    Crossing(buffer, seen).dump(value)  # raises on anything unpicklable (a lock, a CUDA handle...)
    if sent is not None:
        sent.append(buffer.tell())
    return pickle.loads(buffer.getvalue())


@pytest.fixture
def fake_spaces(monkeypatch):
    calls = {"durations": [], "tensors": [], "sent": []}  # sent: bytes of each call's arguments

    def GPU(task=None, *, duration=None):
        def wrap(fn):
            def call(*args, **kwargs):
                seconds = duration(*args, **kwargs)
                assert 0 < seconds <= 300
                calls["durations"].append((fn.__name__, seconds))
                args, kwargs = cross((args, kwargs), calls["tensors"], calls["sent"])
                result = fn(*args, **kwargs)
                if inspect.isgenerator(result):
                    return (cross(item, calls["tensors"]) for item in result)
                return cross(result, calls["tensors"])
            return call
        return wrap(task) if task is not None else wrap

    module = types.ModuleType("spaces")
    module.__spec__ = importlib.machinery.ModuleSpec("spaces", None)
    module.GPU = GPU
    monkeypatch.setitem(sys.modules, "spaces", module)
    yield calls


def zerogpu_session(config=CONFIG, *, store: KVStore | None = None) -> Session:
    engine = make_engine(config, {"SPACES_ZERO_GPU": "true"}, store=store)  # what ZeroGPU Spaces set
    assert isinstance(engine, ZeroGPUEngine) and engine.info.cache_device == "cpu"
    return Session(engine)


def test_prefill_and_answers_cross_the_boundary_on_the_cpu_and_stay_exact(default_lm, fake_spaces):
    document = kvqa.document_from_text(TEXT)
    session = zerogpu_session()
    seen = []
    session.load(document, progress=seen.append)
    assert seen and seen[-1] == 1.0  # progress crosses the boundary as the prefill goes
    assert session.prefilled.cache.layers[0].key_buffer.device.type == "cpu"
    kept = [(k.clone(), v.clone()) for k, v in session.prefilled.cache.tensors()]
    local = kvqa.prefill(default_lm, document, config=CONFIG)
    for question in ["What is the secret word?", "When does the museum open?", "秘密的词是什么？"]:
        answer = session.ask(question).answer
        assert answer.token_ids == local_answer(default_lm, local, question)
    names = [name for name, _ in fake_spaces["durations"]]
    assert names == ["_prefill_on_gpu"] + ["_stream_on_gpu"] * 3
    assert fake_spaces["tensors"] and set(fake_spaces["tensors"]) == {"cpu"}  # no CUDA tensor ever crossed
    for (k, v), (k0, v0) in zip(session.prefilled.cache.tensors(), kept):  # the session's copy is untouched
        assert torch.equal(k, k0) and torch.equal(v, v0)


def test_settings_cross_too(default_lm, fake_spaces):
    """The answer length, the decoding settings and the model are the engine's, inside the GPU function as outside:
    the answer is the local engine's with the same settings, token for token."""
    config = kvqa.Config.of(max_new_tokens=5, draft_tokens=0, repeat_stop=0, quote_passages=0, weights="fp32")
    session = zerogpu_session(config)
    session.load(kvqa.document_from_text(TEXT))
    answer = session.ask("Describe the document in detail.").answer
    assert 0 < answer.timings.new_tokens <= 5 and answer.stop_reason in ("length", "eos")
    local = LocalEngine(config, lm=default_lm)
    expected = ask(local, local.prefill(kvqa.document_from_text(TEXT)), "Describe the document in detail.").answer
    assert answer.token_ids == expected.token_ids and answer.timings.question_tokens == expected.timings.question_tokens


def test_measured_baseline_runs_on_the_gpu_with_the_sessions_model(default_lm, fake_spaces, monkeypatch):
    import kvqa.engines.zerogpu as zerogpu

    loaded = []
    real = zerogpu.load_model
    monkeypatch.setattr(zerogpu, "load_model", lambda config: loaded.append(config.model) or real(config))
    session = zerogpu_session()
    session.load(kvqa.document_from_text(TEXT))
    answer = session.ask(kvqa.Ask("What is the secret word?", baseline=True)).answer
    assert session.turns[-1].baseline is not None and session.turns[-1].baseline.new_tokens == answer.timings.new_tokens
    assert [name for name, _ in fake_spaces["durations"]][-1] == "_answer_without_cache_on_gpu"
    assert set(loaded) == {CONFIG.model}


def test_bad_questions_fail_before_the_gpu_is_asked_for(default_lm, fake_spaces):
    session = zerogpu_session()
    session.load(kvqa.document_from_text(TEXT))
    with pytest.raises(kvqa.QuestionError):
        session.ask("   ").answer
    assert [name for name, _ in fake_spaces["durations"]] == ["_prefill_on_gpu"]


def test_stop_on_zerogpu_ends_with_the_text_shown(default_lm, fake_spaces):
    session = zerogpu_session()
    session.load(kvqa.document_from_text(TEXT))
    pieces = session.ask("Describe the document.")
    first = next(pieces)
    session.stop()
    answer = pieces.answer
    assert answer.stop_reason == "stopped" and answer.text.startswith(first)
    assert session.turns[-1].stopped and session.prefilled.cache.length == session.prefilled.tokens


def test_spaces_without_zerogpu_changes_nothing(monkeypatch):
    """A Space with its own GPU also has `spaces` installed: there, answering must not move caches around."""
    module = types.ModuleType("spaces")
    module.__spec__ = importlib.machinery.ModuleSpec("spaces", None)
    monkeypatch.setitem(sys.modules, "spaces", module)
    assert isinstance(make_engine(CONFIG, {}), LocalEngine)
    assert "not active" in zerogpu_status({})


def test_without_spaces_nothing_changes():
    assert "spaces" not in sys.modules
    assert isinstance(make_engine(CONFIG, {"SPACES_ZERO_GPU": "true"}), LocalEngine)
    assert "not installed" in zerogpu_status({})


def test_the_cache_crosses_once_and_without_its_reserve(default_lm):
    doc = kvqa.prefill(default_lm, kvqa.document_from_text(TEXT), config=CONFIG)
    filled = sum(k.nbytes + v.nbytes for k, v in doc.cache.tensors())
    data = pickle.dumps(doc)
    assert filled < len(data) < filled + 8 * 2**20  # the filled part once (views and reserve not duplicated)
    back = pickle.loads(data)
    assert back.cache.capacity == doc.cache.capacity and back.cache.nbytes == doc.cache.nbytes
    for (k, v), (k0, v0) in zip(back.cache.tensors(), doc.cache.tensors()):
        assert torch.equal(k, k0) and torch.equal(v, v0)
    assert kvqa.answer(default_lm, back, "What is the secret word?").token_ids == \
        kvqa.answer(default_lm, doc, "What is the secret word?").token_ids


# ---- the store: answers get the file's key, not the cache ------------------------------------------------

QUESTIONS = ["What is the secret word?", "When does the museum open?"]


def stored_session(folder, *, engine: ZeroGPUEngine | None = None) -> Session:
    """A ZeroGPU session whose document's cache is in the store at `folder` (written, not still being written)."""
    session = Session(engine) if engine is not None else zerogpu_session(store=KVStore(folder, 2**30))
    session.load(kvqa.document_from_text(TEXT))
    session.engine.store.flush()
    return session


def calls_after(fake_spaces, before: int) -> list[str]:
    return [name for name, _ in fake_spaces["durations"][before:]]


def test_with_a_store_answers_get_a_key_and_no_cache_crosses(default_lm, fake_spaces, tmp_path):
    session = stored_session(tmp_path)
    assert len(session.engine.store.entries()) == 1  # written from this side, after the prefill came back
    crossed, calls = len(fake_spaces["tensors"]), len(fake_spaces["durations"])
    answers = [session.ask(q).answer for q in QUESTIONS]
    assert calls_after(fake_spaces, calls) == ["_stream_on_gpu"] * len(QUESTIONS)
    assert len(fake_spaces["tensors"]) == crossed  # not one tensor crossed for the answers
    assert max(fake_spaces["sent"][calls:]) < 64 * 2**10  # a handle: not the cache (MBs), not even the tokenizer
    pickling = zerogpu_session()
    pickling.load(kvqa.document_from_text(TEXT))
    local = kvqa.prefill(default_lm, kvqa.document_from_text(TEXT), config=CONFIG)
    for question, answer in zip(QUESTIONS, answers):
        assert answer.token_ids == pickling.ask(question).answer.token_ids
        assert answer.token_ids == local_answer(default_lm, local, question)


@pytest.mark.parametrize("fault", ["missing", "damaged"])
def test_a_missing_or_damaged_file_falls_back_to_pickling(default_lm, fake_spaces, tmp_path, caplog, fault):
    """missing: this side sees the file gone (evicted) and pickles; damaged: the GPU function's checks refuse it, and
    a second call gets the pickled cache."""
    session = stored_session(tmp_path)
    (path,) = session.engine.store.entries()
    if fault == "missing":
        path.unlink()
    else:
        data = bytearray(path.read_bytes())
        data[len(data) // 2] ^= 0x5A
        path.write_bytes(bytes(data))
    local = kvqa.prefill(default_lm, kvqa.document_from_text(TEXT), config=CONFIG)
    calls = len(fake_spaces["durations"])
    with caplog.at_level(logging.WARNING):
        for question in QUESTIONS:
            crossed = len(fake_spaces["tensors"])
            assert session.ask(question).answer.token_ids == local_answer(default_lm, local, question)
            assert len(fake_spaces["tensors"]) > crossed  # the cache crossed
    expected = ["_stream_on_gpu"] * (len(QUESTIONS) + (fault == "damaged"))
    assert calls_after(fake_spaces, calls) == expected  # one call more only when the GPU side found it damaged
    assert len([r for r in caplog.records if r.name == "kvqa.engines.zerogpu"]) == 1  # one line, not per question
    if fault == "damaged":
        assert "checksum mismatch" in caplog.text and not path.exists()  # the store's own line; the file is removed


def test_an_answer_before_the_file_is_written_pickles_quietly(default_lm, fake_spaces, tmp_path, caplog, monkeypatch):
    store = KVStore(tmp_path, 2**30)
    monkeypatch.setattr(store, "put", lambda *args, **kwargs: Future())  # a write still going on
    session = zerogpu_session(store=store)
    session.load(kvqa.document_from_text(TEXT))
    crossed = len(fake_spaces["tensors"])
    with caplog.at_level(logging.WARNING):
        assert session.ask(QUESTIONS[0]).answer.text
    assert len(fake_spaces["tensors"]) > crossed and "kvqa zerogpu" not in caplog.text


def test_a_document_loaded_again_is_restored_from_the_store_without_a_gpu_call(default_lm, fake_spaces, tmp_path):
    first = stored_session(tmp_path)
    calls = len(fake_spaces["durations"])
    again = stored_session(tmp_path, engine=first.engine)  # another session, or this one after an eviction
    assert again.prefilled.origin == "disk" and again.prefilled is not first.prefilled
    assert calls_after(fake_spaces, calls) == []
    crossed = len(fake_spaces["tensors"])
    for question in QUESTIONS:
        assert again.ask(question).answer.token_ids == first.ask(question).answer.token_ids
    assert len(fake_spaces["tensors"]) == crossed  # the restored cache's answers go through the file too


def test_after_a_restart_the_first_prefill_tells_the_key_then_documents_restore(default_lm, fake_spaces, tmp_path):
    """A new process cannot know the GPU side's key (its model's weights, dtype and attention) before the GPU side has
    prefilled once: the first document is read there again, the next ones are restored."""
    other = kvqa.document_from_text("The harbour master's boat is called Gannet. " * 10)
    before = stored_session(tmp_path)
    before.load(other)
    before.engine.store.flush()
    calls = len(fake_spaces["durations"])
    restarted = stored_session(tmp_path)
    assert restarted.prefilled.origin == "prefill"
    restarted.load(other)
    assert restarted.prefilled.origin == "disk"
    assert calls_after(fake_spaces, calls) == ["_prefill_on_gpu"]
    assert len(restarted.engine.store.entries()) == 2  # the first was written again under the same key


def test_with_the_store_off_answers_pickle_the_cache_as_before(default_lm, fake_spaces):
    from kvqa.cache.store import store_for
    from kvqa.config import config_from_env

    config = config_from_env({"KVQA_STORE_MB": "0"}, max_new_tokens=16)
    session = zerogpu_session(config, store=store_for(config))
    assert session.engine.store is None
    session.load(kvqa.document_from_text(TEXT))
    crossed = len(fake_spaces["tensors"])
    session.ask(QUESTIONS[0]).answer
    assert len(fake_spaces["tensors"]) > crossed


@pytest.mark.model  # loads the model itself (a subprocess or the app)
def test_the_handover_script_runs_on_small_settings():
    """scripts/zerogpu_handover.py, which measured the README's table: the key crosses in kilobytes, the cache in
    megabytes, and both give back the same cache (the script checks it)."""
    import json
    import subprocess
    from pathlib import Path

    script = Path(__file__).parent.parent / "scripts" / "zerogpu_handover.py"
    run = subprocess.run([sys.executable, str(script), "--contexts", "300", "--repeats", "1", "--json"],
                         capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stderr
    (row,) = json.loads(run.stdout)
    assert row["context_tokens"] <= 300 and row["key_bytes"] < 64 * 2**10 < 2**20 < row["pickle_bytes"]
