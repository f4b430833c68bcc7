"""A better model reading behind a faster one: on a CPU, where the model that answers best would keep a reader
waiting (its read estimated past STAND_IN_S), a faster model that reads the document's languages reads it first and
answers at once (the stand-in); the better model reads the same document in the background, in a session of its own,
pausing between its chunks while the stand-in answers, and takes over once its read is done: the chat goes on there
(its turns carried over), each earlier answer still labelled with the model that gave it.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field

from kvqa.errors import KvqaError
from kvqa.languages import languages_needed
from kvqa.messages import Message
from kvqa.model.offline import OfflineModel, installed_models, offline_model
from kvqa.model.presets import ROOM_AROUND, estimated_tokens
from kvqa.session.session import Session

STAND_IN_S = 20.0  # a read estimated longer than this on a CPU is answered meanwhile by a faster model
FASTER = 3.0  # the stand-in reads at least this many times as fast as the better model


class _Cancelled(Exception):
    """The stand-in's session closed or read another document: the read behind it stops."""


@dataclass
class TakeOver:
    """The better model's read behind a stand-in: how far it is, then its session (or why it failed)."""

    model: str  # the better model, reading behind
    reason: Message  # why it reads this document (kvqa.model.presets.reading_model)
    stand_in: str  # the faster model answering meanwhile
    estimate: float | None = None  # seconds the read behind was estimated to take, before it began
    fraction: float = 0.0  # how far its read is
    session: Session | None = None  # its session, once its read succeeded
    error: KvqaError | None = None  # why it failed, if it did
    done: threading.Event = field(default_factory=threading.Event)

    @property
    def ready(self) -> bool:
        return self.done.is_set() and self.session is not None


def stand_in_for(model: str, text: str, *, cache_dir, offered: list[str], seconds: Callable[[OfflineModel, int], float],
                 cuda: bool = False, page_lang: str | None = None) -> str | None:
    """The offered offline model that answers while `model` reads `text` on a CPU: one that reads the languages its
    reader needs (kvqa.languages.languages_needed, as the model's choice asks) and holds the text whole, reading it
    at least FASTER times as fast (seconds(model, tokens): a read's estimate here), the best of those
    (OfflineModel.rank); None on a GPU, for a read estimated under STAND_IN_S, or when none is faster."""
    best = offline_model(model)
    if best is None or cuda:
        return None
    tokens = estimated_tokens(text)
    if seconds(best, tokens) < STAND_IN_S:
        return None
    languages = set(languages_needed(text, page_lang=page_lang))
    faster = [m for m in installed_models(cache_dir) if m is not best and m.name in offered
              and languages <= set(m.languages) and tokens + ROOM_AROUND <= m.context
              and FASTER * seconds(m, tokens) <= seconds(best, tokens)]
    return max(faster, key=lambda m: m.rank).name if faster else None


def read_behind(take: TakeOver, stand_in: Session, make_session: Callable[[], Session]) -> None:
    """Read the stand-in's document into a new session (make_session()) of the better model, pausing between chunks
    while the stand-in answers, and record it in `take` (or the error); stops when the stand-in closes or reads
    another document. Runs in a thread of its own."""
    fresh, document = None, stand_in.whole

    def progress(fraction: float) -> None:
        take.fraction = fraction
        while stand_in.answering or stand_in.lock.locked:  # its question first: two on two cores slow both
            if stand_in.closed or stand_in.whole is not document:
                raise _Cancelled
            time.sleep(0.05)
        if stand_in.closed or stand_in.whole is not document:
            raise _Cancelled

    try:
        fresh = make_session()
        fresh.load(document, progress=progress)
        take.session, fresh = fresh, None
    except _Cancelled:
        pass
    except KvqaError as e:
        take.error = e
    finally:
        if fresh is not None:
            fresh.close()
        take.done.set()
