"""A question's one way through kvqa, above the engines: its evidence, the engine's answer, its sources.

The question's Evidence (kvqa.evidence.routing: BM25 over the whole document, scored once) gives the passages its
turn quotes (a QuestionTurn, what an engine receives) and, once the answer is in, its sources and what it names that
the document lacks (kvqa.evidence.support). Engines only compute: they get the QuestionTurn and return the answer's
events (text pieces, then the Answer); ask() gives the Answer its sources. Session, the app, the API and the CLI all
answer through ask(); kvqa.api's functions do too, on a model you loaded yourself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import replace

from kvqa.documents.reading import Document
from kvqa.engines import Engine
from kvqa.evidence.evidence import Evidence
from kvqa.evidence.short import mark_short, short_answer
from kvqa.evidence.support import unquoted, unsupported
from kvqa.prompt import Prompt
from kvqa.results import Answer, AnswerStream, PrefilledDocument, QuestionTurn, close_events


def ask(engine: Engine, doc: PrefilledDocument, question: str, *, history: Sequence[tuple[str, str]] = (),
        evidence: Evidence | None = None, should_stop: Callable[[], bool] | None = None,
        max_new_tokens: int | None = None) -> AnswerStream:
    """Answer from the prefilled document's cache, streaming (the cache is left as it was). history: earlier
    (question, answer) turns the question follows up on. evidence: the question's, when the caller found it already
    (a long document's routing: its quotes and sources then come from every part); else found here, on what was
    read. Nothing runs until the stream is iterated."""
    answering = _answered(engine, evidence or Evidence.of(doc.document, question), doc.document, question, history,
                          max_new_tokens, lambda turn: engine.answer_turn(doc, turn, should_stop=should_stop))
    return AnswerStream(answering)


def ask_without_cache(engine: Engine, document: Document, question: str, *, history: Sequence[tuple[str, str]] = (),
                      evidence: Evidence | None = None, prompt: Prompt | None = None,
                      should_stop: Callable[[], bool] | None = None,
                      max_new_tokens: int | None = None) -> AnswerStream:
    """ask(), reading the whole prompt again (the measured baseline), with the same evidence, model and settings."""
    answering = _answered(engine, evidence or Evidence.of(document, question), document, question, history,
                          max_new_tokens, lambda turn: engine.answer_turn_without_cache(document, turn, prompt=prompt,
                                                                                        should_stop=should_stop))
    return AnswerStream(answering)


def _answered(engine: Engine, evidence: Evidence, read: Document, question: str, history, max_new_tokens,
              answer: Callable[[QuestionTurn], AnswerStream]) -> Iterator[str | Answer]:
    """The question's turn (its best passages, of every part when the document is read in parts, and for a part the
    passages elsewhere that its cache cannot see: Evidence.turn), the engine's answer to it (answer(turn)) streamed,
    and its Answer given the passages it relies on (Evidence.sources: in the model's order when it reranked them),
    its shortest phrase (kvqa.evidence.short, marked in them), what it names that the document lacks, and the
    figures it took from outside the passages its turn quoted."""
    options, evidence = engine.options, evidence.on(read)
    best, elsewhere = evidence.turn(options.passages, elsewhere=options.quote_passages > 0)
    turn = QuestionTurn(question, tuple(history), best, max_new_tokens, elsewhere=elsewhere)
    events = answer(turn)
    try:
        for event in events.events():
            if isinstance(event, Answer):
                started = time.perf_counter()
                found, ranking, document = evidence.sources(event.text, event.order)
                short = short_answer(event.text, ranking.question, found)
                quotes = turn.quotes(options.quote_passages, event.order, chars=options.quote_chars)
                event = replace(event, sources=mark_short(found, short), short=short, quoted=tuple(quotes),
                                unsupported=unsupported(event.text, document.text, ranking.question),
                                unquoted=unquoted(event.text, quotes, document.text, ranking.question),
                                timings=replace(event.timings, sources_s=time.perf_counter() - started))
            yield event
    finally:
        close_events(events)  # the answer's own clean-up (the rollback) runs now, not when collected
