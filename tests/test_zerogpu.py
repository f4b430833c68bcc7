"""ZeroGPU, as far as a machine without a GPU allows: a fake `spaces` whose decorator runs the function on pickled
copies of its arguments and returns pickled copies of its results, as the real one does across processes."""

from __future__ import annotations

import importlib
import importlib.machinery
import inspect
import io
import pickle
import sys
import types

import pytest
import torch

import kvqa
from kvqa.engines import LocalEngine, make_engine, zerogpu_status
from kvqa.engines.zerogpu import ZeroGPUEngine
from kvqa.session import Session

CONFIG = kvqa.Config(max_new_tokens=16)
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


def cross(value, seen: list):
    buffer = io.BytesIO()
    Crossing(buffer, seen).dump(value)  # raises on anything unpicklable (a lock, a CUDA handle...)
    return pickle.loads(buffer.getvalue())


@pytest.fixture
def fake_spaces(monkeypatch):
    calls = {"durations": [], "tensors": []}

    def GPU(task=None, *, duration=None):
        def wrap(fn):
            def call(*args, **kwargs):
                seconds = duration(*args, **kwargs)
                assert 0 < seconds <= 300
                calls["durations"].append((fn.__name__, seconds))
                args, kwargs = cross((args, kwargs), calls["tensors"])
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


def zerogpu_session(config=CONFIG) -> Session:
    engine = make_engine(config, {"SPACES_ZERO_GPU": "true"})  # what ZeroGPU Spaces set
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
        assert answer.token_ids == kvqa.answer(default_lm, local, question).token_ids
    names = [name for name, _ in fake_spaces["durations"]]
    assert names == ["_prefill_on_gpu"] + ["_stream_on_gpu"] * 3
    assert fake_spaces["tensors"] and set(fake_spaces["tensors"]) == {"cpu"}  # no CUDA tensor ever crossed
    for (k, v), (k0, v0) in zip(session.prefilled.cache.tensors(), kept):  # the session's copy is untouched
        assert torch.equal(k, k0) and torch.equal(v, v0)


def test_settings_cross_too(default_lm, fake_spaces):
    """Issue 10: the answer length and the model are the engine's, inside the GPU function as outside."""
    session = zerogpu_session(kvqa.Config(max_new_tokens=5))
    session.load(kvqa.document_from_text(TEXT))
    answer = session.ask("Describe the document in detail.").answer
    assert answer.timings.new_tokens <= 5 and answer.stop_reason in ("length", "eos")


def test_measured_baseline_runs_on_the_gpu_with_the_sessions_model(default_lm, fake_spaces, monkeypatch):
    import kvqa.engines.zerogpu as zerogpu

    loaded = []
    real = zerogpu.load_model
    monkeypatch.setattr(zerogpu, "load_model", lambda config: loaded.append(config.model) or real(config))
    session = zerogpu_session()
    session.load(kvqa.document_from_text(TEXT))
    answer = session.ask("What is the secret word?", baseline=True).answer
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
