"""What the engines hand back: a prefilled document, an answer, and the stream an answer arrives in."""

from __future__ import annotations

import threading
from collections.abc import Generator, Iterator
from dataclasses import dataclass, field

from .documents import Document
from .prompt import ChatPrompt
from .sources import Source
from .timing import Timings


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
    unsupported: tuple[str, ...] = ()  # numbers and names in the answer that the document lacks (kvqa.support)


class AnswerStream:
    """An answer as it is produced: iterate it for text pieces; `.answer` is the finished Answer (it finishes the
    stream first if needed). Closing it early (Stop, a client gone) ends the answer and rolls the cache back."""

    def __init__(self, pieces: Generator[str, None, Answer]):
        self._pieces = pieces  # yields text pieces, returns the Answer
        self._answer: Answer | None = None
        self._iterator = self._run()

    def _run(self) -> Iterator[str]:
        self._answer = yield from self._pieces

    def __iter__(self) -> Iterator[str]:
        return self

    def __next__(self) -> str:
        return next(self._iterator)

    @property
    def answer(self) -> Answer:
        for _ in self:
            pass
        assert self._answer is not None, "the stream was closed before it finished"
        return self._answer

    def close(self) -> None:
        self._iterator.close()
        self._pieces.close()

    def __enter__(self) -> AnswerStream:
        return self

    def __exit__(self, *exc) -> None:
        self.close()


@dataclass(eq=False)
class PrefilledDocument:
    """A document read once: its prefix ids and the engine's cache of them, ready for any number of questions.
    Mutable on purpose: the cache is written in place by each answer and rolled back; `lock` lets one answer at a
    time use it."""

    document: Document
    prompt: ChatPrompt | None  # the template split around document and question, with the date fixed at prefill
    #                            (None for a serving engine, which applies its own template)
    ids: tuple[int, ...]  # the prefix token ids the cache was computed from; never re-tokenized (a serving engine: ())
    cache: object  # the engine's cache (a KVCache for local engines): len(ids) tokens plus a reserve; a serving
    #                engine's is on the server, and this is what re-finds it there
    cache_bytes: int  # what the cache holds in memory, its reserve included
    prefill_s: float
    model_name: str
    max_question_tokens: int
    max_new_tokens: int
    cache_source: str = "prefill"  # how the cache was had: "prefill" (read now), "disk" (restored from the store),
    #                                "memory" (shared with another session); prefill_s is what that took
    read_s: float | None = None  # a restored cache: what reading the document took when it was made (None: unknown)
    token_count: int | None = None  # a serving engine: the prefix's tokens as the server counted them (no ids here)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    turn: threading.Lock = field(default_factory=threading.Lock, repr=False)  # sessions sharing it take turns

    @property
    def tokens(self) -> int:
        return len(self.ids) if self.token_count is None else self.token_count

    @property
    def first_read_s(self) -> float | None:
        """What reading the document took when its cache was made: prefill_s for one read now, the stored time for
        one restored from disk (None when the file did not record it)."""
        return self.prefill_s if self.cache_source == "prefill" else self.read_s

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.prefill_s if self.prefill_s > 0 else 0.0

    def __getstate__(self) -> dict:  # crosses the ZeroGPU process boundary: everything but the locks
        return {k: v for k, v in self.__dict__.items() if k not in ("lock", "turn")}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, lock=threading.Lock(), turn=threading.Lock())
