"""kvqa: read a long document once, answer every question from a copy-free rollback of its key/value cache."""

from .answer import Answer, answer, answer_without_cache, stream, stream_without_cache
from .config import DEFAULT_MODEL, Config
from .documents import Document, document_from_text, load_document
from .errors import BusyError, DocumentError, DocumentTooLong, KvqaError, ModelError, OutOfMemory, QuestionError
from .model import LoadedModel, load_model
from .prefill import PrefilledDocument, prefill
from .timing import Timings

__all__ = [
    "Answer", "BusyError", "Config", "DEFAULT_MODEL", "Document", "DocumentError", "DocumentTooLong", "KvqaError",
    "LoadedModel", "ModelError", "OutOfMemory", "PrefilledDocument", "QuestionError", "Timings", "answer",
    "answer_without_cache", "document_from_text", "load_document", "load_model", "prefill", "stream",
    "stream_without_cache",
]
