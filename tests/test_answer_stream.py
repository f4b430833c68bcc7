"""An answer's one way home: text pieces, then the Answer, last; the producer's clean-up runs before anyone reads it."""

from __future__ import annotations

import pytest

from kvqa.results import Answer, AnswerStream
from kvqa.timing import Timings


def producer(log: list[str], words=("one ", "two ")):
    """What an engine's answer looks like to the stream: pieces, then the Answer; its `finally` is the rollback."""
    try:
        for word in words:
            log.append(f"yield {word.strip()}")
            yield word
        log.append("answer")
        yield Answer(question="q", text="".join(words), token_ids=(), stop_reason="eos", used_cache=True,
                     timings=Timings(question_tokens=1, new_tokens=len(words), ttft_s=0.0, answer_s=0.0))
        log.append("after the answer")  # never runs: the stream closes its producer when the Answer arrives
    finally:
        log.append("rolled back")


def test_the_answer_arrives_after_its_pieces_and_after_the_clean_up():
    log: list[str] = []
    stream = AnswerStream(producer(log))
    assert list(stream) == ["one ", "two "]
    assert log == ["yield one", "yield two", "answer", "rolled back"]
    assert stream.answer.text == "one two "


def test_reading_the_answer_alone_finishes_the_stream_first():
    log: list[str] = []
    assert AnswerStream(producer(log)).answer.stop_reason == "eos"
    assert log[-1] == "rolled back" and "after the answer" not in log


def test_closing_early_cleans_up_and_leaves_no_answer():
    log: list[str] = []
    stream = AnswerStream(producer(log))
    assert next(stream) == "one "
    stream.close()
    assert log == ["yield one", "rolled back"]
    with pytest.raises(RuntimeError, match="closed before it finished"):
        stream.answer


def test_events_hand_the_answer_on_last_so_a_layer_above_can_wrap_it():
    log: list[str] = []
    events = list(AnswerStream(producer(log)).events())
    assert events[:2] == ["one ", "two "] and isinstance(events[2], Answer) and len(events) == 3
    wrapped = AnswerStream(iter(events))  # a session wraps an engine's stream the same way
    assert list(wrapped) == ["one ", "two "] and wrapped.answer is events[2]
