"""Prefilled documents shared by the sessions of one process: the same document with the same model is read once,
and every session that loads it holds the same PrefilledDocument (one cache in memory).

The registry holds the documents weakly: a cache lives as long as one session (or a running answer) holds it, and
the memory budget, which counts a shared cache once, decides when sessions give it up. Loading is single-flight:
sessions that load a document while another session is reading it wait for that prefill instead of starting their
own. Questions from the sessions that share a cache take turns on it (PrefilledDocument.turn, see Session.ask): each
answer writes its question into the cache's reserve and rolls it back, so two at once would corrupt each other.
"""

from __future__ import annotations

import threading
import weakref
from collections.abc import Callable

from kvqa.results import PrefilledDocument


class SharedCaches:
    """Live prefilled documents by key (kvqa.session.session.fingerprint: the model and the document's text)."""

    def __init__(self):
        self._docs: weakref.WeakValueDictionary[str, PrefilledDocument] = weakref.WeakValueDictionary()
        self._loading: dict[str, threading.Lock] = {}  # key -> held while one session prefills it
        self._lock = threading.Lock()

    def get_or_load(self, key: str, load: Callable[[], PrefilledDocument]) -> tuple[PrefilledDocument, bool]:
        """(document, shared): the live document under key (shared=True), else what load() returns, registered for
        the next sessions. While one caller loads a key, other callers of that key wait for it."""
        with self._lock:
            doc = self._docs.get(key)
            if doc is not None:
                return doc, True
            loading = self._loading.setdefault(key, threading.Lock())
        with loading:
            with self._lock:
                doc = self._docs.get(key)
            if doc is not None:  # another session read it while this one waited
                return doc, True
            try:
                doc = load()
            finally:
                with self._lock:
                    if self._loading.get(key) is loading:
                        del self._loading[key]
            with self._lock:
                self._docs[key] = doc
            return doc, False

    def __len__(self) -> int:
        with self._lock:
            return len(self._docs)
