"""kvqa: read a long document once, answer every question from a copy-free rollback of its key/value cache.

The public surface: an engine built from the settings (`make_engine(Config())`) prefills documents and streams
answers; a `Session` holds one user's document, cache and turns; `ask(engine, doc, question)` is a question's one way
(its evidence found once, the engine's answer, its sources). `prefill` and kvqa.api's `stream`, `answer`... do the
same on a model you loaded yourself.
"""

from __future__ import annotations

import importlib

# Each name of the API and the module it lives in, loaded on first use (PEP 562): `import kvqa` alone loads neither
# torch nor transformers, so `kvqa ask` can check its arguments and read the document before they load.
_API = {
    "kvqa.api": ("answer", "answer_without_cache", "stream", "stream_without_cache"),
    "kvqa.config": ("DEFAULT_MODEL", "Config"),
    "kvqa.documents.reading": ("Document", "document_from_text", "load_document"),
    "kvqa.engines": ("Engine", "EngineInfo", "LocalEngine", "make_engine"),
    "kvqa.errors": ("BusyError", "DocumentError", "DocumentTooLong", "KvqaError", "ModelError", "OutOfMemory",
                    "QuestionError"),
    "kvqa.generation.generate": ("prefill",),
    "kvqa.model.loading": ("LoadedModel", "load_model"),
    "kvqa.results": ("Answer", "AnswerStream", "PrefilledDocument"),
    "kvqa.evidence.evidence": ("Evidence",),
    "kvqa.session.ask": ("ask", "ask_without_cache"),
    "kvqa.session.session": ("Ask", "Session"),
    "kvqa.timing": ("Timings",),
}
_HOME = {name: module for module, names in _API.items() for name in names}

__all__ = sorted(_HOME)


def __getattr__(name: str):
    if name not in _HOME:  # a subpackage (kvqa.engines), as the eager imports once made every one of them
        try:
            return importlib.import_module(f"{__name__}.{name}")
        except ModuleNotFoundError as e:
            if e.name != f"{__name__}.{name}":
                raise
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}") from None
    value = getattr(importlib.import_module(_HOME[name]), name)
    globals()[name] = value  # once loaded, an ordinary attribute
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
