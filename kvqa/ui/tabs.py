"""What one browser tab has in flight, beside its session: the document being read (how far, then the session it gave),
the questions asked meanwhile (waiting their turn, in order) and whether an answer is being written. A question asked
while a document or a model loads waits for it instead of being refused; Stop withdraws the questions still waiting.
Keyed by Gradio's session hash; no component here."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import gradio as gr

from kvqa.documents.reading import Part


@dataclass
class Read:
    """A read in flight: how far it is (fraction, what it does now, said in the page's language), then the session it
    gave (None when it failed)."""

    fraction: float = 0.0
    stage: str = ""
    session: object | None = None  # a kvqa.session.session.Session, once read
    done: threading.Event = field(default_factory=threading.Event)
    forward: Callable[..., None] = lambda fraction, desc=None: None  # the handler's gr.Progress

    def report(self, fraction: float, desc: str | None = None) -> None:
        """How far the read is: recorded for the questions waiting, and shown by the read's own handler."""
        self.fraction, self.stage = fraction, desc or self.stage
        self.forward(fraction, desc=desc)


@dataclass
class Waiting:
    """A question asked and not yet answered; `withdrawn` once Stop was pressed before its answer began."""

    question: str
    part: Part | None = None  # from this part of a long document (one of Session.parts), else routed
    withdrawn: bool = False


class Tab:
    """One browser tab's work in flight. Handlers of the same tab run in different threads: every change holds the
    lock."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.read: Read | None = None  # the read in flight, if any
        self.waiting: deque[Waiting] = deque()  # asked, not yet taken by an answer, oldest first
        self.taken: Waiting | None = None  # the question an answer handler took and waits or writes for
        self.answering = False  # an answer is being written into the chat now
        self.lang = "en"  # the language the page is shown in
        self.expected = 0  # reads asked for whose handler has not begun (another tab's read goes first)

    def expect(self) -> None:
        """A read was asked for: questions asked now wait for it."""
        with self._lock:
            self.expected += 1

    def begin(self) -> None:
        """A read's handler begins (it reads, or refuses): no longer only expected."""
        with self._lock:
            self.expected = max(0, self.expected - 1)

    @property
    def coming(self) -> bool:
        """A read is in flight or asked for: a question asked now waits for it."""
        return self.read is not None or self.expected > 0

    @contextmanager
    def reading(self, progress: Callable[..., None]) -> Iterator[Read]:
        """Register a read for the questions asked meanwhile; yields it (read.report(fraction, desc=...) forwards to
        `progress` and records how far it is). Set read.session before leaving; the read ends on leaving."""
        read = Read(forward=progress)
        with self._lock:
            self.read = read
        try:
            yield read
        finally:
            with self._lock:
                if self.read is read:
                    self.read = None
            read.done.set()

    def ask(self, question: str, *, part: Part | None = None) -> Waiting:
        """Queue a question behind the ones already waiting."""
        waiting = Waiting(question, part)
        with self._lock:
            self.waiting.append(waiting)
        return waiting

    def take(self) -> Waiting | None:
        """The oldest waiting question, now this handler's to answer (None: none is waiting, Stop withdrew them)."""
        with self._lock:
            self.taken = self.waiting.popleft() if self.waiting else None
            return self.taken

    def done(self, waiting: Waiting) -> None:
        """The taken question was answered (or given up)."""
        with self._lock:
            if self.taken is waiting:
                self.taken = None

    def withdraw(self) -> int:
        """Stop: withdraw every question not yet being answered; how many were withdrawn."""
        with self._lock:
            withdrawn = list(self.waiting)
            if self.taken is not None and not self.answering:
                withdrawn.append(self.taken)
            self.waiting.clear()
            for waiting in withdrawn:
                waiting.withdrawn = True
            return len(withdrawn)

    def queued(self, *, taken: bool = False) -> list[Waiting]:
        """The questions waiting, oldest first; taken: the one an answer handler took first (while it waits for a
        read)."""
        with self._lock:
            first = [self.taken] if taken and self.taken is not None else []
            return first + list(self.waiting)


class Tabs:
    """Every open tab's Tab, by Gradio's session hash; a call without one (a handler called directly) gets its own."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._tabs: dict[str, Tab] = {}

    def of(self, request) -> Tab:
        key = getattr(request, "session_hash", None)
        if key is None:
            return Tab()
        with self._lock:
            return self._tabs.setdefault(key, Tab())

    def forget(self, request: gr.Request = None) -> None:
        """The tab closed (Blocks.unload): forget what it had in flight (its session expires with its state)."""
        with self._lock:
            self._tabs.pop(getattr(request, "session_hash", None), None)
