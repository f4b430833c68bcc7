"""A process-wide memory budget for prefilled caches: when a new one would not fit, the least recently used
sessions' caches are dropped (their text is kept, and they are prefilled again when next asked).

Owners are sessions. The budget only asks an owner to give its cache up through `owner.try_evict()`, which takes
the owner's own lock without waiting and declines while the owner is working: a cache is never dropped under an
answer. A prefill reserves its bytes in `admit` until `add` (the cache exists) or `cancel` (the prefill failed),
so two prefills at once cannot both be admitted into the same room. One client (an address) holds at most
`per_client` caches: its own oldest cache goes first, so a client that opens many sessions evicts only itself.
Sessions that share one cache (kvqa.cache.shared) are added with the same `cache` identity: its bytes count once, and
they stop counting only when the last session holding it has left or given it up.
"""

from __future__ import annotations

import threading
from collections import OrderedDict

from kvqa.errors import BusyError, DocumentTooLong
from kvqa.memory import default_budget_bytes, release_memory


class CacheBudget:
    """Tracks the bytes of every live prefilled cache by owner, in least-recently-used order, plus reservations."""

    def __init__(self, limit_bytes: int, *, per_client: int = 3):
        self.limit_bytes = limit_bytes
        self.per_client = per_client
        self._held: OrderedDict[object, tuple[int, object]] = OrderedDict()  # owner -> (bytes, which cache), oldest
        #                                                                       first; shared caches count once
        self._reserved: dict[object, int] = {}  # owner -> bytes admitted for a prefill in progress
        self._lock = threading.Lock()

    @property
    def used_bytes(self) -> int:
        """Bytes of live caches plus admitted prefills."""
        with self._lock:
            return self._distinct_bytes(self._held.values()) + sum(self._reserved.values())

    def admit(self, nbytes: int, owner) -> list:
        """Reserve `nbytes` for owner's next cache, evicting least recently used idle caches (the same client's
        first) until it fits; returns the evicted owners. Owner's current cache, if any, counts as replaced (it is
        kept until `add`, so a failed prefill leaves it). Raises DocumentTooLong when nbytes alone exceeds the
        budget, BusyError when the room is held by answers in progress."""
        if nbytes > self.limit_bytes:
            raise DocumentTooLong("budget.too_big", need_mb=nbytes / 2**20, limit_mb=self.limit_bytes / 2**20)
        evicted = []
        with self._lock:
            client = getattr(owner, "client", None)
            mine = [o for o in self._held if o is not owner and client is not None
                    and getattr(o, "client", None) == client]
            for other in mine[: max(0, len(mine) - self.per_client + 1)]:  # over its quota: its own oldest go
                if other.try_evict():
                    del self._held[other]
                    evicted.append(other)
            for other in list(self._held):
                if self._others_bytes(owner) + nbytes <= self.limit_bytes:
                    break
                if other is not owner and other.try_evict():
                    del self._held[other]
                    evicted.append(other)
            if self._others_bytes(owner) + nbytes > self.limit_bytes:
                raise BusyError("busy.memory")
            self._reserved[owner] = nbytes
        if evicted:
            release_memory()
        return evicted

    def add(self, nbytes: int, owner, *, cache: object = None) -> None:
        """Owner's cache now exists: it replaces owner's reservation and its previous cache. `cache` names the cache
        when owners share one (its bytes then count once); by default the cache is owner's own."""
        with self._lock:
            self._reserved.pop(owner, None)
            self._held[owner] = (nbytes, owner if cache is None else cache)
            self._held.move_to_end(owner)

    def cancel(self, owner) -> None:
        """Owner's prefill failed: free its reservation (its previous cache, if any, stays counted)."""
        with self._lock:
            self._reserved.pop(owner, None)

    def touch(self, owner) -> bool:
        """Mark owner's cache as just used; False if it is not held (it was evicted)."""
        with self._lock:
            if owner not in self._held:
                return False
            self._held.move_to_end(owner)
            return True

    def release(self, owner) -> None:
        """Owner is gone: forget its cache and any reservation."""
        with self._lock:
            self._held.pop(owner, None)
            self._reserved.pop(owner, None)

    def _others_bytes(self, owner) -> int:
        return (self._distinct_bytes(held for o, held in self._held.items() if o is not owner)
                + sum(b for o, b in self._reserved.items() if o is not owner))

    @staticmethod
    def _distinct_bytes(held) -> int:
        """Bytes of the caches held, each cache once however many owners share it."""
        return sum(dict((cache, nbytes) for nbytes, cache in held).values())


def budget_for(engine, config) -> CacheBudget:
    """config.serving.cache_budget_mb if set, else half the free memory where the engine keeps caches (the GPU, or the
    CPU: also on ZeroGPU, which keeps them there between calls); config.serving.caches_per_client per client."""
    import torch

    if config.serving.cache_budget_mb:
        return CacheBudget(int(config.serving.cache_budget_mb * 2**20), per_client=config.serving.caches_per_client)
    limit = default_budget_bytes(torch.device(engine.info.cache_device))
    return CacheBudget(limit, per_client=config.serving.caches_per_client)
