"""A question's evidence and its part of a long document. Evidence.of() scores the question against the whole
document's passages once (BM25: kvqa.evidence.sources.rank); the part it goes to is the part holding most of its
best-matching passages, and another part that matches it too is named to the user."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

from kvqa.documents.parts import offsets, span_of
from kvqa.documents.reading import Document
from kvqa.evidence.sources import Ranking, best_sentence, rank

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


@dataclass(frozen=True)
class Evidence:
    """What the document says about one question, found once per answer: the question's BM25 scores over the whole
    document's passages (one scoring), from which its part, its quotes and its answer's sources are all read."""

    document: Document  # the whole document, as loaded
    ranking: Ranking

    @classmethod
    def of(cls, document: Document, question: str) -> Evidence:
        return cls(document, rank(document.text, question))

    def route(self, parts: Sequence[tuple[int, int, int]], *, current: int = 0,
              among=None) -> tuple[int, int | None]:
        """The part the question goes to, and another that matches it too (kvqa.evidence.routing.route)."""
        return route(self.ranking, self.document, parts, current=current, among=among)

    def within(self, read: Document) -> Ranking:
        """The ranking over what was read: the whole document, or the part of it that is (offsets into its text)."""
        if read.text == self.document.text:
            return self.ranking
        return self.ranking.within(*span_of(self.document, read), read.text)
