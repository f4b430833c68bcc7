"""A process-wide memory budget for prefilled caches: when a new one would not fit, the least recently used
sessions' caches are dropped (their text is kept, and they are prefilled again when next asked)."""

from __future__ import annotations

import ctypes
import threading
from collections import OrderedDict

import torch

from .errors import DocumentTooLong


def default_budget_bytes(device: torch.device) -> int:
    """Half the memory available now: free GPU memory on CUDA, else available RAM."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * 0.5)
    import psutil

    return int(psutil.virtual_memory().available * 0.5)


def release_memory() -> None:
    """Hand memory freed by dropped caches back to the system: CUDA's cached blocks, and glibc's heap, which
    otherwise keeps freed buffers for reuse and the process's RSS high after sessions end."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to do
        pass


def budget_for(lm, limit_mb: float | None) -> "CacheBudget":
    """limit_mb if set, else half the free memory where caches live: the GPU, or the CPU (also on ZeroGPU, which
    keeps them there between calls)."""
    from . import zerogpu

    if limit_mb:
        return CacheBudget(int(limit_mb * 2**20))
    return CacheBudget(default_budget_bytes(torch.device("cpu") if zerogpu.ACTIVE else lm.device))


class CacheBudget:
    """Tracks the bytes of every live prefilled cache by owner (a session), in least-recently-used order."""

    def __init__(self, limit_bytes: int):
        self.limit_bytes = limit_bytes
        self._entries: OrderedDict[object, int] = OrderedDict()  # owner -> bytes, oldest first
        self._lock = threading.Lock()

    @property
    def used_bytes(self) -> int:
        with self._lock:
            return sum(self._entries.values())

    def admit(self, nbytes: int, owner) -> list:
        """Make room for `nbytes` for owner, evicting least recently used others; returns the evicted owners.
        Raises DocumentTooLong when nbytes alone exceeds the budget."""
        if nbytes > self.limit_bytes:
            raise DocumentTooLong(
                f"This document's cache needs {nbytes / 2**20:,.0f} MiB; the memory budget for caches is "
                f"{self.limit_bytes / 2**20:,.0f} MiB. Load a shorter document (or raise KVQA_CACHE_BUDGET_MB)."
            )
        evicted = []
        with self._lock:  # owner's own entry stays until add(): if its new prefill fails, its old cache is kept
            for other in list(self._entries):
                if sum(b for o, b in self._entries.items() if o is not owner) + nbytes <= self.limit_bytes:
                    break
                if other is owner or getattr(other, "busy", False):  # answering right now: leave it
                    continue
                del self._entries[other]
                evicted.append(other)
        for other in evicted:
            other.evict()
        if evicted:
            release_memory()
        return evicted

    def add(self, nbytes: int, owner) -> None:
        with self._lock:
            self._entries[owner] = nbytes
            self._entries.move_to_end(owner)

    def touch(self, owner) -> bool:
        """Mark owner's cache as just used; False if it is not held (it was evicted)."""
        with self._lock:
            if owner not in self._entries:
                return False
            self._entries.move_to_end(owner)
            return True

    def release(self, owner) -> None:
        with self._lock:
            self._entries.pop(owner, None)
