"""Whether this process is answering a question now, for work that can wait (the store writing a cache).

An answer's kernels use every core and every byte a second of memory they can get; a cache written beside it (a
take-over model's, right after its read: hashing and copying hundreds of MiB) made its first token 0.49 -> 0.70-0.82 s
at 5k tokens (2026-12-07, the 2-core EPYC). So background work asks `wait_until_quiet()` between its pieces, and
answers run inside `answering()`.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager

_quiet = threading.Condition()
_answers = 0  # answers running now


@contextmanager
def answering() -> Iterator[None]:
    """Count an answer as running for the duration of the block."""
    global _answers
    with _quiet:
        _answers += 1
    try:
        yield
    finally:
        with _quiet:
            _answers -= 1
            _quiet.notify_all()


def wait_until_quiet(timeout: float) -> bool:
    """Wait until no answer runs (at most `timeout` seconds: an answer's generator left open must not hold work back
    for ever); True when none does."""
    with _quiet:
        return _quiet.wait_for(lambda: _answers == 0, timeout=timeout)
