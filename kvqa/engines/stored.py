"""The local engine's prefill with the disk tier (kvqa.cache.store) around it: restore the document's cache from its
file
when one is there and checks out, else prefill it and have the file written in the background (kvqa.cache.restore)."""

from __future__ import annotations

from dataclasses import replace

from kvqa.cache.restore import prefill_or_restore
from kvqa.cache.store import KVStore, weights_fingerprint
from kvqa.documents.reading import Document
from kvqa.model.loading import LoadedModel

from ..config import Config
from ..results import PrefilledDocument
from .base import EngineInfo
from .local import LocalEngine


class StoredLocalEngine(LocalEngine):
    """The local engine with the disk tier: prefill() restores a document's cache from `store` when it can, and
    stores what it prefills."""

    def __init__(self, config: Config, lm: LoadedModel | None = None, *, store: KVStore, choose: bool = True):
        super().__init__(config, lm=lm)
        self.store = store
        self.choose = choose  # False: always restore a valid file (the store bench times restores)
        self._weights: str | None = None
        self.read_rate: float | None = None  # tokens/s of the last read (prefill) here
        self.restore_rate: float | None = None  # file bytes/s of the last restore here

    @property
    def info(self) -> EngineInfo:
        return replace(super().info, keeps_caches=True)

    @property
    def weights(self) -> str:
        """The loaded weights' fingerprint (part of every cache key), computed once."""
        if self._weights is None:
            self._weights = weights_fingerprint(self.lm.model)
        return self._weights

    def prefill(self, document: Document, *, progress=None, admit=None) -> PrefilledDocument:
        """Restore the document's cache or read it, whichever this machine has done faster for its size (the
        rates of the last read and the last restore; restore until both are known), and learn from what it did."""
        doc = prefill_or_restore(self.lm, document, self.store, weights=self.weights, config=self.config,
                                 progress=progress, admit=admit,
                                 restore_if=self.restore_is_faster if self.choose else None)
        if doc.prefill_s > 0:
            if doc.origin == "disk":
                self.restore_rate = _size_of(doc) / doc.prefill_s
            else:
                self.read_rate = doc.tokens / doc.prefill_s
        return doc

    def restore_is_faster(self, tokens: int, file_bytes: int) -> bool:
        """Whether restoring a file of `file_bytes` beats reading `tokens` again, at the rates measured here."""
        if self.read_rate is None or self.restore_rate is None:
            return True
        return file_bytes / self.restore_rate <= tokens / self.read_rate


def _size_of(doc: PrefilledDocument) -> int:
    """What a restored cache's file holds: its keys and values (the stored part, without the reserve) and ids."""
    return doc.cache_bytes * doc.tokens // max(doc.cache.capacity, 1) + 8 * doc.tokens
