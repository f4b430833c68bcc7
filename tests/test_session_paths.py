"""The paths of a Session that the rest of the suite walked only on the way elsewhere: asking before loading, Stop,
the measured baseline after a stop or with follow-ups, progress and callbacks when a cache is rebuilt or another
part is read, recompute mode (`kvqa ask --no-cache`), and the latency panel's speedup. Each test names the mutation
it was written for (mutmut's survivors: docs/testing.md)."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

import kvqa
from fakes import FakeEngine
from kvqa.cache.budget import CacheBudget
from kvqa.cache.shared import SharedCaches
from kvqa.documents.parts import part_of
from kvqa.engines import LocalEngine
from kvqa.errors import QuestionError
from kvqa.session.session import Ask, Session, Turn
from kvqa.timing import Timings
from kvqa.ui.latency import cache_origin, speedup

CONFIG = kvqa.Config.of(max_new_tokens=12, max_question_tokens=256)
TEXT = ("The ferry to Aland leaves at nine from the west pier. The museum opens at ten and closes at six. "
        "The bridge was finished in 1932 after four years of work. ") * 6


def session_on(lm, **kw) -> Session:
    session = Session(LocalEngine(CONFIG, lm=lm), **kw)
    session.load(kvqa.document_from_text(TEXT))
    return session


def test_asking_before_loading_says_to_load_a_document_first():
    """Guards the message id of the refusal (mutmut: `QuestionError(None)`, or another id)."""
    session = Session(FakeEngine())
    with pytest.raises(QuestionError) as refused:
        session.ask("Anything?")
    assert refused.value.message.key == "question.no_document"
    assert session.turns == [] and session.document is None


def test_a_new_session_holds_nothing_and_is_free():
    """What the app reads of a session before its first document (mutmut: __init__'s initial values)."""
    session = Session(FakeEngine())
    assert (session.whole, session.document, session.notice, session.prefilled, session.fingerprint) == (None,) * 5
    assert (session.parts, session.turns, session.conversation(), session.history()) == ([], [], [], [])
    assert (session.parts.pinned, session.closed, session.recompute, session.busy) == (False,) * 4
    assert all(type(flag) is bool for flag in (session.parts.pinned, session.closed, session.recompute))


def test_the_same_document_again_is_already_loaded_and_keeps_the_conversation():
    """Loading what is loaded reads nothing and keeps the turns; once its cache was evicted it is read again
    (mutmut: the "already loaded" check's `is not None` made `is None`)."""
    engine = FakeEngine()
    session = Session(engine)
    document = kvqa.document_from_text("word " * 40)
    assert session.load(document) is True
    session.ask("What word?").answer  # noqa: B018 - runs it
    assert session.load(document) is False and len(session.turns) == 1 and engine.prefills == 1
    assert session.try_evict()
    assert session.load(document) is True and session.prefilled is not None and engine.prefills == 2


def test_a_cache_shared_from_memory_says_how_long_getting_it_took_not_the_first_read():
    """The second session of one document takes the first one's cache: its status says "from memory" and the time
    that took it, not the first read's (mutmut: ready_s from the prefill for a shared cache, or `+ started`)."""
    class SlowReader(FakeEngine):  # its read "took" 5 s: taking the cache from memory takes far less, even when busy
        def prefill(self, document, **kwargs):
            return replace(super().prefill(document, **kwargs), prefill_s=5.0)

    engine, shared = SlowReader(), SharedCaches()
    document = kvqa.document_from_text("word " * 40)
    first, second = Session(engine, shared=shared), Session(engine, shared=shared)
    first.load(document)
    read_s = first.prefilled.prefill_s
    assert read_s == 5.0
    started = time.perf_counter()
    second.load(document)
    took = time.perf_counter() - started
    assert engine.prefills == 1 and second.prefilled is first.prefilled and second.origin == "memory"
    assert 0 <= second.ready_s <= took < read_s
    assert cache_origin(second).key == "origin.memory" and first.ready_s == read_s


def test_a_failed_prefill_gives_back_the_room_it_reserved():
    """A document whose read fails after the budget reserved room for it leaves the budget as it was (mutmut: the
    reservation cancelled for no one)."""
    def fail(document, chunk):
        raise MemoryError

    budget = CacheBudget(10 * 2**20)
    session = Session(FakeEngine(on_chunk=fail), budget)
    with pytest.raises(MemoryError):
        session.load(kvqa.document_from_text("word " * 40))
    assert budget.used_bytes == 0 and session.document is None  # (used_bytes counts reservations too)


def timed(ttft_s: float, baseline_ttft_s: float | None = None) -> Turn:
    baseline = None if baseline_ttft_s is None else Timings(question_tokens=9, new_tokens=3, ttft_s=baseline_ttft_s,
                                                            answer_s=baseline_ttft_s + 0.1)
    return Turn("q", "a", Timings(question_tokens=3, new_tokens=3, ttft_s=ttft_s, answer_s=ttft_s + 0.1),
                baseline=baseline)


def test_the_speedup_is_measured_from_the_baseline_estimated_from_the_read_or_not_said():
    """Guards each branch of speedup(): a first token of 0 s (`<=` made `<`: a division by zero), the measured
    ratio (`/` made `*`) and its flag, and the "unknown" answer (0.0, False)."""
    assert speedup(timed(0.25, baseline_ttft_s=2.0), 10.0) == (8.0, True)  # measured wins over an estimate
    assert speedup(timed(0.25), 10.0) == ((10.0 + 0.25) / 0.25, False)
    assert speedup(timed(0.0), 10.0) == (0.0, False)
    assert speedup(timed(0.0, baseline_ttft_s=2.0), None) == (0.0, False)
    assert speedup(timed(0.25), None) == (0.0, False)


def test_a_rebuilt_cache_reports_progress_and_is_handed_to_on_rebuild():
    """Guards the progress callback's way from ask() to the rebuild (mutmut: `progress=None` in ask, _ask and
    _answer's prefill)."""
    engine = FakeEngine(chunks=3)
    session = Session(engine)
    session.load(kvqa.document_from_text("word " * 50))
    assert session.try_evict() and session.prefilled is None
    said, rebuilt = [], []
    session.ask(Ask("What word?", progress=said.append, on_rebuild=rebuilt.append)).answer  # noqa: B018 - runs it
    assert said == [pytest.approx(1 / 3), pytest.approx(2 / 3), 1.0]
    assert rebuilt == [session.prefilled] and engine.prefills == 2


def test_reading_another_part_reports_progress_and_hands_the_part_to_on_part():
    """Guards the progress callback's way to the part read for a question, and the part handed to on_part (mutmut:
    `progress=None` in _read_part_for's call, `on_part(None)`)."""
    engine = FakeEngine(context_tokens=60, chunks=2)
    paragraphs = [f"Paragraph {i} tells of the {word} and nothing else. " * 4 for i, word in
                  enumerate(["harbour", "lighthouse", "orchard", "quarry"])]
    session = Session(engine)
    session.load(kvqa.document_from_text("\n\n".join(paragraphs)))
    assert len(session.parts) >= 2
    first_part = session.document.part
    said, parts = [], []
    session.ask(Ask("What of the quarry?", progress=said.append, on_part=parts.append)).answer  # noqa: B018 - runs it
    assert session.document.part != first_part and "quarry" in session.document.text
    assert parts == [session.prefilled] and parts[0].document is session.document
    assert said == [0.5, 1.0]


def test_stop_ends_the_answer_and_no_baseline_is_measured_for_it(tiny_lm):
    """Guards Stop's way into the answer (mutmut: `should_stop=None` or left out in _answer) and that a stopped
    answer is not measured against a recompute (mutmut: the "stopped" check's string changed)."""
    session = session_on(tiny_lm)
    full = session.ask("Where does the ferry leave from?").answer
    assert full.timings.new_tokens > 2
    stream = session.ask(Ask("Where does the ferry leave from?", baseline=True))
    next(iter(stream))
    session.stop()
    stopped = stream.answer
    assert stopped.stop_reason == "stopped" and stopped.timings.new_tokens < full.timings.new_tokens
    assert session.turns[-1].stopped and session.turns[-1].baseline is None and session.turns[-1].baseline_same is None


def test_the_baseline_of_a_follow_up_recomputes_the_same_prompt(tiny_lm):
    """The measured baseline reads the same prompt as the cached answer, earlier turns included: its tokens are the
    cached answer's (mutmut: `history=` left out of the recompute)."""
    session = session_on(tiny_lm)
    answers = [session.ask(Ask(q, baseline=True, remember=True)).answer
               for q in ("Where does the ferry leave from?", "And when?", "When does the museum close?")]
    assert [t.follows for t in session.turns] == [0, 1, 2]
    for turn, answer in zip(session.turns, answers):  # each turn records its answer whole
        assert (turn.answer, turn.timings, turn.stop_reason) == (answer.text, answer.timings, answer.stop_reason)
        assert turn.sources == answer.sources and turn.unsupported == answer.unsupported and turn.part is None
    assert any(t.unsupported for t in session.turns) and any(t.sources for t in session.turns)
    assert all(t.baseline is not None and t.baseline_same for t in session.turns)
    alone = session_on(tiny_lm).ask("When does the museum close?").answer
    assert alone.text != session.turns[-1].answer  # the follow-up read its history: leaving it out shows


def test_the_baseline_reads_the_prompt_the_cache_was_made_with(tiny_llama3_lm, monkeypatch):
    """A cache made on another day (Llama 3's date line) is measured against a recompute of that day's prompt, not
    today's (mutmut: `prompt=None` in the baseline)."""
    import kvqa.prompt

    monkeypatch.setattr(kvqa.prompt, "today", lambda: "1 Jan 1999")
    session = session_on(tiny_llama3_lm)
    monkeypatch.setattr(kvqa.prompt, "today", lambda: "29 Nov 2026")
    cached = session.ask(Ask("When does the museum open?", baseline=True)).answer
    assert session.turns[-1].baseline_same is True
    today = kvqa.answer_without_cache(tiny_llama3_lm, session.document, "When does the museum open?", config=CONFIG)
    assert today.token_ids != cached.token_ids  # today's prompt answers otherwise: the check can tell them apart


def test_recompute_mode_answers_from_the_whole_prompt_and_records_the_turn(tiny_lm):
    """`kvqa ask --no-cache`: nothing is read at load; each answer reads the whole prompt again, equals the cached
    answer, and is recorded like one (mutmut: _answer_again, reached by no other fast or tiny test)."""
    cached = session_on(tiny_lm)
    again = session_on(tiny_lm, recompute=True)
    assert again.prefilled is None and again.document is not None
    for question in ("Where does the ferry leave from?", "When was the bridge finished?"):
        a, b = cached.ask(question).answer, again.ask(question).answer
        assert a.token_ids == b.token_ids and not b.used_cache and a.used_cache
        assert b.timings.question_tokens > a.timings.question_tokens  # it read the document with the question
    turn = again.turns[-1]
    assert turn.question == "When was the bridge finished?" and turn.answer == b.text
    assert turn.timings == b.timings and turn.stop_reason == b.stop_reason
    assert turn.sources == b.sources and turn.sources and turn.unsupported == b.unsupported
    assert turn.part is None and len(again.turns) == 2 and again.prefilled is None
    stream = again.ask("Where does the ferry leave from?")
    next(iter(stream))
    again.stop()
    assert stream.answer.stop_reason == "stopped" and again.turns[-1].stopped


def test_recompute_mode_loads_a_document_or_a_chosen_part_without_reading_it(tiny_lm):
    """Loading in recompute mode records what the questions will read: the whole document (one part, no notice), or
    the characters the user chose (pinned, said); the same document again is "already loaded" and keeps the turns
    (mutmut: load's recompute branch)."""
    document = kvqa.document_from_text(TEXT)
    session = Session(LocalEngine(CONFIG, lm=tiny_lm), recompute=True)
    assert session.load(document) is True
    assert (session.whole, session.document, session.parts, session.parts.pinned, session.notice) == (
        document, document, [(1, len(TEXT), 0)], False, None)
    session.ask("Where does the ferry leave from?").answer  # noqa: B018 - runs it
    assert session.load(document) is False and len(session.turns) == 1  # already loaded: nothing changes
    assert session.load(document, part=part_of(document, 1, 120)) is True
    assert session.whole is document and session.document.text == TEXT[:120] and session.parts == [(1, 120, 0)]
    assert session.parts.pinned and session.notice.key == "notice.chosen" and session.turns == []
    assert session.prefilled is None and session.ask("When does the museum open?").answer.text
    assert session.turns[-1].part == session.document.part and session.turns[-1].part.last == 120
