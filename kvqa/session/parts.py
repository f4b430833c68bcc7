"""A Session's long document: the part each question is routed to, read (or restored from the store) when it is not
the one in memory, and the other parts read ahead in the background so that a question routed to one finds it ready.

Session takes these as a mixin (kvqa.session.session); they use its document, parts, budget and locks.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable

from kvqa.documents.parts import MAX_UNIT_CHARS, part_of, plan, select, span_text, unit_name, unit_total, units
from kvqa.documents.reading import Document
from kvqa.errors import DocumentTooLong, QuestionError
from kvqa.memory import release_memory
from kvqa.messages import Message
from kvqa.prompt import system_text
from kvqa.results import PrefilledDocument
from kvqa.session.ask import Evidence

RETRIES = 4  # the part's real prompt may be a few tokens longer than its counted pages: drop a unit and try again
YIELD_WAIT_S = 60.0  # how long a question waits for a part being read ahead to give the model up (one chunk)


def prefill_part(prefill: Callable[[Document], PrefilledDocument], count_tokens: Callable[[str], int],
                 document: Document, *, first: int | None = None, last: int | None = None) -> PrefilledDocument:
    """Prefill the document, or its pages/characters first..last when given; when that does not fit the model's
    context, the longest run of whole pages (or paragraphs) from its start that does. The PrefilledDocument's
    document then carries a Part. Raises DocumentTooLong only when not even one page or paragraph fits."""
    return prefill_parts(prefill, count_tokens, document, first=first, last=last)[0]
def prefill_parts(prefill: Callable[[Document], PrefilledDocument], count_tokens: Callable[[str], int],
                  document: Document, *, first: int | None = None,
                  last: int | None = None) -> tuple[PrefilledDocument, list[tuple[int, int, int]]]:
    """prefill_part(), and the parts first..last is cut into to be read whole, as (first, last, tokens) in the
    document's unit: consecutive runs of whole pages or paragraphs that each fit the model (counted), neighbours
    sharing one page or paragraph, the first one the part read now. One part when it all fits."""
    whole = (1, unit_total(document))
    first, last = first or whole[0], last or whole[1]
    chosen = select(document, first, last)
    try:
        doc = prefill(chosen)
        return doc, [(first, last, doc.tokens)]
    except DocumentTooLong as error:
        if error.limit is None:  # the memory budget refused it, not the context: no part is chosen for the user
            raise
        too_long = error
    # a unit of room / 4 characters fits even at 3 tokens a character (rare CJK in byte-level vocabularies)
    spans = units(document, first, last, max_chars=max(100, min(MAX_UNIT_CHARS, too_long.limit // 4)))
    counts: list[int] = []  # each unit's tokens, counted once
    if too_long.tokens:  # the prompt around the document: instructions, template, date line
        counts = [count_tokens(span_text(document, s)) for s in spans]
        overhead = max(too_long.tokens - sum(counts), 0)
    else:  # refused unread (far too long): count only the units that may fit
        overhead = count_tokens(system_text("")) + 32
    room, used, take = too_long.limit - overhead, 0, 0
    while take < len(spans):
        if take == len(counts):
            counts.append(count_tokens(span_text(document, spans[take])))
        used += counts[take]
        if used > room:
            break
        take += 1
    for _ in range(RETRIES):
        if take == 0:
            break
        part = select(document, first, spans[take - 1][1])
        try:
            doc = prefill(part)
        except DocumentTooLong as error:
            if error.limit is None:
                raise
            take -= 1
            continue
        while len(counts) < len(spans):
            counts.append(count_tokens(span_text(document, spans[len(counts)])))
        return doc, [(a, b, tokens + overhead) for a, b, tokens in plan(spans, counts, room, first_take=take)]
    unit = unit_name(document)
    raise DocumentTooLong("part.first_unit_too_long", tokens=too_long.tokens, limit=too_long.limit,
                          unit_one=Message("unit.page" if unit == "pages" else "unit.paragraph"),
                          unit=Message(f"unit.{unit}"))


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




class LongDocument:
    """The parts of a Session's document: routing, and reading ahead."""

    @property
    def part_index(self) -> int:
        """Which of self.parts is read now (0 when the document is one part)."""
        read = self.document.part if self.document is not None else None
        if read is None or len(self.parts) < 2:
            return 0
        # by its first unit: a part whose prompt came out a few tokens over is read a unit shorter (prefill_part)
        return next((i for i, (a, _, _) in enumerate(self.parts) if a == read.first), 0)

    def _read_part_for(self, evidence: Evidence, progress, part: int | None = None) -> bool:
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
        best, also = evidence.route(self.parts, current=current) if part is None else (part, None)
        ready = self._ready_parts() if self.ready_only and part is None else set()
        target = best
        if ready and best not in ready:
            target, also = evidence.route(self.parts, current=current, among=ready)
        switched = target != current or self.prefilled is None
        if switched:
            first, last, _ = self.parts[target]
            prefilled = prefill_part(lambda d: self._prefill(d, progress=progress), self.engine.count_tokens,
                                     self.whole, first=first, last=last)
            self.document, self.prefilled = prefilled.document, prefilled
        said = {"part": self.document.part.name, "name": self.whole.name, "index": target + 1,
                "parts": len(self.parts)}
        if also is not None:
            self._also = part_of(self.whole, self.parts[also][0], self.parts[also][1])
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
    def also_index(self) -> int | None:
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
        if not self.can_read_ahead:
            return 0
        source, parts = self.whole, list(self.parts)
        reader, read = _Reader(self.client), 0
        for first, last, _ in parts:
            while not self._has_part(first):
                if self.closed or self.whole is not source:
                    return read
                if self._wanted.is_set() or FOREGROUND or not self._busy.acquire(blocking=False):
                    time.sleep(0.05)
                    continue
                self._read_ahead_running = True
                try:
                    if self.closed or self.whole is not source or self._wanted.is_set():
                        continue
                    if not self._read_ahead_one(source, first, last, reader):
                        return read
                    read += 1
                except _GiveWay:
                    continue
                finally:
                    self._read_ahead_running = False
                    self._busy.release()
            if on_ready is not None:
                on_ready(sum(self._has_part(a) for a, _, _ in parts), len(parts))
        return read

    @property
    def can_read_ahead(self) -> bool:
        """Whether read_ahead has anything to do: a document in parts, none pinned, an engine that keeps caches."""
        return (self.whole is not None and len(self.parts) > 1 and not self.pinned
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
            if self._wanted.is_set() or FOREGROUND or self.closed:
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

