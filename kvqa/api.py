"""The Python API on a model you loaded yourself (`kvqa.load_model`, `kvqa.prefill`): a question's answer streamed
(`stream`) or whole (`answer`), from the document's cache or, to compare, reading the whole prompt again
(`stream_without_cache`, `answer_without_cache`). Each goes the app's one way (kvqa.session.ask.ask): the question's
evidence, the engine's answer, its sources. `import kvqa` hands these names on (kvqa/__init__.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import fields

from kvqa.config import PLAIN, Config
from kvqa.documents.reading import Document
from kvqa.engines import LocalEngine
from kvqa.model.loading import LoadedModel
from kvqa.prompt import Prompt
from kvqa.results import Answer, AnswerStream, PrefilledDocument
from kvqa.session.ask import ask, ask_without_cache


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
