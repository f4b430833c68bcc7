"""A question's evidence and its part of a long document. Evidence.of() scores the question against the whole
document's passages once (BM25: kvqa.evidence.sources.rank); the part it goes to is the part holding most of its
best-matching passages, and another part that matches it too is named to the user."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass

import numpy as np

from kvqa.documents.parts import offsets, span_of
from kvqa.documents.reading import Document
from kvqa.evidence.sources import Ranking, best_sentence, rank, ranked_passages

ROUTE_PASSAGES = 5  # a question goes to the part holding most of its best-matching passages, best first
ROUTE_THRESHOLD = 0.8  # ... of those scoring at least this share of the best (docs/quality.md)
ALSO_MATCHES = 0.5  # another part scoring at least this share of the chosen one's is named to the user
ELSEWHERE_SHARE = 0.5  # a passage outside the part read, scoring at least this share of the best, is quoted too
BRIDGE_FROM = 2  # the second hop follows the names in the question's best passages, this many of them


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
    document's passages (one scoring), from which its part, its quotes and its answer's sources are all read. For a
    long document read in parts, the passages its part's cache cannot see are quoted beside it (elsewhere), and its
    sources, from every part, say which part each lies in (part_at)."""

    document: Document  # the whole document, as loaded
    ranking: Ranking
    parts: tuple[tuple[int, int], ...] = ()  # each part's [start, end) in the document's text; () when one part

    @classmethod
    def of(cls, document: Document, question: str, parts: Sequence[tuple[int, int, int]] = ()) -> Evidence:
        """parts: the document's parts as units (first, last, tokens), when it is read in more than one."""
        spans = tuple(offsets(document, first, last) for first, last, _ in parts) if len(parts) > 1 else ()
        return cls(document, rank(document.text, question), spans)

    def route(self, parts: Sequence[tuple[int, int, int]], *, current: int = 0,
              among=None) -> tuple[int, int | None]:
        """The part the question goes to, and another that matches it too (kvqa.evidence.routing.route)."""
        return route(self.ranking, self.document, parts, current=current, among=among)

    def part_at(self, offset: int, read: Document | None = None) -> int | None:
        """The part (1-based) holding the character at `offset` of the document's text: the part read when it is one
        of them (neighbours share a paragraph), else the first; None when the document is one part."""
        holding = [n for n, (start, end) in enumerate(self.parts, start=1) if start <= offset < end]
        if not holding:
            return None
        part = read.part if read is not None else None
        if part is not None:
            span = offsets(self.document, part.first, part.last)
            return next((n for n in holding if self.parts[n - 1] == span), holding[0])
        return holding[0]

    def elsewhere(self, read: Document, chosen: Collection[int] = ()) -> tuple[tuple[int, str, float], ...]:
        """The passages a question's turn quotes besides its best ones (`chosen`, by number) when only a part of a
        long document is read: the ones the part's cache cannot see. The best-matching passage outside the part
        (scoring at least ELSEWHERE_SHARE of the best), and the second hop: the passage outside it that best names
        what the question's best passages name that the question does not (Ranking.bridged), with the question's own
        score as a tie-break. (passage number, text as quoted, score), at most two; () when the whole is read."""
        if not self.parts or read.text == self.document.text:
            return ()
        ranking, (start, end) = self.ranking, span_of(self.document, read)
        outside = [i for i, (a, b) in enumerate(ranking.spans)
                   if not start <= (a + b) // 2 < end and i not in chosen and ranking.text[a:b].strip()]
        if not outside or float(ranking.scores.max(initial=0.0)) <= 0:
            return ()
        best = float(ranking.scores.max())
        found = []
        first = max(outside, key=lambda i: ranking.scores[i])
        if ranking.scores[first] >= ELSEWHERE_SHARE * best:
            found.append(first)
        hop = np.zeros(len(ranking.spans))
        for i in ranked_passages(ranking.scores)[:BRIDGE_FROM]:
            hop = np.maximum(hop, ranking.bridged(i))
        if hop.max(initial=0.0) > 0:
            tie = ranking.scores / best
            second = max((i for i in outside if i not in found), key=lambda i: hop[i] / hop.max() + 0.5 * tie[i],
                         default=None)
            if second is not None and hop[second] > 0:
                found.append(second)
        return tuple((i, ranking.quoted(i), float(ranking.scores[i])) for i in found)


    def within(self, read: Document) -> Ranking:
        """The ranking over what was read: the whole document, or the part of it that is (offsets into its text)."""
        if read.text == self.document.text:
            return self.ranking
        return self.ranking.within(*span_of(self.document, read), read.text)

    def read_from(self, read: Document) -> tuple[Ranking, Document]:
        """Where a question's quotes and sources come from: the whole document when it is read in parts (every
        part's passages; offsets into the whole text), else what was read (a range the user chose: only it)."""
        if self.parts:
            return self.ranking, self.document
        return self.within(read), read
