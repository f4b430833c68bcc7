"""One user's session: their document, its prefilled cache, and the questions they asked.

The app keeps a Session in per-browser state; this module holds what happens to it, so app.py only lays out the
UI. Every failed action raises a KvqaError and leaves the session's document, cache and turns as they were.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections.abc import Callable, Iterator
from contextlib import nullcontext
from dataclasses import dataclass

from kvqa.cache.budget import CacheBudget
from kvqa.cache.shared import SharedCaches
from kvqa.documents.parts import in_characters, notice, select, unit_name, unit_total
from kvqa.documents.reading import Document, Part
from kvqa.engines import Engine
from kvqa.errors import QuestionError
from kvqa.evidence.evidence import Evidence
from kvqa.evidence.routing import Routed
from kvqa.evidence.sources import Source
from kvqa.memory import release_memory
from kvqa.messages import Message
from kvqa.results import Answer, AnswerStream, PrefilledDocument
from kvqa.session.ahead import SessionLock, read_ahead
from kvqa.session.ask import ask, ask_without_cache
from kvqa.session.caches import cache_for, fingerprint
from kvqa.session.gather import Composed, Gathered, gather
from kvqa.session.parts import Parts, prefill_part, prefill_parts, routed_notice
from kvqa.timing import Timings


@dataclass(frozen=True)
class Ask:
    """One question as the page, the API and the CLI send it to a session: its text and how it is to be answered.
    Session.ask takes it (or a bare question: Ask(question)); nothing about a question is set on the session."""

    question: str
    remember: bool = False  # read it after the conversation since new_conversation() (a follow-up)
    ready_only: bool = False  # a long document: answer from the best part ready (in memory or the store) rather than
    #                           wait while the part that matches it best is read
    baseline: bool = False  # answer it again without the cache afterwards, to measure the speedup (Turn.baseline)
    part: Part | None = None  # answer from this one of the session's parts instead of the one it is routed to
    progress: Callable[[float], None] | None = None  # how far a read the question needs first is (a part, a rebuild)
    on_rebuild: Callable[[PrefilledDocument], None] | None = None  # the evicted cache was read again first
    on_part: Callable[[PrefilledDocument], None] | None = None  # another part was read (or restored) first


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
    short: str = ""  # the answer's shortest phrase that answers (kvqa.evidence.short); "" when none stands out
    unsupported: tuple[str, ...] = ()  # numbers and names in the answer that the document lacks
    unquoted: tuple[str, ...] = ()  # numbers in the answer that the document has but not the passage quoted to it
    follows: int = 0  # earlier turns of the conversation the question was read after (remember on)
    part: Part | None = None  # the part of a long document the answer came from (None: the document is one part)
    also: Part | None = None  # another part that matched the question too (kvqa.documents.parts.runner_up), if any
    composed: Composed | None = None  # the parts whose passages the answer's cache was composed of (approximate),
    #                                   when it was (kvqa.session.gather); None when one part (or the whole) answered
    model: str = ""  # the model that answered
    behind: str | None = None  # the better model that was reading the document behind it, if it answered meanwhile
    #                            (kvqa.session.takeover)

    @property
    def stopped(self) -> bool:
        return self.stop_reason == "stopped"


class Session:
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
        self.parts = Parts()  # the source's parts, read one at a time (one when it fits the model)
        self._read: weakref.WeakSet[PrefilledDocument] = weakref.WeakSet()  # caches this session had, while alive
        self.prefilled: PrefilledDocument | None = None
        self.origin = "prefill"  # how this session got its cache: its PrefilledDocument's origin ("prefill",
        #                          "disk"), "memory" (shared) or "kept" (its own earlier part, still in memory)
        self.ready_s = 0.0  # how long that took this session
        self.fingerprint: str | None = None
        self.turns: list[Turn] = []
        self._conversation_start = 0  # index in turns where the current conversation began
        self._stop = threading.Event()
        self.answering = False  # a question is being answered now (what Stop ends)
        self.behind: str | None = None  # a better model reading this document in the background (its name), which
        #                                 takes over once read (kvqa.session.takeover); its turns say so
        self.lock = SessionLock()  # one action at a time; reading ahead gives way (kvqa.session.ahead)
        self.closed = False  # close() was called: the session ended and holds no document any more
        self.recompute = recompute  # nothing is cached: every question reads the whole prompt (kvqa ask --no-cache)

    @property
    def busy(self) -> bool:
        return self.lock.locked

    def load(self, document: Document, *, part: Part | None = None,
             progress: Callable[[float], None] | None = None) -> bool:
        """Prefill a new document (or the part of its pages / characters the user chose), replacing the old one and
        the chat; False if it is what is loaded already. When it does not fit the model, the part that does is read
        and self.notice says which."""
        asked = (part.first, part.last) if part is not None else None
        if part is not None and part.unit != unit_name(document):  # characters of a document of pages
            document = in_characters(document)
        key = fingerprint(self.engine, document) + f"\0{part.unit if part else ''}{asked}"
        if key == self.fingerprint and (self.prefilled is not None or self.recompute):
            return False
        with self.lock.action():
            if self.recompute:  # nothing is read now: each question reads the document (or its part) again
                read = select(document, *asked) if asked else document
                self.whole, self.document, self.fingerprint = document, read, key
                self.parts = Parts([(*(asked or (1, unit_total(document))), 0)], pinned=asked is not None)
                self.notice = notice(read, document, asked=asked)
                self.turns, self._conversation_start = [], 0
                return True
            first, last = asked or (None, None)
            prefilled, parts, whole = prefill_parts(lambda d: self._prefill(d, progress=progress),
                                                    self.engine.count_tokens, document, first=first, last=last)
            self.whole, self.document, self.prefilled, self.fingerprint = whole, prefilled.document, prefilled, key
            read = prefilled.document.part
            kept = {k: v for k, v in self.parts.reads.items() if read and k == (read.first, read.last)}
            self.parts = Parts(parts, pinned=asked is not None, reads=kept)
            self.notice = notice(prefilled.document, document, asked=asked, parts=len(parts))
            self.turns, self._conversation_start = [], 0
        return True

    def carry_turns(self, other: Session) -> None:
        """Take the turns of `other` (the same document read by another model): the chat goes on, and follow-ups
        read its current conversation."""
        self.turns, self._conversation_start = list(other.turns), other._conversation_start

    def new_conversation(self) -> None:
        """Forget the conversation (follow-ups start again from the document alone); the document stays read."""
        self._conversation_start = len(self.turns)

    def conversation(self) -> list[Turn]:
        """The turns since the last new_conversation(), oldest first."""
        return self.turns[self._conversation_start:]

    def history(self) -> list[tuple[str, str]]:
        """The current conversation's (question, answer) turns, oldest first, that a follow-up is read after."""
        return [(t.question, t.answer) for t in self.conversation() if not t.stopped]

    def ask(self, asked: Ask | str) -> AnswerStream:
        """Stream the answer from the document's cache and record the turn. If the cache was evicted it is rebuilt
        first (asked.on_rebuild). A document cut into parts answers from the part that matches the question best
        (unless one is pinned, or asked.part names one): when that is not the part read, it is read first (or
        restored from the store; asked.on_part). With the engine's gather_tokens set, a question whose passages lie in
        several parts read is answered from one cache composed of them instead (kvqa.session.gather; Turn.composed).
        Nothing runs until the stream is iterated; closing it early ends the answer and frees the session at once."""
        asked = Ask(asked) if isinstance(asked, str) else asked
        if self.document is None:
            raise QuestionError("question.no_document")
        # the part asked for is refused now, before anything changes, when it is not one of the parts
        index = self.parts.asked(asked.part) if asked.part is not None else None
        return AnswerStream(self._ask(asked, index))

    def _ask(self, asked: Ask, index: int | None) -> Iterator[str | Answer]:
        """The question answered from the cache (the part it is routed to read, or the cache rebuilt, first when
        needed), or by reading the whole prompt again (recompute); the turn recorded; the Answer last, when the
        session is free again. index: the part asked for (asked.part), as an index into self.parts."""
        with self.lock.action():
            self._stop.clear()
            self.answering = True
            try:
                evidence, gathered = self._ready_for(asked, index)
                read = gathered.prefilled if gathered is not None else self.prefilled
                if gathered is not None:
                    evidence = evidence.on(read.document, gathered.composed.held)
                question = asked.question
                history, stop, turn = [], self._stop.is_set, nullcontext()
                if not self.recompute:
                    if asked.remember and (history := self.history()):
                        keep = self.engine.remembered(read, history, question)
                        history = history[len(history) - keep:] if keep else []  # the latest turns that fit
                    turn = read.taken(should_stop=stop)  # another session sharing it may be answering
                answering = (ask_without_cache(self.engine, self.document, question, evidence=evidence,
                                               should_stop=stop) if self.recompute else
                             ask(self.engine, read, question, history=history, evidence=evidence, should_stop=stop))
                with turn, answering as pieces:
                    yield from pieces  # closing this generator closes the answer: the cache rolls back now
                    result = pieces.answer
                measured, same = None, None
                if asked.baseline and not self.recompute and result.stop_reason != "stopped":
                    recomputed = ask_without_cache(self.engine, read.document, question, history=history,
                                                   evidence=evidence, prompt=read.prompt).answer
                    measured, same = recomputed.timings, recomputed.token_ids == result.token_ids
                self.turns.append(Turn(question, result.text, result.timings, baseline=measured, baseline_same=same,
                                       stop_reason=result.stop_reason, sources=result.sources, short=result.short,
                                       follows=len(history), unsupported=result.unsupported,
                                       unquoted=result.unquoted, part=self.document.part, also=self._also,
                                       composed=gathered.composed if gathered is not None else None,
                                       model=self.engine.info.model, behind=self.behind))
            finally:
                self.answering = False
        yield result  # last, as every answer's stream ends: the session is free again before anyone reads it

    def _ready_for(self, asked: Ask, index: int | None) -> tuple[Evidence, Gathered | None]:
        """The question's evidence (scored once over the whole document: its part, quotes and sources), and the cache
        it is answered from: the part it is routed to (read or restored when it is not the one read), and the cache
        rebuilt when it was evicted; asked.on_part or asked.on_rebuild says which happened. Recompute: no cache.
        On a document in parts, its passages of every part read, composed into one cache (kvqa.session.gather),
        when they lie in more than one."""
        parts = () if self.parts.pinned else self.parts.spans  # every part's passages, when in parts
        evidence = Evidence.of(self.whole, asked.question, parts)
        self._also = None  # another part that matched it too: set when it is routed
        if self.recompute:
            return evidence, None
        evicted = self.prefilled is None or (self.budget is not None and not self.budget.touch(self))
        if evicted:
            self.prefilled = None
        switched = self._read_part_for(evidence, asked, index)
        if self.prefilled is None:
            self.prefilled = self._prefill(self.document, progress=asked.progress)
        if switched and asked.on_part is not None:
            asked.on_part(self.prefilled)
        elif evicted and asked.on_rebuild is not None:
            asked.on_rebuild(self.prefilled)
        asked_part = index is not None  # a part asked for answers alone
        return evidence, None if asked_part else gather(self.engine, evidence, self.whole, self.parts, self.prefilled,
                                                        self.part_index)

    # ---- a long document's parts: the one a question goes to, and the others read ahead

    @property
    def part_index(self) -> int:
        """Which of self.parts is read now (0 when the document is one part)."""
        return self.parts.index_read(self.document)

    def _read_part_for(self, evidence: Evidence, asked: Ask, index: int | None) -> bool:
        """Route the question to the part of a long document that holds its best-matching passages (or to the part
        asked for, index), reading that part now (or restoring it from the store) when it is not the one read; a
        pinned part stays. True when another part was read."""
        if len(self.parts) < 2 or (index is None and self.parts.pinned):
            return False
        current = self.part_index
        ready = (self.parts.ready_indexes(current if self.prefilled is not None else None,
                                          stored=self.engine.info.keeps_caches)
                 if asked.ready_only and index is None else set())
        route = Routed(index, index) if index is not None else evidence.route(current=current, ready=ready)
        switched = route.target != current or self.prefilled is None
        if switched:
            first, last, _ = self.parts[route.target]
            prefilled = prefill_part(lambda d: self._prefill(d, progress=asked.progress), self.engine.count_tokens,
                                     self.whole, first=first, last=last)
            self.document, self.prefilled = prefilled.document, prefilled
        said = {"part": self.document.part.name, "name": self.whole.name, "index": route.target + 1,
                "parts": len(self.parts)}
        self.notice, self._also = routed_notice(route, self.whole, self.parts, asked=index is not None,
                                                switched=switched, said=said, before=self.notice)
        return route.target != current

    @property
    def also_index(self) -> int | None:
        """The other part that matched the conversation's last question too (an index into self.parts; its
        Turn.also), to ask it again there; None when there is none."""
        turns = self.conversation()
        also = turns[-1].also if turns else None
        return self.parts.index_of(also.first, also.last) if also else None

    @property
    def can_read_ahead(self) -> bool:
        """Whether read_ahead has anything to do: a document in parts, none pinned, an engine that keeps caches."""
        return (self.whole is not None and len(self.parts) > 1 and not self.parts.pinned
                and self.engine.info.keeps_caches)

    def read_ahead(self, on_ready: Callable[[int, int], None] | None = None) -> int:
        """Read the long document's parts that were not read yet, one at a time, into the engine's disk store, so
        that a question routed to one finds it ready (kvqa.session.ahead.read_ahead: loads and questions in any
        session come first). Stops when the session closes or loads another document. on_ready(ready, parts) after
        each part. Returns the parts read."""
        if not self.can_read_ahead:
            return 0
        source = self.whole
        return read_ahead(self.engine, self.budget, self.lock, source, self.parts, client=self.client,
                          current=lambda: not self.closed and self.whole is source, on_ready=on_ready)

    # ---- the session's life

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
        with self.lock.idle() as idle:
            if idle:
                self.prefilled = None
            return idle

    def _prefill(self, document, *, progress) -> PrefilledDocument:
        """The document's cache: another session's when one holds it (shared), else read now or restored."""
        started = time.perf_counter()
        prefilled, shared = cache_for(self.engine, document, owner=self, budget=self.budget, shared=self.shared,
                                      progress=progress)
        kept = shared and prefilled in self._read  # a part this session read before, still in memory
        self._read.add(prefilled)
        self.origin = "kept" if kept else "memory" if shared else prefilled.origin
        self.ready_s = time.perf_counter() - started if shared else prefilled.prefill_s
        part = prefilled.document.part
        if part is not None:
            self.parts.reads[(part.first, part.last)] = Message(f"origin.{self.origin}", seconds=self.ready_s)
        return prefilled
