"""A question's part of a long document: the part holding most of the question's best-matching passages (BM25, over
the whole document), and another part that matches it too, named to the user."""

from __future__ import annotations

from collections.abc import Collection, Sequence

from kvqa.documents.parts import offsets
from kvqa.documents.reading import Document
from kvqa.evidence.sources import Ranking, best_sentence

ROUTE_PASSAGES = 5  # a question goes to the part holding most of its best-matching passages, best first
ROUTE_THRESHOLD = 0.8  # ... of those scoring at least this share of the best (docs/quality.md)
ALSO_MATCHES = 0.5  # another part scoring at least this share of the chosen one's is named to the user


def passage_shares(ranking: Ranking, document: Document,
                   parts: Sequence[tuple[int, int, int]]) -> list[tuple[float, list[float]]]:
    """The document's passages best matching the question (its Ranking over the whole document), as (BM25 points,
    the share of the passage inside each part): the best ROUTE_PASSAGES scoring at least ROUTE_THRESHOLD of the best
    one, each placed by its best-matching sentence (a passage may run over a paragraph two parts share).
    Near-duplicates below the threshold cannot outvote the best passage (a document repeating a sentence with one
    word changed)."""
    spans = [offsets(document, a, b) for a, b, _ in parts]
    found = ranking.best(ROUTE_PASSAGES)
    shares = []
    for start, end, points in found:
        if points < ROUTE_THRESHOLD * found[0][2]:
            break
        start, end = best_sentence(document.text, start, end, ranking.question) or (start, end)
        shares.append((points, [max(0, min(end, b) - max(start, a)) / max(end - start, 1) for a, b in spans]))
    return shares


def part_scores(shares: list[tuple[float, list[float]]], count: int) -> list[float]:
    """How well each of `count` parts holds the best-matching passages (passage_shares): their points, shared."""
    return [sum(points * share[i] for points, share in shares) for i in range(count)]


def route(ranking: Ranking, document: Document, parts: Sequence[tuple[int, int, int]], *, current: int = 0,
          among: Collection[int] | None = None) -> tuple[int, int | None]:
    """The index of the part scoring best for the question (part_scores; `current` when it scores as well as any, or
    nothing matches), and the other part that matches it too (also_matching), or None. among: only these parts may
    be chosen (the ones ready), the best of them. ranking: the question's, over the whole document."""
    if len(parts) < 2:
        return 0, None
    shares = passage_shares(ranking, document, parts)
    chosen = best_part(part_scores(shares, len(parts)), current=current, among=among)
    return chosen, also_matching(shares, chosen)


def best_part(scores: Sequence[float], *, current: int = 0, among: Collection[int] | None = None) -> int:
    """route()'s choice on scores already computed."""
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
