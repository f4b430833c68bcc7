"""What the engines hand back: a prefilled document, an answer, and the stream an answer arrives in."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from kvqa.documents.reading import Document
from kvqa.errors import BusyError
from kvqa.evidence.sources import Source, excerpt

from .prompt import Prompt
from .timing import Timings

if TYPE_CHECKING:
    from kvqa.model.kv_cache import KVCache


@dataclass(frozen=True)
class QuestionTurn:
    """A question as an engine receives it, the turn appended to the document's cache (kvqa.session.ask builds it): its
    text, the earlier turns it follows up on, and the document's passages that best match it (BM25's, found once per
    answer), which its turn quotes."""

    text: str
    history: tuple[tuple[str, str], ...] = ()  # earlier (question, answer) turns, read after the document
    passages: tuple[tuple[int, str, float], ...] = ()  # (passage number, text, BM25 score), best first
    max_new_tokens: int | None = None  # the answer's limit; None: the document's (PrefilledDocument.max_new_tokens)
    elsewhere: tuple[tuple[int, str, float], ...] = ()  # passages of a long document outside the part read, quoted
    #                                                  after the best ones (kvqa.evidence.evidence.Evidence.elsewhere)

    def quotes(self, n: int, order: Sequence[int] | None = None, *, chars: int = 0) -> list[str]:
        """The first n passages' texts, to quote in the question's turn; with `order` (passage numbers, best first,
        from a reranker: kvqa.generation.rerank), its first n instead; then the passages elsewhere. chars > 0: each
        cut to its sentences that best match the question, at most that long (kvqa.evidence.sources.excerpt)."""
        if n <= 0:
            return []
        texts = {i: text for i, text, _ in self.passages}
        chosen = order[:n] if order else [i for i, _, _ in self.passages[:n]]
        elsewhere = [text for i, text, _ in self.elsewhere if i not in chosen]
        return [excerpt(text, self.text, chars) for text in [texts[i] for i in chosen] + elsewhere]


@dataclass(frozen=True)
class Answer:
    """One question's answer and what it cost."""

    question: str
    text: str
    token_ids: tuple[int, ...]
    timings: Timings
    stop_reason: str  # "eos" (the model finished), "length" (max new tokens reached), "repeating" (it looped),
    #                  or "stopped" (by the user)
    used_cache: bool
    sources: tuple[Source, ...] = ()  # the document's passages the answer relies on, best first
    short: str = ""  # the shortest phrase of it that answers (kvqa.evidence.short); "" when none stands out
    unsupported: tuple[str, ...] = ()  # numbers and names in the answer that the document lacks (kvqa.evidence.support)
    unquoted: tuple[str, ...] = ()  # numbers in the answer the document has but not the passage its turn quoted
    quoted: tuple[str, ...] = ()  # the passages its turn quoted (kvqa.config.Decoding.quote_passages), as quoted
    order: tuple[int, ...] | None = None  # the passages as the model reordered them (kvqa.generation.rerank), best
                                          # first; None:
    #                                       BM25's order. The answer's sources follow it


def close_events(events: Iterator) -> None:
    """End an iterator early when it can be ended (a generator runs its clean-up now, not when collected); a plain
    iterator has nothing to end."""
    end = getattr(events, "close", None)
    if end is not None:
        end()


class AnswerStream:
    """An answer as it is produced. Every engine's answer is one stream of events: text pieces (str), then, last, the
    finished Answer (as mlx-lm's stream_generate ends with its response). Iterate this for the text pieces; `.answer`
    is the finished Answer (it finishes the stream first if needed); `.events()` passes both on. When the Answer
    arrives the producer is closed, so its clean-up (the cache's rollback, its locks) is done before anyone reads it.
    Closing the stream early (Stop, a client gone) ends the answer and rolls the cache back."""

    def __init__(self, events: Iterator[str | Answer]):
        self._events = events
        self._answer: Answer | None = None

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        if self._answer is None:
            event = next(self._events)  # StopIteration here: it ended (or was closed) without an Answer
            if not isinstance(event, Answer):
                return event
            self._answer = event
            self.close()
        raise StopIteration

    @property
    def answer(self) -> Answer:
        for _ in self:
            pass
        if self._answer is None:
            raise RuntimeError("the answer's stream was closed before it finished")
        return self._answer

    def events(self) -> Iterator[str | Answer]:
        """The text pieces, then the Answer: for a layer that hands the answer on (a session, a GPU process)."""
        with self:
            yield from self
            yield self.answer

    def close(self) -> None:
        close_events(self._events)

    def __enter__(self) -> AnswerStream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass(frozen=True)
class ServerPrefix:
    """A serving engine's cache, as this side holds it: the message that re-finds the prefix on the server."""

    system: str  # the system message, byte for byte what every question sends
    prompt_tokens: int  # the prefill's prompt as the server counted it (the template's tokens included)
    cached_tokens: int | None = None  # of those, the ones the server already had (None: it did not say)


@dataclass(eq=False)
class PrefilledDocument:
    """A document read once: its prefix ids and the engine's cache of them, ready for any number of questions.
    Mutable on purpose: the cache is written in place by each answer and rolled back; `lock` lets one answer at a
    time use it."""

    document: Document
    prompt: Prompt | None  # the template split around document and question, with the date fixed at prefill
    #                            (None for a serving engine, which applies its own template)
    ids: tuple[int, ...]  # the prefix token ids the cache was computed from; never re-tokenized (a serving engine: ())
    cache: KVCache | ServerPrefix | None  # a model in this process (local, ZeroGPU): its KVCache, len(ids) tokens
    #    plus a reserve; a serving engine: the ServerPrefix that re-finds it on the server; None only while a
    #    ZeroGPU answer's document crosses to the GPU without it (the cache travels as a store file)
    cache_bytes: int  # what the cache holds in memory, its reserve included
    prefill_s: float
    model_name: str
    max_question_tokens: int
    max_new_tokens: int
    origin: str = "prefill"  # how the cache was had: "prefill" (read now), "disk" (restored from the store),
    #                                "memory" (shared with another session); prefill_s is what that took
    read_s: float | None = None  # a restored cache: what reading the document took when it was made (None: unknown)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    turn: threading.Lock = field(default_factory=threading.Lock, repr=False)  # sessions sharing it take turns

    @contextmanager
    def taken(self, *, should_stop: Callable[[], bool]) -> Iterator[None]:
        """This cache's turn: wait while another session that shares it answers on it (should_stop() ends the wait
        with BusyError)."""
        while not self.turn.acquire(timeout=0.05):
            if should_stop():
                raise BusyError("busy.stopped_before")
        try:
            yield
        finally:
            self.turn.release()

    @property
    def read_line(self) -> str:
        """How the cache was had, in a line for people (`kvqa ask`)."""
        size = f"cache {self.cache_bytes / 2**20:,.1f} MiB"
        if self.origin == "disk":
            first = f" (first read in {self.read_s:.2f} s)" if self.read_s is not None else ""
            return f"restored {self.tokens:,} tokens from the store in {self.prefill_s:.2f} s{first}, {size}"
        rate = f"{self.tokens_per_s:,.0f} tokens/s"
        return f"\rprefilled {self.tokens:,} tokens in {self.prefill_s:.2f} s ({rate}), {size}"

    @property
    def tokens(self) -> int:
        return self.cache.prompt_tokens if isinstance(self.cache, ServerPrefix) else len(self.ids)

    @property
    def first_read_s(self) -> float | None:
        """What reading the document took when its cache was made: prefill_s for one read now, the stored time for
        one restored from disk (None when the file did not record it)."""
        return self.prefill_s if self.origin == "prefill" else self.read_s

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.prefill_s if self.prefill_s > 0 else 0.0

    def __getstate__(self) -> dict:  # crosses the ZeroGPU process boundary: everything but the locks
        return {k: v for k, v in self.__dict__.items() if k not in ("lock", "turn")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, lock=threading.Lock(), turn=threading.Lock())
