"""kvqa: read a long document once, answer every question from a copy-free rollback of its key/value cache.

The public surface: an engine built from the settings (`make_engine(Config())`) prefills documents and streams
answers; a `Session` holds one user's document, cache and turns. kvqa.generate's functions (`prefill`, `stream`,
`answer`...), which the engines call, also work on a model you loaded yourself.
"""

from .config import DEFAULT_MODEL, Config
from .documents import Document, document_from_text, load_document
from .engines import Engine, EngineInfo, LocalEngine, make_engine
from .errors import BusyError, DocumentError, DocumentTooLong, KvqaError, ModelError, OutOfMemory, QuestionError
from .generate import answer, answer_without_cache, prefill, stream, stream_without_cache
from .model import LoadedModel, load_model
from .results import Answer, AnswerStream, PrefilledDocument
from .session import Session
from .timing import Timings

__all__ = [
    "Answer", "AnswerStream", "BusyError", "Config", "DEFAULT_MODEL", "Document", "DocumentError", "DocumentTooLong",
    "Engine", "EngineInfo", "KvqaError", "LoadedModel", "LocalEngine", "ModelError", "OutOfMemory",
    "PrefilledDocument", "QuestionError", "Session", "Timings", "answer", "answer_without_cache",
    "document_from_text", "load_document", "load_model", "make_engine", "prefill", "stream", "stream_without_cache",
]
