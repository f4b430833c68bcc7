"""Where a session's cache comes from: another session's, when one holds the same document (shared), else read now
or restored from the store, and counted in the memory budget either way."""

from __future__ import annotations

import hashlib
from collections.abc import Callable

from kvqa.cache.budget import CacheBudget
from kvqa.cache.shared import SharedCaches
from kvqa.documents.reading import Document
from kvqa.engines import Engine
from kvqa.results import PrefilledDocument


def fingerprint(engine: Engine, document: Document) -> str:
    """Same text with the same model means the same cache: no second prefill."""
    return hashlib.sha256(f"{engine.info.model}\0{document.text}".encode()).hexdigest()


def cache_for(engine: Engine, document: Document, *, owner, budget: CacheBudget | None = None,
              shared: SharedCaches | None = None,
              progress: Callable[[float], None] | None = None) -> tuple[PrefilledDocument, bool]:
    """The document's cache and whether another session's was shared; `owner` (a session) is who the budget counts
    it for."""
    if shared is None:
        return _read(engine, document, owner, budget, None, progress), False
    key = fingerprint(engine, document)
    prefilled, was_shared = shared.get_or_load(key, lambda: _read(engine, document, owner, budget, key, progress))
    if was_shared and budget is not None:
        budget.add(prefilled.cache_bytes, owner, cache=key)
    return prefilled, was_shared


def _read(engine: Engine, document: Document, owner, budget: CacheBudget | None, key: str | None,
          progress: Callable[[float], None] | None) -> PrefilledDocument:
    """Read (or restore) the cache, admitted into the budget as it grows; the budget forgets it when that fails."""
    admit = (lambda nbytes: budget.admit(nbytes, owner)) if budget is not None else None
    try:
        prefilled = engine.prefill(document, progress=progress, admit=admit)
    except BaseException:
        if budget is not None:
            budget.cancel(owner)
        raise
    if budget is not None:
        budget.add(prefilled.cache_bytes, owner, cache=key)
    return prefilled
