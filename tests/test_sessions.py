"""Sessions under pressure: the cache budget and eviction, out-of-memory errors, session end, threads."""

from __future__ import annotations

import gc
import threading
import time
import weakref

import pytest
import torch

import kvqa
from kvqa.cache.budget import CacheBudget
from kvqa.engines import LocalEngine
from kvqa.model.kv_cache import bytes_per_token
from kvqa.session.ahead import YIELD_WAIT_S
from kvqa.session.session import Ask, Session

CONFIG = kvqa.Config.of(max_new_tokens=12, max_question_tokens=64)
DOCS = [kvqa.document_from_text(f"Document {i}. The code word of this document is {w}. " * 20)
        for i, w in enumerate(["alpha", "bravo", "charlie"])]


def answer(lm, session: Session, question: str, **kw) -> kvqa.Answer:
    return session.ask(Ask(question, **kw)).answer


def new_session(lm, budget=None, **kw) -> Session:
    return Session(LocalEngine(CONFIG, lm=lm), budget, **kw)


def cache_bytes(lm, document) -> int:
    prompt_tokens = len(kvqa.prefill(lm, document, config=CONFIG).ids)
    return bytes_per_token(lm.config, lm.dtype) * (prompt_tokens + CONFIG.limits.reserve_tokens)


def test_least_recently_used_cache_is_evicted_and_rebuilt_on_the_next_question(tiny_lm):
    one = cache_bytes(tiny_lm, DOCS[0])
    budget = CacheBudget(int(one * 2.5))  # room for two documents
    sessions = [new_session(tiny_lm, budget) for _ in DOCS]
    sessions[0].load(DOCS[0])
    sessions[1].load(DOCS[1])
    fresh = answer(tiny_lm, sessions[0], "What is the code word?")  # session 0 is now the most recently used
    sessions[2].load(DOCS[2])  # evicts session 1, the least recently used
    assert sessions[1].prefilled is None and sessions[1].document is DOCS[1]
    assert sessions[0].prefilled is not None and budget.used_bytes <= budget.limit_bytes
    rebuilt = []
    again = answer(tiny_lm, sessions[1], "What is the code word?", on_rebuild=rebuilt.append)
    assert len(rebuilt) == 1 and sessions[1].prefilled is rebuilt[0]
    reference = new_session(tiny_lm)
    reference.load(DOCS[1])
    assert again.token_ids == answer(tiny_lm, reference, "What is the code word?").token_ids
    assert answer(tiny_lm, sessions[0], "What is the code word?").token_ids == fresh.token_ids


def test_a_document_larger_than_the_budget_is_refused_with_both_numbers(tiny_lm):
    session = new_session(tiny_lm, CacheBudget(1000))
    with pytest.raises(kvqa.DocumentTooLong, match=r"needs [\d,.]+ MiB; the memory budget for caches is [\d,.]+ MiB"):
        session.load(DOCS[0])
    assert session.document is None and session.prefilled is None


def fail_with_oom(lm, monkeypatch, after_calls: int):
    inside = lm.model.lm_head  # run by every forward and every decode step
    real, calls = inside.forward, []

    def forward(*args, **kwargs):
        calls.append(1)
        if len(calls) > after_calls:
            raise torch.OutOfMemoryError("simulated")
        return real(*args, **kwargs)

    monkeypatch.setattr(inside, "forward", forward)


def test_out_of_memory_is_reported_and_the_session_keeps_serving(tiny_lm, monkeypatch):
    session = new_session(tiny_lm, CacheBudget(10**12))
    session.load(DOCS[0])
    before = session.prefilled
    fresh = answer(tiny_lm, session, "What is the code word?")
    fail_with_oom(tiny_lm, monkeypatch, after_calls=0)
    with pytest.raises(kvqa.OutOfMemory, match="ran out of memory while reading the document"):
        session.load(DOCS[1])
    assert session.document is DOCS[0] and session.prefilled is before  # the old document is still there
    assert session.budget.touch(session)  # and still counted: the next question does not read it again
    monkeypatch.undo()
    fail_with_oom(tiny_lm, monkeypatch, after_calls=2)
    with pytest.raises(kvqa.OutOfMemory, match="while answering"):
        answer(tiny_lm, session, "What is the code word?")
    monkeypatch.undo()
    assert session.prefilled.cache.length == session.prefilled.tokens
    assert answer(tiny_lm, session, "What is the code word?").token_ids == fresh.token_ids


def test_closing_a_session_frees_its_cache(tiny_lm):
    budget = CacheBudget(10**12)
    session = new_session(tiny_lm, budget)
    session.load(DOCS[0])
    cache = weakref.ref(session.prefilled.cache)
    assert budget.used_bytes > 0
    session.close()
    gc.collect()
    assert budget.used_bytes == 0 and cache() is None


def test_an_answer_resumed_in_other_threads_is_the_same_and_builds_no_graph(tiny_lm):
    """Gradio may run each step of a streaming handler in a different worker thread."""
    session = new_session(tiny_lm)
    session.load(DOCS[0])
    expected = answer(tiny_lm, session, "What is the code word?")
    events, results = session.ask("What is the code word?"), []

    def step():
        try:
            results.append(next(events))
        except StopIteration:
            results.append(None)

    while not results or results[-1] is not None:
        thread = threading.Thread(target=step)
        thread.start()
        thread.join()
    assert "".join(results[:-1]) == expected.text and events.answer.token_ids == expected.token_ids
    assert not any(k.requires_grad or v.requires_grad for k, v in session.prefilled.cache.tensors())


def test_a_session_does_one_thing_at_a_time(tiny_lm):
    session = new_session(tiny_lm)
    session.load(DOCS[0])
    running = session.ask("What is the code word?")
    next(running)
    started = time.monotonic()
    with pytest.raises(kvqa.BusyError):
        answer(tiny_lm, session, "Another?")
    with pytest.raises(kvqa.BusyError):
        session.load(DOCS[1])
    assert time.monotonic() - started < YIELD_WAIT_S / 2  # refused at once: no part is being read ahead to wait for
    running.close()
    reference = new_session(tiny_lm)
    reference.load(DOCS[0])
    assert answer(tiny_lm, session, "Another?").token_ids == answer(tiny_lm, reference, "Another?").token_ids
    assert session.prefilled.cache.length == session.prefilled.tokens  # the stopped answer left nothing behind


def test_two_answers_at_once_with_more_sessions_than_the_budget_holds(tiny_lm):
    """--concurrency 2 against a budget that holds 2.5 caches and six sessions. Eviction only takes idle
    sessions' caches, admission reserves its bytes, so: no answer loses its cache, no session loses its document,
    every answer is the one a session of its own gives, and the live caches never exceed the budget."""
    one = max(cache_bytes(tiny_lm, doc) for doc in DOCS)
    budget = CacheBudget(int(one * 2.5))
    sessions = [new_session(tiny_lm, budget) for _ in range(6)]
    for n, session in enumerate(sessions):
        session.load(DOCS[n % 3])
    expected = []
    for doc in DOCS:
        reference = new_session(tiny_lm)
        reference.load(doc)
        expected.append(answer(tiny_lm, reference, "What is the code word?").token_ids)

    def live():
        return sum(s.prefilled.cache_bytes for s in sessions if s.prefilled is not None)

    peaks, failures, done = [], [], threading.Event()

    def watch():  # sampled every half millisecond: a loop that never waits would hold the GIL from the answers
        while not done.wait(0.0005):
            peaks.append(max(live(), budget.used_bytes))

    def work(mine: list[int]):
        try:
            for round_ in range(4):
                for n in mine:
                    got = answer(tiny_lm, sessions[n], "What is the code word?").token_ids
                    if got != expected[n % 3]:
                        failures.append(f"session {n} round {round_}: wrong answer")
        except Exception as e:  # noqa: BLE001 - reported below with its type
            failures.append(f"{type(e).__name__}: {e}")

    watcher = threading.Thread(target=watch)
    workers = [threading.Thread(target=work, args=([0, 2, 4],)), threading.Thread(target=work, args=([1, 3, 5],))]
    watcher.start()
    for t in workers:
        t.start()
    for t in workers:
        t.join()
    done.set()
    watcher.join()
    assert failures == []
    assert max(peaks) <= budget.limit_bytes and len(peaks) > 10
    assert all(s.document is not None and len(s.turns) == 4 for s in sessions)
    assert budget.used_bytes == live() <= budget.limit_bytes


def test_eviction_skips_a_session_at_work_without_waiting_for_it():
    """try_evict() on a session reading a document returns False at once and leaves its cache-to-be alone (waiting
    would stall the budget's eviction behind a long read); once idle, it drops the cache and keeps the document."""
    from fakes import FakeEngine

    reading, release = threading.Event(), threading.Event()
    engine = FakeEngine(on_chunk=lambda document, chunk: (reading.set(), release.wait(10)))
    session = Session(engine)
    document = kvqa.document_from_text("The code word is delta.")
    loader = threading.Thread(target=session.load, args=(document,))
    loader.start()
    assert reading.wait(10) and session.busy
    evicted = session.try_evict()
    release.set()
    loader.join()
    assert evicted is False and session.prefilled is not None
    assert session.try_evict() is True and session.prefilled is None and session.document is document
