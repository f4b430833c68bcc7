"""Sessions share one cache per document: one prefill, counted once, answers that never mix."""

from __future__ import annotations

import threading

import torch

import kvqa
from kvqa.cache.budget import CacheBudget
from kvqa.cache.shared import SharedCaches
from kvqa.cache.store import KVStore
from kvqa.engines import LocalEngine, make_engine
from kvqa.errors import BusyError
from kvqa.session.session import Ask, Session
from kvqa.ui.latency import cache_origin

CONFIG = kvqa.Config.of(max_new_tokens=10, max_question_tokens=64)
DOC = kvqa.document_from_text("The harbour's code word is pelican. The ferry leaves at nine every morning. " * 10)
OTHER = kvqa.document_from_text("The library's code word is walrus. It opens at ten on Sundays. " * 10)
QUESTIONS = ["What is the code word?", "When does the ferry leave?", "What happens every morning?"]


class CountingEngine(LocalEngine):
    def __init__(self, *args, **kw):
        super().__init__(*args, **kw)
        self.prefills = 0

    def prefill(self, document, **kw):
        self.prefills += 1
        return super().prefill(document, **kw)


def snapshot(doc: kvqa.PrefilledDocument) -> list[torch.Tensor]:
    return [t.clone() for pair in doc.cache.tensors() for t in pair]


def test_eight_sessions_loading_one_document_at_once_prefill_it_once(tiny_lm):
    engine, budget, shared = CountingEngine(CONFIG, lm=tiny_lm), CacheBudget(2**30), SharedCaches()
    sessions = [Session(engine, budget, shared=shared) for _ in range(8)]
    start = threading.Barrier(len(sessions))
    errors = []

    def load(session):
        start.wait()
        try:
            session.load(DOC)
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=load, args=(s,)) for s in sessions]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == [] and engine.prefills == 1
    assert len({id(s.prefilled) for s in sessions}) == 1 and len(shared) == 1
    assert sorted(s.origin for s in sessions) == ["memory"] * 7 + ["prefill"]
    assert budget.used_bytes == sessions[0].prefilled.cache_bytes  # one cache, counted once
    answers = [s.ask(QUESTIONS[0]).answer.token_ids for s in sessions]
    alone = Session(CountingEngine(CONFIG, lm=tiny_lm))  # a session of its own, nothing shared
    alone.load(DOC)
    assert answers == [alone.ask(QUESTIONS[0]).answer.token_ids] * len(sessions) and answers[0]
    origins = sorted(cache_origin(s).split(":")[0] for s in sessions)
    assert origins == ["read now"] + ["shared with another session"] * 7


def test_concurrent_questions_on_a_shared_cache_take_turns_and_never_mix(tiny_lm):
    engine, shared = LocalEngine(CONFIG, lm=tiny_lm), SharedCaches()
    alone = Session(engine)
    alone.load(DOC)
    expected = {q: alone.ask(q).answer.token_ids for q in QUESTIONS}
    sessions = [Session(engine, shared=shared) for _ in range(6)]
    for s in sessions:
        s.load(DOC)
    before = snapshot(sessions[0].prefilled)
    got, errors = {}, []
    start = threading.Barrier(len(sessions))

    def ask(i, session):
        start.wait()
        try:
            got[i] = session.ask(QUESTIONS[i % len(QUESTIONS)]).answer.token_ids
        except Exception as e:  # noqa: BLE001 - reported below
            errors.append(e)

    threads = [threading.Thread(target=ask, args=(i, s)) for i, s in enumerate(sessions)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert got == {i: expected[QUESTIONS[i % len(QUESTIONS)]] for i in range(len(sessions))}
    after = snapshot(sessions[0].prefilled)
    assert sessions[0].prefilled.cache.length == sessions[0].prefilled.tokens
    assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True))


def test_a_session_that_leaves_does_not_free_a_cache_others_use(tiny_lm):
    engine, budget, shared = LocalEngine(CONFIG, lm=tiny_lm), CacheBudget(2**30), SharedCaches()
    first, second = Session(engine, budget, shared=shared), Session(engine, budget, shared=shared)
    first.load(DOC)
    second.load(DOC)
    nbytes = first.prefilled.cache_bytes
    assert budget.used_bytes == nbytes
    first.close()
    assert budget.used_bytes == nbytes and second.ask(QUESTIONS[0]).answer.text
    assert budget.touch(second)  # still held: no second prefill
    second.close()
    assert budget.used_bytes == 0


def test_a_shared_cache_is_counted_once_against_the_budget(tiny_lm):
    """Room for two caches: three sessions on one document and a fourth on another all fit."""
    engine, shared = CountingEngine(CONFIG, lm=tiny_lm), SharedCaches()
    probe = Session(engine)
    probe.load(DOC)
    budget = CacheBudget(int(probe.prefilled.cache_bytes * 2.2))
    sessions = [Session(engine, budget, shared=shared) for _ in range(3)]
    for s in sessions:
        s.load(DOC)
    other = Session(engine, budget, shared=shared)
    other.load(OTHER)
    assert all(s.prefilled is not None for s in [*sessions, other])
    assert engine.prefills == 3  # the probe, DOC once, OTHER once


def test_stop_while_waiting_for_another_sessions_answer_leaves_the_session_as_it_was(tiny_lm):
    engine, shared = LocalEngine(CONFIG, lm=tiny_lm), SharedCaches()
    first, second = Session(engine, shared=shared), Session(engine, shared=shared)
    first.load(DOC)
    second.load(DOC)
    first.prefilled.turn.acquire()  # another session is answering
    raised = []

    def ask():
        try:
            second.ask(QUESTIONS[0]).answer
        except BusyError as e:
            raised.append(str(e))

    waiting = threading.Thread(target=ask)
    try:
        waiting.start()
        while waiting.is_alive():  # Stop pressed (again and again) until the waiting question gives up
            second.stop()
            waiting.join(0.01)
    finally:
        first.prefilled.turn.release()
    assert len(raised) == 1 and "another session was answering" in raised[0]
    assert second.turns == [] and not second.busy
    assert second.ask(QUESTIONS[0]).answer.text


def test_an_evicted_cache_comes_back_from_disk_with_the_same_answers(tiny_lm, tmp_path):
    engine = make_engine(CONFIG, {}, lm=tiny_lm, store=KVStore(tmp_path, 2**30))
    probe = Session(LocalEngine(CONFIG, lm=tiny_lm))
    probe.load(DOC)
    budget, shared = CacheBudget(int(probe.prefilled.cache_bytes * 1.5)), SharedCaches()  # room for one cache
    first, second = Session(engine, budget, shared=shared), Session(engine, budget, shared=shared)
    first.load(DOC)
    before = first.ask(QUESTIONS[0]).answer.token_ids
    engine.store.flush()
    second.load(OTHER)
    assert first.prefilled is None  # evicted to make room
    rebuilt = []
    assert first.ask(Ask(QUESTIONS[0], on_rebuild=rebuilt.append)).answer.token_ids == before
    assert first.origin == "disk" and len(rebuilt) == 1 and "restored from disk" in cache_origin(first)
