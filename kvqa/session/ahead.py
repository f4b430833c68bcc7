"""A session's one lock, and reading a long document's other parts ahead in the background.

A session does one thing at a time (SessionLock.action: a load or a question). Reading ahead (read_ahead) takes the
same lock only while no load or question runs in any session of this process (FOREGROUND), and gives the model up at
its next chunk when one comes: the part being read is dropped (never used half read) and read again after them.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from kvqa.cache.budget import CacheBudget
from kvqa.documents.reading import Document
from kvqa.engines import Engine
from kvqa.errors import BusyError
from kvqa.memory import release_memory
from kvqa.messages import Message
from kvqa.session.parts import Parts, prefill_part

YIELD_WAIT_S = 60.0  # how long a question waits for a part being read ahead to give the model up (one chunk)


class _Foreground:
    """Loads and questions running in this process, in any session: reading ahead waits while any runs."""

    def __init__(self):
        self.count = 0
        self.lock = threading.Lock()

    def __bool__(self) -> bool:
        return self.count > 0

    def __enter__(self) -> None:
        with self.lock:
            self.count += 1

    def __exit__(self, *exc) -> None:
        with self.lock:
            self.count -= 1


FOREGROUND = _Foreground()


class _GiveWay(Exception):
    """A question, a new document or the session's end wants the model: the part being read ahead is dropped."""


class _NoRoom(Exception):
    """The memory budget has no room for a part read ahead without evicting another cache."""


class _Reader:
    """The memory budget's owner of a part being read ahead: it holds the cache only while reading it."""

    def __init__(self, client: str | None):
        self.client = client

    def try_evict(self) -> bool:
        return False


class SessionLock:
    """One action at a time per session: a second is refused, except that reading ahead gives way to a load or a
    question (which then waits up to YIELD_WAIT_S for it). While any action runs, no session reads ahead."""

    def __init__(self):
        self._busy = threading.Lock()
        self.wanted = threading.Event()  # a load or a question waits for the part being read ahead
        self._ahead = False  # reading ahead holds _busy

    @property
    def locked(self) -> bool:
        return self._busy.locked()

    @property
    def give_way(self) -> bool:
        """Whether reading ahead should give the model up: an action waits here, or runs in any session."""
        return self.wanted.is_set() or bool(FOREGROUND)

    @contextmanager
    def action(self) -> Iterator[None]:
        """A load or a question: refused (BusyError) while another runs; waits for a part being read ahead."""
        with FOREGROUND:
            if not self._busy.acquire(blocking=False):
                if not self._ahead:
                    raise BusyError("busy.session")
                self.wanted.set()
                try:
                    if not self._busy.acquire(timeout=YIELD_WAIT_S):
                        raise BusyError("busy.session")
                finally:
                    self.wanted.clear()
            try:
                yield
            finally:
                self._busy.release()

    @contextmanager
    def idle(self) -> Iterator[bool]:
        """Held while nothing runs (True), for a moment's change such as eviction; False (not held) when busy."""
        if not self._busy.acquire(blocking=False):
            yield False
            return
        try:
            yield True
        finally:
            self._busy.release()

    @contextmanager
    def ahead(self) -> Iterator[bool]:
        """Held for reading one part ahead (True) when no action wants the model; False (not held) otherwise."""
        if self.give_way or not self._busy.acquire(blocking=False):
            yield False
            return
        self._ahead = True
        try:
            yield True
        finally:
            self._ahead = False
            self._busy.release()


def read_ahead(engine: Engine, budget: CacheBudget | None, lock: SessionLock, source: Document, parts: Parts, *,
               client: str | None = None, current: Callable[[], bool] = lambda: True,
               on_ready: Callable[[int, int], None] | None = None) -> int:
    """Read the parts of `source` that were not read yet, one at a time, each into the engine's disk store
    (engine.info.keeps_caches) and out of memory, so that a question routed to one restores it. Loads and questions
    come first (lock.give_way); stops when current() turns False (the session closed or loaded another document) or
    when the memory budget has no room without evicting someone. on_ready(ready, parts) after each part. Returns the
    parts read."""
    reader, read = _Reader(client), 0
    for first, last, _ in parts:
        while not parts.has(first):
            if not current():
                return read
            with lock.ahead() as held:
                if not held:
                    time.sleep(0.05)
                    continue
                if not current() or lock.wanted.is_set():
                    continue
                try:
                    if not _read_one(engine, budget, source, parts, first, last, reader,
                                     give_way=lambda: lock.give_way or not current()):
                        return read
                except _GiveWay:
                    continue
                read += 1
        if on_ready is not None:
            on_ready(parts.ready, len(parts))
    return read


def _read_one(engine: Engine, budget: CacheBudget | None, source: Document, parts: Parts, first: int, last: int,
              reader: _Reader, *, give_way: Callable[[], bool]) -> bool:
    """Read one part into the store (under the session's lock); False when the budget has no room for it now."""
    def progress(fraction: float) -> None:
        if give_way():
            raise _GiveWay

    def admit(nbytes: int) -> None:
        if budget.used_bytes + nbytes > budget.limit_bytes:
            raise _NoRoom
        budget.admit(nbytes, reader)

    try:
        prefilled = prefill_part(lambda d: engine.prefill(d, progress=progress, admit=admit if budget else None),
                                 engine.count_tokens, source, first=first, last=last)
    except _NoRoom:
        return False
    finally:
        if budget is not None:
            budget.cancel(reader)
    part = prefilled.document.part
    parts.reads[(part.first, part.last)] = Message("origin.ahead", seconds=prefilled.prefill_s)
    del prefilled  # kept in the store, not in memory
    release_memory()
    return True
