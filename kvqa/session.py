"""One user's session: their document, its prefilled cache, and the questions they asked.

The app keeps a Session in per-browser state; this module holds what happens to it, so app.py only lays out the
UI. Every failed action raises a KvqaError and leaves the session's document, cache and turns as they were.
"""

from __future__ import annotations

import hashlib
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from .budget import CacheBudget
from .documents import Document, Part
from .engines import Engine
from .errors import BusyError, QuestionError
from .memory import release_memory
from .messages import Message
from .parts import notice, part_of, prefill_part, prefill_parts, routed
from .results import Answer, AnswerStream, PrefilledDocument
from .shared import SharedCaches
from .sources import Source
from .timing import Timings


@dataclass(frozen=True)
class Turn:
    """One question of the session and how it was answered."""

    question: str
    answer: str
    timings: Timings
    baseline: Timings | None = None  # the same question answered by recomputing the whole prompt, when asked for
    baseline_same: bool | None = None  # that recomputed answer's tokens were the cached answer's
    stop_reason: str = "eos"  # "stopped": the user pressed Stop; timings cover what was generated until then
    sources: tuple[Source, ...] = ()  # the document's passages the answer relies on
    unsupported: tuple[str, ...] = ()  # numbers and names in the answer that the document lacks
    follows: int = 0  # earlier turns of the conversation the question was read after (remember on)
    part: Part | None = None  # the part of a long document the answer came from (None: the document is one part)
    also: Part | None = None  # another part that matched the question too (kvqa.parts.runner_up), if any

    @property
    def stopped(self) -> bool:
        return self.stop_reason == "stopped"


YIELD_WAIT_S = 60.0  # how long a question waits for a part being read ahead to give the model up (one chunk)
_foreground = 0  # loads and questions running in this process, any session: reading ahead waits while any runs
_foreground_lock = threading.Lock()


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


def fingerprint(engine: Engine, document: Document) -> str:
    """Same text with the same model means the same cache: no second prefill."""
    return hashlib.sha256(f"{engine.info.model}\0{document.text}".encode()).hexdigest()


class Session:
    """A user's document, its prefilled cache (which the budget may evict; it is then rebuilt) and turns."""

    def __init__(self, engine: Engine, budget: CacheBudget | None = None, *, client: str | None = None,
                 shared: SharedCaches | None = None):
        self.engine = engine
        self.budget = budget
        self.client = client  # who opened it (an address), for per-client limits in the budget
        self.shared = shared  # other sessions' caches: the same document is then read once for all of them
        self.source: Document | None = None  # the document as loaded: every page or character of it
        self.document: Document | None = None  # what is read: the source, or the part of it that fits (.part)
        self.notice: Message | None = None  # what was read when it is not all of the source (kvqa.parts)
        self._also: Part | None = None  # another part matching the question being asked too, for its Turn
        self.parts: list[tuple[int, int, int]] = []  # the source's parts (first, last, tokens), read one at a time
        self.pinned = False  # the user chose the part: questions are not routed to another
        self.ready_only = False  # a question goes to the best of the parts ready (in memory or the store) instead of
        #                          waiting while the part that matches it best is read
        self.part_reads: dict[tuple[int, int], Message] = {}  # each part read for this document: how, and what it took
        self._read: weakref.WeakSet[PrefilledDocument] = weakref.WeakSet()  # caches this session had, while alive
        self.prefilled: PrefilledDocument | None = None
        self.origin = "prefill"  # how this session got its cache: its PrefilledDocument's cache_source ("prefill",
        #                          "disk"), "memory" (shared) or "kept" (its own earlier part, still in memory)
        self.ready_s = 0.0  # how long that took this session
        self.fingerprint: str | None = None
        self.turns: list[Turn] = []
        self.remember = False  # follow-ups: each question reads the conversation since new_conversation()
        self._conversation_start = 0  # index in turns where the current conversation began
        self._stop = threading.Event()
        self._busy = threading.Lock()  # one action at a time per session
        self._wanted = threading.Event()  # a load or a question waits for the part being read ahead (read_ahead)
        self._reading_ahead = False  # read_ahead holds _busy
        self.closed = False  # close() was called: the session ended and holds no document any more

    @property
    def busy(self) -> bool:
        return self._busy.locked()

    def load(self, document: Document, *, part: tuple[int, int] | None = None,
             progress: Callable[[float], None] | None = None) -> bool:
        """Prefill a new document (or its pages / characters part=(first, last)), replacing the old one and the chat;
        False if it is what is loaded already. When it does not fit the model, the part that does is read and
        self.notice says which."""
        key = fingerprint(self.engine, document) + f"\0{part}"
        if key == self.fingerprint and self.prefilled is not None:
            return False
        with self._exclusive():
            first, last = part or (None, None)
            prefilled, parts = prefill_parts(lambda d: self._prefill(d, progress=progress), self.engine.count_tokens,
                                             document, first=first, last=last)
            self.source, self.document, self.prefilled, self.fingerprint = document, prefilled.document, prefilled, key
            self.parts, self.pinned = parts, part is not None
            self.part_reads = {k: v for k, v in self.part_reads.items()
                               if prefilled.document.part and k == (prefilled.document.part.first,
                                                                    prefilled.document.part.last)}
            self.notice = notice(prefilled.document, document, asked=part, parts=len(parts))
            self.turns, self._conversation_start = [], 0
        return True

    @property
    def part_index(self) -> int:
        """Which of self.parts is read now (0 when the document is one part)."""
        read = self.document.part if self.document is not None else None
        if read is None or len(self.parts) < 2:
            return 0
        # by its first unit: a part whose prompt came out a few tokens over is read a unit shorter (prefill_part)
        return next((i for i, (a, _, _) in enumerate(self.parts) if a == read.first), 0)

    def _read_part_for(self, question: str, progress, part: int | None = None) -> bool:
        """Route the question to the part of a long document that holds its best-matching passages, reading that
        part now (or restoring it from the store) when it is not the one read; a pinned part stays. With ready_only,
        a best part that is not ready gives way to the best of those that are. part: this part (an index into
        self.parts) instead, for this question only. True when another part was read."""
        self._also = None
        if part is not None and not 0 <= part < len(self.parts):
            raise QuestionError("question.no_such_part", part=part + 1, parts=len(self.parts))
        if len(self.parts) < 2 or (part is None and self.pinned):
            return False
        current = self.part_index
        best, also = routed(self.source, self.parts, question, current=current) if part is None else (part, None)
        ready = self._ready_parts() if self.ready_only and part is None else set()
        target = best
        if ready and best not in ready:
            target, also = routed(self.source, self.parts, question, current=current, among=ready)
        switched = target != current or self.prefilled is None
        if switched:
            first, last, _ = self.parts[target]
            prefilled = prefill_part(lambda d: self._prefill(d, progress=progress), self.engine.count_tokens,
                                     self.source, first=first, last=last)
            self.document, self.prefilled = prefilled.document, prefilled
        said = {"part": self.document.part.name, "name": self.source.name, "index": target + 1,
                "parts": len(self.parts)}
        if also is not None:
            self._also = part_of(self.source, self.parts[also][0], self.parts[also][1])
        if part is not None:
            self.notice = Message("notice.routed_asked", **said)
        elif target != best:
            self.notice = Message("notice.routed_ready", best=best + 1, **said)
        elif also is not None:
            self.notice = Message("notice.routed_also", also=also + 1, also_part=self._also.name, **said)
        elif switched or (self.notice is not None and self.notice.key in ("notice.routed_ready", "notice.routed_also",
                                                                          "notice.routed_asked")):
            self.notice = Message("notice.routed", **said)  # (no longer short of a better part)
        return target != current

    @property
    def also(self) -> int | None:
        """The other part that matched the conversation's last question too (an index into self.parts; its
        Turn.also), to ask it again there; None when there is none."""
        turns = self.conversation()
        also = turns[-1].also if turns else None
        return self.index_of(also.first, also.last) if also else None

    def index_of(self, first: int, last: int) -> int | None:
        """Which of self.parts is units first..last, or None when none is."""
        return next((i for i, (a, b, _) in enumerate(self.parts) if (a, b) == (first, last)), None)

    def _ready_parts(self) -> set[int]:
        """The parts a question can have without reading one: the part in memory, and (an engine that keeps caches)
        those read or restored here before, which its store holds."""
        ready = {self.part_index} if self.prefilled is not None else set()
        if self.engine.info.keeps_caches:
            ready |= {i for i, (first, _, _) in enumerate(self.parts) if self._has_part(first)}
        return ready

    def read_ahead(self, on_ready: Callable[[int, int], None] | None = None) -> int:
        """Read the long document's parts that were not read yet, one at a time, so that a question routed to one
        finds it ready: each goes into the engine's disk store (engine.info.keeps_caches; nothing is read ahead
        without one) and leaves memory; a question routed to it restores it. Loads and questions come first, in
        any session of the process: the part being read is dropped at its next chunk (never used half read) and
        read again after them. Stops when the session closes or loads another document, or when the memory budget
        has no room without evicting someone. on_ready(ready, parts) after each part. Returns the parts read."""
        if not self.reads_ahead:
            return 0
        source, parts = self.source, list(self.parts)
        reader, read = _Reader(self.client), 0
        for first, last, _ in parts:
            while not self._has_part(first):
                if self.closed or self.source is not source:
                    return read
                if self._wanted.is_set() or _foreground or not self._busy.acquire(blocking=False):
                    time.sleep(0.05)
                    continue
                self._reading_ahead = True
                try:
                    if self.closed or self.source is not source or self._wanted.is_set():
                        continue
                    if not self._read_ahead_one(source, first, last, reader):
                        return read
                    read += 1
                except _GiveWay:
                    continue
                finally:
                    self._reading_ahead = False
                    self._busy.release()
            if on_ready is not None:
                on_ready(sum(self._has_part(a) for a, _, _ in parts), len(parts))
        return read

    @property
    def reads_ahead(self) -> bool:
        """Whether read_ahead has anything to do: a document in parts, none pinned, an engine that keeps caches."""
        return (self.source is not None and len(self.parts) > 1 and not self.pinned
                and self.engine.info.keeps_caches)

    @property
    def parts_ready(self) -> int:
        """How many of the document's parts were read (or restored) here: in memory, or in the store."""
        return sum(self._has_part(first) for first, _, _ in self.parts)

    def _has_part(self, first: int) -> bool:
        """Whether the part starting at unit `first` was read (or restored) for this document."""
        return any(a == first for a, _ in self.part_reads)

    def _read_ahead_one(self, source: Document, first: int, last: int, reader: _Reader) -> bool:
        """Read one part into the store (under _busy); False when the budget has no room for it now."""
        def give_way(fraction: float) -> None:
            if self._wanted.is_set() or _foreground or self.closed:
                raise _GiveWay

        def admit(nbytes: int) -> None:
            if self.budget.used_bytes + nbytes > self.budget.limit_bytes:
                raise _NoRoom
            self.budget.admit(nbytes, reader)

        try:
            prefilled = prefill_part(
                lambda d: self.engine.prefill(d, progress=give_way, admit=admit if self.budget else None),
                self.engine.count_tokens, source, first=first, last=last)
        except _NoRoom:
            return False
        finally:
            if self.budget is not None:
                self.budget.cancel(reader)
        part = prefilled.document.part
        self.part_reads[(part.first, part.last)] = Message("origin.ahead", seconds=prefilled.prefill_s)
        del prefilled  # kept in the store, not in memory
        release_memory()
        return True

    def new_conversation(self) -> None:
        """Forget the conversation (follow-ups start again from the document alone); the document stays read."""
        self._conversation_start = len(self.turns)

    def conversation(self) -> list[Turn]:
        """The turns since the last new_conversation(), oldest first."""
        return self.turns[self._conversation_start:]

    def history(self) -> list[tuple[str, str]]:
        """The current conversation's (question, answer) turns, oldest first; empty unless remember is on."""
        if not self.remember:
            return []
        return [(t.question, t.answer) for t in self.conversation() if not t.stopped]

    def ask(self, question: str, *, baseline: bool = False, progress: Callable[[float], None] | None = None,
            on_rebuild: Callable[[PrefilledDocument], None] | None = None,
            on_part: Callable[[PrefilledDocument], None] | None = None, part: int | None = None) -> AnswerStream:
        """Stream the answer from the document's cache and record the turn. If the cache was evicted it is rebuilt
        first and on_rebuild(prefilled) is called. A document cut into parts answers from the part that matches the
        question best (unless one is pinned): when that is not the part read, it is read first (or restored from the
        store) and on_part(prefilled) is called. With baseline=True the question is answered again without the
        cache afterwards, to measure the real speedup (Turn.baseline). part: answer from this part of a long
        document (an index into self.parts; self.also names one that matched the last question too) instead of the
        one routing picks, for this question only. Nothing runs until the stream is iterated; closing it early ends
        the answer and frees the session at once."""
        if self.document is None:
            raise QuestionError("question.no_document")
        return AnswerStream(self._ask(question, baseline=baseline, progress=progress, on_rebuild=on_rebuild,
                                      on_part=on_part, part=part))

    def _ask(self, question, *, baseline, progress, on_rebuild, on_part, part) -> Iterator[str | Answer]:
        with self._exclusive():
            self._stop.clear()
            evicted = self.prefilled is None or (self.budget is not None and not self.budget.touch(self))
            if evicted:
                self.prefilled = None
            switched = self._read_part_for(question, progress, part)
            if self.prefilled is None:
                self.prefilled = self._prefill(self.document, progress=progress)
            if switched and on_part is not None:
                on_part(self.prefilled)
            elif evicted and on_rebuild is not None:
                on_rebuild(self.prefilled)
            history = self.history()
            keep = self.engine.remembered(self.prefilled, history, question) if history else 0
            history = history[len(history) - keep:]  # the latest turns that fit in the room kept for a question
            with self._turn(self.prefilled), self.engine.stream(self.prefilled, question,
                                                                 should_stop=self._stop.is_set,
                                                                 history=history) as pieces:
                yield from pieces  # closing this generator closes the answer: the cache rolls back now
                result = pieces.answer
            measured, same = None, None
            if baseline and result.stop_reason != "stopped":
                recomputed = self.engine.stream_without_cache(self.document, question, prompt=self.prefilled.prompt,
                                                              history=history).answer
                measured, same = recomputed.timings, recomputed.token_ids == result.token_ids
            self.turns.append(Turn(question, result.text, result.timings, baseline=measured, baseline_same=same,
                                   stop_reason=result.stop_reason, sources=result.sources, follows=len(history),
                                   unsupported=result.unsupported, part=self.document.part,
                                   also=self._also))
        yield result  # last, as every answer's stream ends: the session is free again before anyone reads it

    def stop(self) -> None:
        """Ask the running answer to end before its next token."""
        self._stop.set()

    def close(self) -> None:
        """Free the session's cache (the session ended or expired)."""
        self._stop.set()
        self.closed = True
        if self.budget is not None:
            self.budget.release(self)
        self.prefilled = None
        release_memory()

    def try_evict(self) -> bool:
        """Drop the cache to free memory, unless the session is working right now (then False). The document's
        text is kept and is prefilled again when next asked."""
        if not self._busy.acquire(blocking=False):
            return False
        try:
            self.prefilled = None
            return True
        finally:
            self._busy.release()

    def _prefill(self, document, *, progress) -> PrefilledDocument:
        """The document's cache: another session's when one holds it (shared), else read now or restored."""
        started = time.perf_counter()
        if self.shared is None:
            prefilled, shared = self._prefill_own(document, progress=progress), False
        else:
            key = fingerprint(self.engine, document)
            prefilled, shared = self.shared.get_or_load(key, lambda: self._prefill_own(document, progress=progress))
            if shared and self.budget is not None:
                self.budget.add(prefilled.cache_bytes, self, cache=key)
        kept = shared and prefilled in self._read  # a part this session read before, still in memory
        self._read.add(prefilled)
        self.origin = "kept" if kept else "memory" if shared else prefilled.cache_source
        self.ready_s = time.perf_counter() - started if shared else prefilled.prefill_s
        part = prefilled.document.part
        if part is not None:
            self.part_reads[(part.first, part.last)] = cache_origin(self)
        return prefilled

    def _prefill_own(self, document, *, progress) -> PrefilledDocument:
        admit = (lambda nbytes: self.budget.admit(nbytes, self)) if self.budget is not None else None
        try:
            prefilled = self.engine.prefill(document, progress=progress, admit=admit)
        except BaseException:
            if self.budget is not None:
                self.budget.cancel(self)
            raise
        if self.budget is not None:
            self.budget.add(prefilled.cache_bytes, self,
                            cache=fingerprint(self.engine, document) if self.shared is not None else None)
        return prefilled

    @contextmanager
    def _turn(self, prefilled: PrefilledDocument) -> Iterator[None]:
        """Wait while another session that shares this document's cache answers on it (Stop ends the wait)."""
        while not prefilled.turn.acquire(timeout=0.05):
            if self._stop.is_set():
                raise BusyError("busy.stopped_before")
        try:
            yield
        finally:
            prefilled.turn.release()

    @contextmanager
    def _exclusive(self) -> Iterator[None]:
        """One action at a time: a second one is refused, except that reading ahead gives way to a load or a
        question (which then waits up to YIELD_WAIT_S for it). While any action runs, no session reads ahead."""
        global _foreground
        with _foreground_lock:
            _foreground += 1
        try:
            if not self._busy.acquire(blocking=False):
                if not self._reading_ahead:
                    raise BusyError("busy.session")
                self._wanted.set()
                try:
                    if not self._busy.acquire(timeout=YIELD_WAIT_S):
                        raise BusyError("busy.session")
                finally:
                    self._wanted.clear()
            try:
                yield
            finally:
                self._busy.release()
        finally:
            with _foreground_lock:
                _foreground -= 1


def cache_origin(session: Session) -> Message:
    """Where the session's cache came from and what it took, for the status panel: "read now: 15.80 s"..."""
    return Message(f"origin.{session.origin}", seconds=session.ready_s)


def speedup(turn: Turn, read_s: float | None) -> tuple[float, bool]:
    """How much sooner the first token came than without the cache: (factor, measured?). Measured when the turn
    was also answered without the cache; else estimated as (read + TTFT) / TTFT, since recomputing the whole
    prompt costs about reading the document plus the question. `read_s` is what reading the document took when its
    cache was made (PrefilledDocument.first_read_s), not what restoring it took; None (unknown): (0.0, False)."""
    ttft = turn.timings.ttft_s
    if ttft <= 0:
        return 0.0, False
    if turn.baseline is not None:
        return turn.baseline.ttft_s / ttft, True
    if read_s is None:
        return 0.0, False
    return (read_s + ttft) / ttft, False
