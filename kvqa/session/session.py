"""One user's session: their document, its prefilled cache, and the questions they asked.

The app keeps a Session in per-browser state; this module holds what happens to it, so app.py only lays out the
UI. Every failed action raises a KvqaError and leaves the session's document, cache and turns as they were.
"""

from __future__ import annotations

import hashlib
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

from kvqa.cache.budget import CacheBudget
from kvqa.cache.shared import SharedCaches
from kvqa.documents.parts import notice, select, unit_total
from kvqa.documents.reading import Document, Part
from kvqa.engines import Engine
from kvqa.errors import BusyError, QuestionError
from kvqa.evidence.sources import Source
from kvqa.memory import release_memory
from kvqa.messages import Message
from kvqa.results import Answer, AnswerStream, PrefilledDocument
from kvqa.session.ask import Evidence, ask, ask_without_cache
from kvqa.session.parts import FOREGROUND, YIELD_WAIT_S, LongDocument, prefill_parts
from kvqa.timing import Timings


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
    also: Part | None = None  # another part that matched the question too (kvqa.documents.parts.runner_up), if any

    @property
    def stopped(self) -> bool:
        return self.stop_reason == "stopped"


def fingerprint(engine: Engine, document: Document) -> str:
    """Same text with the same model means the same cache: no second prefill."""
    return hashlib.sha256(f"{engine.info.model}\0{document.text}".encode()).hexdigest()


class Session(LongDocument):
    """A user's document, its prefilled cache (which the budget may evict; it is then rebuilt) and turns."""

    def __init__(self, engine: Engine, budget: CacheBudget | None = None, *, client: str | None = None,
                 shared: SharedCaches | None = None, recompute: bool = False):
        self.engine = engine
        self.budget = budget
        self.client = client  # who opened it (an address), for per-client limits in the budget
        self.shared = shared  # other sessions' caches: the same document is then read once for all of them
        self.whole: Document | None = None  # the document as loaded: every page or character of it
        self.document: Document | None = None  # what is read: the source, or the part of it that fits (.part)
        self.notice: Message | None = None  # what was read when it is not all of the source (kvqa.documents.parts)
        self._also: Part | None = None  # another part matching the question being asked too, for its Turn
        self.parts: list[tuple[int, int, int]] = []  # the source's parts (first, last, tokens), read one at a time
        self.pinned = False  # the user chose the part: questions are not routed to another
        self.ready_only = False  # a question goes to the best of the parts ready (in memory or the store) instead of
        #                          waiting while the part that matches it best is read
        self.part_reads: dict[tuple[int, int], Message] = {}  # each part read for this document: how, and what it took
        self._read: weakref.WeakSet[PrefilledDocument] = weakref.WeakSet()  # caches this session had, while alive
        self.prefilled: PrefilledDocument | None = None
        self.origin = "prefill"  # how this session got its cache: its PrefilledDocument's origin ("prefill",
        #                          "disk"), "memory" (shared) or "kept" (its own earlier part, still in memory)
        self.ready_s = 0.0  # how long that took this session
        self.fingerprint: str | None = None
        self.turns: list[Turn] = []
        self.remember = False  # follow-ups: each question reads the conversation since new_conversation()
        self._conversation_start = 0  # index in turns where the current conversation began
        self._stop = threading.Event()
        self.answering = False  # a question is being answered now (what Stop ends)
        self._busy = threading.Lock()  # one action at a time per session
        self._wanted = threading.Event()  # a load or a question waits for the part being read ahead (read_ahead)
        self._read_ahead_running = False  # read_ahead holds _busy
        self.closed = False  # close() was called: the session ended and holds no document any more
        self.recompute = recompute  # nothing is cached: every question reads the whole prompt (kvqa ask --no-cache)

    @property
    def busy(self) -> bool:
        return self._busy.locked()

    def load(self, document: Document, *, part: tuple[int, int] | None = None,
             progress: Callable[[float], None] | None = None) -> bool:
        """Prefill a new document (or its pages / characters part=(first, last)), replacing the old one and the chat;
        False if it is what is loaded already. When it does not fit the model, the part that does is read and
        self.notice says which."""
        key = fingerprint(self.engine, document) + f"\0{part}"
        if key == self.fingerprint and (self.prefilled is not None or self.recompute):
            return False
        with self._exclusive():
            if self.recompute:  # nothing is read now: each question reads the document (or its part) again
                read = select(document, *part) if part else document
                self.whole, self.document, self.fingerprint, self.pinned = document, read, key, part is not None
                whole = (1, unit_total(document))
                self.parts = [(*(part or whole), 0)]
                self.notice = notice(read, document, asked=part)
                self.turns, self._conversation_start = [], 0
                return True
            first, last = part or (None, None)
            prefilled, parts = prefill_parts(lambda d: self._prefill(d, progress=progress), self.engine.count_tokens,
                                             document, first=first, last=last)
            self.whole, self.document, self.prefilled, self.fingerprint = document, prefilled.document, prefilled, key
            self.parts, self.pinned = parts, part is not None
            self.part_reads = {k: v for k, v in self.part_reads.items()
                               if prefilled.document.part and k == (prefilled.document.part.first,
                                                                    prefilled.document.part.last)}
            self.notice = notice(prefilled.document, document, asked=part, parts=len(parts))
            self.turns, self._conversation_start = [], 0
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
        document (an index into self.parts; self.also_index names one that matched the last question too) instead of the
        one routing picks, for this question only. Nothing runs until the stream is iterated; closing it early ends
        the answer and frees the session at once."""
        if self.document is None:
            raise QuestionError("question.no_document")
        return AnswerStream(self._ask(question, baseline=baseline, progress=progress, on_rebuild=on_rebuild,
                                      on_part=on_part, part=part))

    def _ask(self, question, *, baseline, progress, on_rebuild, on_part, part) -> Iterator[str | Answer]:
        with self._exclusive():
            self._stop.clear()
            self.answering = True
            try:
                evidence = Evidence.of(self.whole, question)  # the question scored once: its part, quote, sources
                if self.recompute:
                    result = yield from self._answer_again(question, evidence)
                else:
                    result = yield from self._answer(question, evidence, baseline=baseline, progress=progress,
                                                     on_rebuild=on_rebuild, on_part=on_part, part=part)
            finally:
                self.answering = False
        yield result  # last, as every answer's stream ends: the session is free again before anyone reads it

    def _answer_again(self, question: str, evidence: Evidence) -> Generator[str, None, Answer]:
        """Answer by reading the whole prompt again (recompute), record the turn; returns the Answer."""
        with ask_without_cache(self.engine, self.document, question, evidence=evidence,
                               should_stop=self._stop.is_set) as pieces:
            yield from pieces
            result = pieces.answer
        self.turns.append(Turn(question, result.text, result.timings, stop_reason=result.stop_reason,
                               sources=result.sources, unsupported=result.unsupported, part=self.document.part))
        return result

    def _answer(self, question: str, evidence: Evidence, *, baseline, progress, on_rebuild, on_part,
                part) -> Generator[str, None, Answer]:
        """Answer from the cache (rebuilt, or another part read, first when needed), record the turn; returns the
        Answer."""
        evicted = self.prefilled is None or (self.budget is not None and not self.budget.touch(self))
        if evicted:
            self.prefilled = None
        switched = self._read_part_for(evidence, progress, part)
        if self.prefilled is None:
            self.prefilled = self._prefill(self.document, progress=progress)
        if switched and on_part is not None:
            on_part(self.prefilled)
        elif evicted and on_rebuild is not None:
            on_rebuild(self.prefilled)
        history = self.history()
        keep = self.engine.remembered(self.prefilled, history, question) if history else 0
        history = history[len(history) - keep:]  # the latest turns that fit in the room kept for a question
        with self._turn(self.prefilled), ask(self.engine, self.prefilled, question, history=history,
                                             evidence=evidence, should_stop=self._stop.is_set) as pieces:
            yield from pieces  # closing this generator closes the answer: the cache rolls back now
            result = pieces.answer
        measured, same = None, None
        if baseline and result.stop_reason != "stopped":
            recomputed = ask_without_cache(self.engine, self.document, question, history=history,
                                           evidence=evidence, prompt=self.prefilled.prompt).answer
            measured, same = recomputed.timings, recomputed.token_ids == result.token_ids
        self.turns.append(Turn(question, result.text, result.timings, baseline=measured, baseline_same=same,
                               stop_reason=result.stop_reason, sources=result.sources, follows=len(history),
                               unsupported=result.unsupported, part=self.document.part,
                               also=self._also))
        return result

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
        self.origin = "kept" if kept else "memory" if shared else prefilled.origin
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
        with FOREGROUND:
            if not self._busy.acquire(blocking=False):
                if not self._read_ahead_running:
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
