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
from kvqa.evidence.routing import Evidence
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
    read."""
    read = doc.document
    evidence = evidence or Evidence.of(read, question)
    asked = _question(engine, evidence, read, question, history, max_new_tokens)
    return AnswerStream(_with_sources(engine.answer_turn(doc, asked, should_stop=should_stop), evidence, read,
                                      _quoted(engine, asked)))


def ask_without_cache(engine: Engine, document: Document, question: str, *, history: Sequence[tuple[str, str]] = (),
                      evidence: Evidence | None = None, prompt: Prompt | None = None,
                      should_stop: Callable[[], bool] | None = None,
                      max_new_tokens: int | None = None) -> AnswerStream:
    """ask(), reading the whole prompt again (the measured baseline), with the same evidence, model and settings."""
    evidence = evidence or Evidence.of(document, question)
    asked = _question(engine, evidence, document, question, history, max_new_tokens)
    pieces = engine.answer_turn_without_cache(document, asked, prompt=prompt, should_stop=should_stop)
    return AnswerStream(_with_sources(pieces, evidence, document, _quoted(engine, asked)))


def _question(engine: Engine, evidence: Evidence, read: Document, question: str, history,
              max_new_tokens) -> QuestionTurn:
    """The turn the engine appends: the question's best passages (of every part, when the document is read in parts)
    and, for a part, the passages elsewhere that its cache cannot see (Evidence.elsewhere)."""
    ranking, _ = evidence.read_from(read)
    best = tuple(ranking.candidates(engine.options.passages))
    elsewhere = evidence.elsewhere(read, chosen={i for i, _, _ in best}) if engine.options.quote_passages else ()
    return QuestionTurn(question, tuple(history), best, max_new_tokens, elsewhere=elsewhere)


def _quoted(engine: Engine, asked: QuestionTurn) -> Callable[[Sequence[int] | None], list[str]]:
    """What the question's turn quoted, given the model's order of the passages (None: BM25's), as the engine quotes."""
    options = engine.options
    return lambda order: asked.quotes(options.quote_passages, order, chars=options.quote_chars)


def _with_sources(events: AnswerStream, evidence: Evidence, read: Document,
                  quoted: Callable[[Sequence[int] | None], list[str]]) -> Iterator[str | Answer]:
    """The answer's events, its Answer given the passages it relies on (in the model's order when it reranked them;
    of every part, each naming its part, when the document is read in parts), its shortest phrase
    (kvqa.evidence.short, marked in them), what it names that the document lacks, and the figures it took from
    outside the passages its turn quoted."""
    ranking, document = evidence.read_from(read)
    try:
        for event in events.events():
            if isinstance(event, Answer):
                started = time.perf_counter()
                part = document.part
                found = ranking.sources(event.text, pages=document.pages is not None, order=event.order,
                                        first_page=part.pages[0] if part is not None and part.pages else 1)
                if evidence.parts:
                    found = [replace(s, part=evidence.part_at(s.start, read)) for s in found]
                short = short_answer(event.text, ranking.question, found)
                quotes = quoted(event.order)
                event = replace(event, sources=mark_short(found, short), short=short, quoted=tuple(quotes),
                                unsupported=unsupported(event.text, document.text, ranking.question),
                                unquoted=unquoted(event.text, quotes, document.text, ranking.question),
                                timings=replace(event.timings, sources_s=time.perf_counter() - started))
            yield event
    finally:
        close_events(events)  # the answer's own clean-up (the rollback) runs now, not when collected
