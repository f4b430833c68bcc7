"""kvqa: read a long document once, answer every question from a copy-free rollback of its key/value cache.

The public surface: an engine built from the settings (`make_engine(Config())`) prefills documents and streams
answers; a `Session` holds one user's document, cache and turns; `ask(engine, doc, question)` is a question's one way
(its evidence found once, the engine's answer, its sources). `prefill`, `stream`, `answer`... do the same on a model
you loaded yourself.
"""

from kvqa.config import DEFAULT_MODEL, Config
from kvqa.documents.reading import Document, document_from_text, load_document
from kvqa.engines import Engine, EngineInfo, LocalEngine, make_engine
from kvqa.errors import BusyError, DocumentError, DocumentTooLong, KvqaError, ModelError, OutOfMemory, QuestionError
from kvqa.generation.generate import prefill
from kvqa.model.loading import LoadedModel, load_model
from kvqa.results import Answer, AnswerStream, PrefilledDocument
from kvqa.session.ask import (
    Evidence,
    answer,
    answer_without_cache,
    ask,
    ask_without_cache,
    stream,
    stream_without_cache,
)
from kvqa.session.session import Ask, Session
from kvqa.timing import Timings

__all__ = [
    "Answer", "AnswerStream", "Ask", "BusyError", "Config", "DEFAULT_MODEL", "Document", "DocumentError",
    "DocumentTooLong", "Engine", "EngineInfo", "Evidence", "KvqaError", "LoadedModel", "LocalEngine", "ModelError",
    "OutOfMemory",
    "PrefilledDocument", "QuestionError", "Session", "Timings", "answer", "answer_without_cache", "ask",
    "ask_without_cache", "document_from_text", "load_document", "load_model", "make_engine", "prefill", "stream",
    "stream_without_cache",
]
