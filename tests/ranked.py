"""A question ranked on a text and read at once: shorthands the tests use for a Ranking's reads
(kvqa.evidence.sources.rank, then best, candidates, quotes or sources). kvqa itself ranks a question once and reads
the Ranking it keeps (kvqa.evidence.evidence.Evidence)."""

from __future__ import annotations

from collections.abc import Sequence

from kvqa.evidence.sources import Source, rank


def evidence(text: str, question: str, *, limit: int = 1) -> list[tuple[int, int]]:
    """(start, end) of the `limit` passages that best match the question, best first, leading space and page markers
    trimmed; fewer (or none) when fewer share a word with it."""
    return [(start, end) for start, end, _ in rank(text, question).best(limit)]


def candidates(text: str, question: str, *, limit: int) -> list[tuple[int, str, float]]:
    """Ranking.candidates() of the question on the text."""
    return rank(text, question).candidates(limit)


def quotes(text: str, question: str, n: int, order: Sequence[int] | None = None, *, chars: int = 0) -> list[str]:
    """Ranking.quotes() of the question on the text."""
    return rank(text, question).quotes(n, order, chars=chars)


def find_sources(text: str, answer: str, question: str = "", *, pages: bool = False, limit: int = 3,
                 order: Sequence[int] | None = None) -> list[Source]:
    """Ranking.sources() of the question on the text."""
    return rank(text, question).sources(answer, pages=pages, limit=limit, order=order)
