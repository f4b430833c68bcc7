"""A long document's other parts are read ahead, one at a time, into the engine's store, while the user asks: a
question takes the model first (the part being read is dropped half read and read again later), a routed question
then restores its part instead of reading it, and closing the session or loading another document ends the reading.
The fake engine stands in for the model (a "store" that restores any text it read whole)."""

from __future__ import annotations

import threading
import time

import pytest

import app as app_module
from fakes import FakeEngine
from kvqa.cache.budget import CacheBudget
from kvqa.config import Config
from kvqa.documents.parts import part_of
from kvqa.documents.reading import document_from_text
from kvqa.session.session import Ask, Session
from test_routing import TEXT, TOPICS


def wait_until(condition, timeout: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.01)
    return True


def session_with(engine: FakeEngine, budget: CacheBudget | None = None) -> Session:
    session = Session(engine, budget)
    session.load(document_from_text(TEXT, name="long.txt"))
    assert len(session.parts) > 2
    return session


def test_every_part_is_read_once_and_a_routed_question_restores_its_part():
    engine = FakeEngine(context_tokens=120, keeps_caches=True)
    session = session_with(engine)
    ready = []
    read = session.read_ahead(on_ready=lambda done, total: ready.append((done, total)))
    parts = len(session.parts)
    assert read == parts - 1 and len(engine.read) == parts  # the first part at load, then each other part once
    assert ready[-1] == (parts, parts) and [d for d, _ in ready] == sorted(d for d, _ in ready)
    assert "read ahead" in " ".join(str(m) for m in session.parts.reads.values())
    session.ask(f"What is said about the {TOPICS[7].split()[1]}?").answer  # noqa: B018 - runs the answer
    assert "Section 7 is about" in session.document.text and session.prefilled.origin == "disk"
    assert len(engine.read) == parts  # restored, not read again
    assert session.read_ahead() == 0  # nothing left to read


def test_nothing_is_read_ahead_without_a_store_or_for_a_pinned_part():
    engine = FakeEngine(context_tokens=120)
    session = session_with(engine)
    assert session.read_ahead() == 0 and len(engine.read) == 1
    stored = FakeEngine(context_tokens=120, keeps_caches=True)
    pinned = Session(stored)
    long = document_from_text(TEXT, name="long.txt")
    pinned.load(long, part=part_of(long, 1, 400))
    assert pinned.read_ahead() == 0 and len(stored.read) == 1


def test_a_question_takes_the_model_and_the_half_read_part_is_read_again_whole():
    hold, asked, answered = threading.Event(), threading.Event(), threading.Event()
    engine = FakeEngine(context_tokens=120, keeps_caches=True, chunks=3)
    session = session_with(engine)

    def on_chunk(document, chunk):
        if len(engine.read) == 2 and chunk == 1 and not hold.is_set():  # the first part read ahead, half way
            hold.set()
            assert asked.wait(10)
    engine.on_chunk = on_chunk
    reader = threading.Thread(target=session.read_ahead)
    reader.start()
    assert hold.wait(10)

    def ask():
        session.ask(f"What is said about the {TOPICS[0].split()[1]}?").answer  # noqa: B018
        answered.set()
    asker = threading.Thread(target=ask)
    asker.start()
    assert wait_until(session.lock.wanted.is_set)  # the question waits for the reader to give way
    asked.set()
    asker.join(10)
    reader.join(10)
    assert answered.is_set() and not reader.is_alive()
    half = engine.read[1]
    assert [d.text for d in engine.read].count(half.text) == 2  # dropped half read, then read again whole
    assert session.turns[-1].answer and len(session.parts.reads) == len(session.parts)


def test_closing_the_session_mid_read_ends_the_reading_and_frees_the_budget():
    budget = CacheBudget(2**30)
    engine = FakeEngine(context_tokens=120, keeps_caches=True, chunks=3)
    session = session_with(engine, budget)

    def on_chunk(document, chunk):
        if len(engine.read) == 2 and chunk == 1:
            session.close()
    engine.on_chunk = on_chunk
    assert session.read_ahead() == 0
    assert len(engine.read) == 2 and len(engine.stored) == 1  # the half part was never kept
    assert budget.used_bytes == 0 and session.prefilled is None


def test_loading_another_document_ends_the_reading_of_the_first():
    engine = FakeEngine(context_tokens=120, keeps_caches=True, chunks=2)
    session = session_with(engine)
    started = threading.Event()

    def on_chunk(document, chunk):
        if not started.is_set():
            started.set()
            assert wait_until(session.lock.wanted.is_set)  # the load waits for the reader to give way
    engine.on_chunk = on_chunk
    reader = threading.Thread(target=session.read_ahead)
    reader.start()
    assert started.wait(10)
    session.load(document_from_text("A short note about the harbour ferry.", name="note.txt"))
    reader.join(10)
    assert not reader.is_alive() and session.document.text.startswith("A short note")
    assert all("Section" not in m for m in map(str, session.parts.reads.values()))
    assert session.parts.reads == {}


def test_no_room_in_the_budget_stops_reading_ahead_without_evicting_anyone():
    engine = FakeEngine(context_tokens=120, keeps_caches=True)
    other = Session(engine, budget := CacheBudget(200 * 1024))
    other.load(document_from_text("word " * 60, name="other.txt"))  # 60 "tokens" of 1 KiB
    session = session_with(engine, budget)
    assert session.read_ahead() == 0  # a part of ~110 tokens does not fit beside the two caches held
    assert other.prefilled is not None and session.prefilled is not None


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_app_reads_ahead_after_loading_and_the_status_follows(lang):
    engine = FakeEngine(context_tokens=120, keeps_caches=True, chunks=2)
    go = threading.Event()
    engine.on_chunk = lambda document, chunk: go.wait(10) if len(engine.read) > 1 else None  # hold the reading
    kvqa_app = app_module.KvqaApp(Config(), engine, budget=CacheBudget(2**30))
    session, _ = kvqa_app.service.read(document_from_text(TEXT, name="long.txt"), None, None, lambda *a, **k: None,
                               lang=lang)
    parts = len(session.parts)
    ticking = kvqa_app.status.on_tick(session, lang)
    assert ticking[kvqa_app.page.ahead_timer].active is True
    status = ticking[kvqa_app.page.status]
    assert (f"parts ready: **1 of {parts}**; the others are being read" if lang == "en"
            else f"已就绪的部分：**1/{parts}**；其余部分正在后台读取") in status
    go.set()
    assert wait_until(lambda: not kvqa_app.service.reading_ahead(session))
    done = kvqa_app.status.on_tick(session, lang)
    assert done[kvqa_app.page.ahead_timer].active is False
    assert (f"parts ready: **all {parts}**" if lang == "en" else f"全部 {parts} 个") in done[kvqa_app.page.status]
    quiet = app_module.KvqaApp(Config(), FakeEngine(context_tokens=120), budget=CacheBudget(2**30))
    alone, _ = quiet.service.read(document_from_text(TEXT, name="long.txt"), None, None, lambda *a, **k: None)
    assert not quiet.service.reading_ahead(alone)  # no store: parts are read when a question needs them
    assert "the others are read when a question needs them" in quiet.status.status_markdown(alone)


def test_with_the_real_engine_a_part_read_ahead_is_restored_and_answers_as_if_read_now(tiny_lm, tmp_path):
    import kvqa
    from kvqa.cache.store import KVStore
    from kvqa.engines.stored import StoredLocalEngine

    config = Config.of(max_new_tokens=8, max_question_tokens=64, chunk_size=256, quote_passages=1)
    engine = StoredLocalEngine(config, lm=tiny_lm, store=KVStore(tmp_path, 512 * 2**20))
    text = "\n\n".join(f"Section {n} names the codeword marigold{n}. " + "The harbour wall was repaired. " * 60
                       for n in range(14))  # about 6,000 tokens: two parts of a 4,096-token context
    session = Session(engine)
    session.load(document_from_text(text, name="long.txt"))
    assert len(session.parts) >= 2 and engine.info.keeps_caches
    assert session.read_ahead() == len(session.parts) - 1
    engine.store.flush()
    assert len(engine.store.entries()) == len(session.parts)  # every part in the store
    question = "Which section names the codeword marigold13?"
    answer = session.ask(question).answer
    assert session.part_index == len(session.parts) - 1 and session.prefilled.origin == "disk"
    fresh = kvqa.LocalEngine(config, lm=tiny_lm).prefill(session.document)  # the same part, read now
    assert kvqa.answer(tiny_lm, fresh, question, quote_passages=1).token_ids == answer.token_ids


def test_a_reader_who_will_not_wait_is_answered_from_the_best_part_ready():
    engine = FakeEngine(context_tokens=120, keeps_caches=True)
    session = session_with(engine)
    question = f"What is said about the {TOPICS[7].split()[1]}?"  # its section lies in the last part
    session.ask(Ask(question, ready_only=True)).answer  # noqa: B018 - runs the answer
    assert len(engine.read) == 1 and session.part_index == 0  # nothing read: part 1 is all that is ready
    assert str(session.notice).startswith("Answering from part 1 of") and "is not read yet" in str(session.notice)
    assert session.also_index == len(session.parts) - 1  # offered: ask again in the best part (it would be read then)
    session.read_ahead()
    read = len(engine.read)
    session.ask(Ask(question, ready_only=True)).answer  # noqa: B018
    assert "Section 7 is about" in session.document.text and len(engine.read) == read  # ready now: restored
    assert str(session.notice).startswith(f"Answering from part {len(session.parts)} of")


def test_a_reader_who_waits_gets_the_part_that_matches_read_first():
    engine = FakeEngine(context_tokens=120)  # no store: nothing but the part in memory is ever ready
    session = session_with(engine)
    session.ask(f"What is said about the {TOPICS[7].split()[1]}?").answer  # noqa: B018
    assert "Section 7 is about" in session.document.text and len(engine.read) == 2


class Watched(FakeEngine):
    """The fake engine that notes when a read's progress call refused to go on (the read gave way)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.gave_way = threading.Event()

    def prefill(self, document, *, progress=None, admit=None):
        def watched(fraction):
            try:
                progress(fraction)
            except BaseException:
                self.gave_way.set()
                raise
        return super().prefill(document, progress=watched if progress else None, admit=admit)


class Held(FakeEngine):
    """The fake engine whose reads and answers wait, once begun, until `release` is set."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.begun, self.release = threading.Event(), threading.Event()
        self.on_chunk = lambda document, chunk: self.hold()

    def hold(self):
        self.begun.set()
        assert self.release.wait(10)

    def answer_turn(self, doc, question, *, should_stop=None):
        self.hold()
        return super().answer_turn(doc, question, should_stop=should_stop)


@pytest.mark.parametrize("action", ["load", "question"])
def test_reading_ahead_gives_way_to_a_load_or_a_question_in_another_session(action):
    """Any session's load or question comes first: the part being read ahead is dropped at its next chunk (the
    process has the cores for one read), then read again whole once the other session is done."""
    engine = Watched(context_tokens=120, keeps_caches=True, chunks=3)
    session = session_with(engine)
    other = Session(Held())
    if action == "question":
        other.engine.release.set()
        other.load(document_from_text("The other document says the ferry leaves at six."))
        other.engine.release.clear()
        other.engine.begun.clear()
    elsewhere = threading.Thread(target=lambda: other.load(document_from_text("Another document.")) if
                                 action == "load" else other.ask("When does the ferry leave?").answer)

    def on_chunk(document, chunk):
        if len(engine.read) == 2 and chunk == 1 and not elsewhere.is_alive():  # the first part read ahead, half way
            elsewhere.start()
            assert other.engine.begun.wait(10)  # the other session's load or question is running
    engine.on_chunk = on_chunk
    reader = threading.Thread(target=session.read_ahead)
    reader.start()
    try:
        assert engine.gave_way.wait(10)  # dropped at its next chunk, while the other session works
    finally:
        other.engine.release.set()
        elsewhere.join(10)
        reader.join(10)
    half = engine.read[1]
    assert [d.text for d in engine.read].count(half.text) == 2  # read again whole afterwards
    assert len(session.parts.reads) == len(session.parts) and not reader.is_alive()
