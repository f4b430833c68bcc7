"""A long document's question and its part: the part it goes to is the part holding most of its best-matching
passages (placed by their best sentence: kvqa.evidence.sources.Ranking.placed), and another part that matches it
too is named to the user. Maths on the passages found, given them: kvqa.evidence.evidence.Evidence.route calls it."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

ROUTE_PASSAGES = 5  # a question goes to the part holding most of its best-matching passages, best first
ROUTE_THRESHOLD = 0.8  # ... of those scoring at least this share of the best (docs/quality.md)
ALSO_MATCHES = 0.5  # another part scoring at least this share of the chosen one's is named to the user


@dataclass(frozen=True)
class Routed:
    """Where a question goes among a long document's parts: the part read for it (target), the one that matched it
    best, and another that matched it too (also), as indexes into the parts."""

    target: int
    best: int
    also: int | None = None


def route(placed: Sequence[tuple[float, int, int]], spans: Sequence[tuple[int, int]], *, current: int = 0,
          ready: Collection[int] = ()) -> Routed:
    """The part a question goes to, given its best-matching passages as (BM25 points, start, end) in the document's
    text (Ranking.placed) and each part's [start, end) there (spans): the part scoring best (part_scores; `current`
    when it scores as well as any, or nothing matches), and another that matches it too (also_matching). ready: the
    parts to be had without reading one; when the best is not among them, the best of them is the target."""
    if len(spans) < 2:
        return Routed(0, 0)
    shares = passage_shares(placed, spans)
    scores = part_scores(shares, len(spans))
    best = best_part(scores, current=current)
    target = best_part(scores, current=current, among=ready) if ready and best not in ready else best
    return Routed(target, best, also_matching(shares, target))


def passage_shares(placed: Sequence[tuple[float, int, int]],
                   spans: Sequence[tuple[int, int]]) -> list[tuple[float, list[float]]]:
    """Each placed passage as (its points, the share of it inside each part). A passage may run over a paragraph two
    parts share."""
    return [(points, [max(0, min(end, b) - max(start, a)) / max(end - start, 1) for a, b in spans])
            for points, start, end in placed]


def part_scores(shares: list[tuple[float, list[float]]], count: int) -> list[float]:
    """How well each of `count` parts holds the best-matching passages (passage_shares): their points, shared."""
    return [sum(points * share[i] for points, share in shares) for i in range(count)]


def best_part(scores: Sequence[float], *, current: int = 0, among: Collection[int] | None = None) -> int:
    """route()'s choice on the scores of the parts (part_scores): the best (of `among`, when given)."""
    allowed = range(len(scores)) if among is None else sorted(among)
    best = max(scores[i] for i in allowed)
    if current in allowed and scores[current] >= best - 1e-9:
        return current
    return next(i for i in allowed if scores[i] == best)


def also_matching(shares: list[tuple[float, list[float]]], chosen: int) -> int | None:
    """Another part that also matches the question with passages the chosen part lacks (their points at least
    ALSO_MATCHES of the chosen part's), the best such, or None. A question asked in words several parts share may
    have its answer there (how often: docs/quality.md, "Long documents")."""
    if not shares:
        return None
    own = sum(points * share[chosen] for points, share in shares)
    elsewhere = [sum(points * share[i] * (1 - share[chosen]) for points, share in shares)
                 for i in range(len(shares[0][1]))]
    best = max((i for i in range(len(elsewhere)) if i != chosen), key=lambda i: elsewhere[i], default=None)
    return best if best is not None and elsewhere[best] > 0 and elsewhere[best] >= ALSO_MATCHES * own else None
