"""A question's one way through kvqa, above the engines: its evidence found once, the engine's answer, its sources.

Evidence.of() scores the question against the whole document's passages once (kvqa.evidence.sources.rank, BM25).
Everything
else reads that one Ranking: the part of a long document the question is routed to (kvqa.evidence.routing.route), the
passages
handed to the engine for the question's turn to quote (a Question), and, once the answer is in, its sources and what
it names that the document lacks (kvqa.evidence.support). Engines only compute: they get the Question and return the
answer's
events (text pieces, then the Answer); ask() gives the Answer its sources. Session, the app, the API and the CLI all
answer through ask(); kvqa.answer() and friends do too, on a model you loaded yourself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, fields, replace

from kvqa.config import PLAIN, Config
from kvqa.documents.parts import span_of
from kvqa.documents.reading import Document
from kvqa.engines import Engine, LocalEngine
from kvqa.evidence.routing import route
from kvqa.evidence.short import mark_short, short_answer
from kvqa.evidence.sources import Ranking, rank
from kvqa.evidence.support import unquoted, unsupported
from kvqa.model.loading import LoadedModel
from kvqa.prompt import Prompt
from kvqa.results import Answer, AnswerStream, PrefilledDocument, QuestionTurn, close_events


@dataclass(frozen=True)
class Evidence:
    """What the document says about one question, found once per answer: the question's BM25 scores over the whole
    document's passages (one scoring), from which its part, its quotes and its answer's sources are all read."""

    document: Document  # the whole document, as loaded
    ranking: Ranking

    @classmethod
    def of(cls, document: Document, question: str) -> Evidence:
        return cls(document, rank(document.text, question))

    def route(self, parts: Sequence[tuple[int, int, int]], *, current: int = 0,
              among=None) -> tuple[int, int | None]:
        """The part the question goes to, and another that matches it too (kvqa.evidence.routing.route)."""
        return route(self.ranking, self.document, parts, current=current, among=among)

    def within(self, read: Document) -> Ranking:
        """The ranking over what was read: the whole document, or the part of it that is (offsets into its text)."""
        if read.text == self.document.text:
            return self.ranking
        return self.ranking.within(*span_of(self.document, read), read.text)


def ask(engine: Engine, doc: PrefilledDocument, question: str, *, history: Sequence[tuple[str, str]] = (),
        evidence: Evidence | None = None, should_stop: Callable[[], bool] | None = None,
        max_new_tokens: int | None = None) -> AnswerStream:
    """Answer from the prefilled document's cache, streaming (the cache is left as it was). history: earlier
    (question, answer) turns the question follows up on. evidence: the question's, when the caller found it already
    (a long document's routing); else found here, on what was read."""
    read = doc.document
    ranking = (evidence or Evidence.of(read, question)).within(read)
    asked = _question(engine, ranking, question, history, max_new_tokens)
    return AnswerStream(_with_sources(engine.answer_turn(doc, asked, should_stop=should_stop), ranking, read,
                                      _quoted(engine, asked)))


def ask_without_cache(engine: Engine, document: Document, question: str, *, history: Sequence[tuple[str, str]] = (),
                      evidence: Evidence | None = None, prompt: Prompt | None = None,
                      should_stop: Callable[[], bool] | None = None,
                      max_new_tokens: int | None = None) -> AnswerStream:
    """ask(), reading the whole prompt again (the measured baseline), with the same evidence, model and settings."""
    ranking = (evidence or Evidence.of(document, question)).within(document)
    asked = _question(engine, ranking, question, history, max_new_tokens)
    pieces = engine.answer_turn_without_cache(document, asked, prompt=prompt, should_stop=should_stop)
    return AnswerStream(_with_sources(pieces, ranking, document, _quoted(engine, asked)))


def _question(engine: Engine, ranking: Ranking, question: str, history, max_new_tokens) -> QuestionTurn:
    return QuestionTurn(question, tuple(history), tuple(ranking.candidates(engine.options.passages)), max_new_tokens)


def _quoted(engine: Engine, asked: QuestionTurn) -> Callable[[Sequence[int] | None], list[str]]:
    """What the question's turn quoted, given the model's order of the passages (None: BM25's), as the engine quotes."""
    options = engine.options
    return lambda order: asked.quotes(options.quote_passages, order, chars=options.quote_chars)


def _with_sources(events: AnswerStream, ranking: Ranking, document: Document,
                  quoted: Callable[[Sequence[int] | None], list[str]]) -> Iterator[str | Answer]:
    """The answer's events, its Answer given the passages it relies on (in the model's order when it reranked them),
    its shortest phrase (kvqa.evidence.short, marked in them), what it names that the document lacks, and the figures
    it took from outside the passage its turn quoted."""
    try:
        for event in events.events():
            if isinstance(event, Answer):
                started = time.perf_counter()
                part = document.part
                found = ranking.sources(event.text, pages=document.pages is not None, order=event.order,
                                        first_page=part.pages[0] if part is not None and part.pages else 1)
                short = short_answer(event.text, ranking.question, found)
                event = replace(event, sources=mark_short(found, short), short=short,
                                unsupported=unsupported(event.text, document.text, ranking.question),
                                unquoted=unquoted(event.text, quoted(event.order), document.text, ranking.question),
                                timings=replace(event.timings, sources_s=time.perf_counter() - started))
            yield event
    finally:
        close_events(events)  # the answer's own clean-up (the rollback) runs now, not when collected


# ---- on a model you loaded yourself -----------------------------------------------------------------------------

def _engine(lm: LoadedModel, config: Config, settings: dict, *, same_schedule: bool = False) -> LocalEngine:
    """A local engine on lm: plain decoding (kvqa.config.PLAIN) unless `settings` (Decoding's fields) say more."""
    plain = {f.name: getattr(PLAIN, f.name) for f in fields(PLAIN)}
    return LocalEngine(config.replaced(**plain | settings), lm=lm, same_schedule=same_schedule)


def stream(lm: LoadedModel, doc: PrefilledDocument, question: str, *, history: Sequence[tuple[str, str]] = (),
           should_stop: Callable[[], bool] | None = None, max_new_tokens: int | None = None,
           **settings) -> AnswerStream:
    """ask() on your model: greedy and plain by default; settings: kvqa.config.Decoding's fields (draft_tokens=6,
    quote_passages=1...)."""
    return ask(_engine(lm, Config(), settings), doc, question, history=history, should_stop=should_stop,
               max_new_tokens=max_new_tokens)


def stream_without_cache(lm: LoadedModel, document: Document, question: str, *, config: Config = Config(),
                         prompt: Prompt | None = None, history: Sequence[tuple[str, str]] = (),
                         should_stop: Callable[[], bool] | None = None, max_new_tokens: int | None = None,
                         same_schedule: bool = False, **settings) -> AnswerStream:
    """ask_without_cache() on your model (config: its chunks and reserve); same_schedule: see
    kvqa.generation.generate.answer_from_scratch."""
    engine = _engine(lm, config, settings, same_schedule=same_schedule)
    return ask_without_cache(engine, document, question, history=history, prompt=prompt, should_stop=should_stop,
                             max_new_tokens=max_new_tokens)


def answer(lm: LoadedModel, doc: PrefilledDocument, question: str, **options) -> Answer:
    """The whole answer at once (see stream)."""
    return stream(lm, doc, question, **options).answer


def answer_without_cache(lm: LoadedModel, document: Document, question: str, **options) -> Answer:
    """The whole baseline answer at once (see stream_without_cache)."""
    return stream_without_cache(lm, document, question, **options).answer
