"""The local engine's prefill with the disk tier (kvqa.store) around it: restore the document's cache from its file
when one is there and checks out, else prefill it and have the file written in the background (kvqa.restore)."""

from __future__ import annotations

from ..config import Config
from ..documents import Document
from ..model import LoadedModel
from ..restore import prefill_or_restore
from ..results import PrefilledDocument
from ..store import KVStore, weights_fingerprint
from .local import LocalEngine


class StoredLocalEngine(LocalEngine):
    """The local engine with the disk tier: prefill() restores a document's cache from `store` when it can, and
    stores what it prefills."""

    def __init__(self, config: Config, lm: LoadedModel | None = None, *, store: KVStore):
        super().__init__(config, lm=lm)
        self.store = store
        self._weights: str | None = None

    @property
    def weights(self) -> str:
        """The loaded weights' fingerprint (part of every cache key), computed once."""
        if self._weights is None:
            self._weights = weights_fingerprint(self.lm.model)
        return self._weights

    def prefill(self, document: Document, *, progress=None, admit=None) -> PrefilledDocument:
        return prefill_or_restore(self.lm, document, self.store, weights=self.weights, config=self.config,
                                  progress=progress, admit=admit)
