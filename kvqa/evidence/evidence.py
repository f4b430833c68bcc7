"""A question's evidence: what the document says about it, found once per answer. Evidence.of() scores the question
against the whole document's passages once (BM25: kvqa.evidence.sources.rank); its part of a long document
(kvqa.evidence.routing), its turn's quotes and its answer's sources are all read from that one scoring."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from itertools import zip_longest

import numpy as np

from kvqa.documents.parts import offsets
from kvqa.documents.reading import Document
from kvqa.evidence.routing import ROUTE_PASSAGES, ROUTE_THRESHOLD, Routed, route
from kvqa.evidence.sources import Ranking, Source, rank, ranked_passages

ELSEWHERE_SHARE = 0.5  # a passage outside the part read, scoring at least this share of the best, is quoted too
BRIDGE_FROM = 2  # the second hop follows the names in the question's best passages, this many of them


@dataclass(frozen=True)
class Evidence:
    """What the document says about one question, found once per answer: the question's BM25 scores over the whole
    document's passages (one scoring), from which its part (route), its quotes (turn) and its answer's sources
    (sources) are all read. For a long document read in parts, the passages its part's cache cannot see are quoted
    beside it (elsewhere), and its sources, from every part, say which part each lies in (part_at). on(read) says
    what was read for the answer: the document, or one part of it."""

    document: Document  # the whole document, as loaded
    ranking: Ranking
    read: Document  # what the answer's cache holds (on()): the document, or a part of it
    parts: tuple[tuple[int, int], ...] = ()  # each part's [start, end) in the document's text; () when one part
    held: tuple[tuple[int, int, int], ...] = ()  # a composed read: the runs of the document it holds, as [start,
    #                                              end) in its text and the part (index) each was taken from

    @classmethod
    def of(cls, document: Document, question: str, parts: Sequence[tuple[int, int, int]] = ()) -> Evidence:
        """parts: the document's parts as units (first, last, tokens), when it is read in more than one."""
        spans = tuple(offsets(document, first, last) for first, last, _ in parts) if len(parts) > 1 else ()
        return cls(document, rank(document.text, question), document, spans)

    def on(self, read: Document, held: Sequence[tuple[int, int, int]] | None = None) -> Evidence:
        """This evidence for an answer from `read`'s cache: the document, the part of it read for the question, or
        (held given) runs of several parts composed into one cache (gathered); held None keeps what it was."""
        return replace(self, read=read, held=self.held if held is None else tuple(held))

    def gathered(self, chars: int) -> list[tuple[int, int]]:
        """The passages a question's composed cache holds, as [start, end) in the document's text, in its order: its
        best-matching passages and, alternately, the passages that best name what the best BRIDGE_FROM of them name
        (the second hop: Ranking.bridged), until `chars` characters. Each runs on over the blank space after it to
        the next passage, so that runs join as paragraphs do."""
        ranking = self.ranking
        order = ranked_passages(ranking.scores)
        hop = np.zeros(len(ranking.spans))
        for i in order[:BRIDGE_FROM]:
            hop = np.maximum(hop, ranking.bridged(i))
        hops = [int(i) for i in np.argsort(-hop, kind="stable") if hop[i] > 0]
        chosen, used = set(), 0
        for i in (i for pair in zip_longest(order, hops) for i in pair if i is not None):
            if i in chosen:
                continue
            start, end = self._run(i)
            if used + end - start > chars:
                break
            chosen.add(i)
            used += end - start
        return [self._run(i) for i in sorted(chosen)]

    def _run(self, i: int) -> tuple[int, int]:
        """Passage i's [start, end), on over the blank space after it."""
        spans, text = self.ranking.spans, self.ranking.text
        start, end = spans[i]
        after = spans[i + 1][0] if i + 1 < len(spans) else len(text)
        return start, after if not text[end:after].strip() else end

    @property
    def span(self) -> tuple[int, int]:
        """Where what was read lies in the document's text."""
        return self.read.span

    def route(self, *, current: int = 0, ready: Collection[int] = ()) -> Routed:
        """The part the question goes to, and another that matches it too (kvqa.evidence.routing.route: by the
        parts' shares of its best-matching passages). ready: the parts to be had without reading one; when the best
        is not among them, the best of them is the target."""
        if len(self.parts) < 2:
            return Routed(0, 0)
        return route(self.ranking.placed(ROUTE_PASSAGES, ROUTE_THRESHOLD), self.parts, current=current, ready=ready)

    def turn(self, passages: int, *, elsewhere: bool = True) -> tuple[tuple[tuple[int, str, float], ...], ...]:
        """What the question's turn quotes, as (passage number, text, score): its `passages` best passages (of every
        part, when the document is read in parts), and the passages elsewhere that the part's cache cannot see
        (elsewhere(); none when `elsewhere` is False)."""
        outside = self.elsewhere(passages) if elsewhere else ()
        return tuple((self.ranking if self.parts else self._within()).candidates(passages)), outside

    def sources(self, answer: str, order: Sequence[int] | None = None) -> tuple[list[Source], Ranking, Document]:
        """The passages the answer relies on (Ranking.sources; in the model's order when it reranked them), and the
        ranking and text they were found in: the whole document's when it is read in parts (every part's passages,
        each naming its part; offsets into the whole text), else what was read (a range the user chose: only it)."""
        ranking, document = (self.ranking, self.document) if self.parts else (self._within(), self.read)
        part = document.part
        found = ranking.sources(answer, pages=document.pages is not None, order=order,
                                first_page=part.pages[0] if part is not None and part.pages else 1)
        if self.parts:
            found = [replace(s, part=self.part_at(s.start)) for s in found]
        return found, ranking, document

    def part_at(self, offset: int) -> int | None:
        """The part (1-based) holding the character at `offset` of the document's text: the part read when it is one
        of them (neighbours share a paragraph), else the first; None when the document is one part."""
        holding = [n for n, (start, end) in enumerate(self.parts, start=1) if start <= offset < end]
        if not holding:
            return None
        if self.held:  # a composed read: the part its run there was taken from
            return next((part + 1 for start, end, part in self.held if start <= offset < end), holding[0])
        (start, end), read = self.span, lambda n: self.parts[n - 1][0] <= start and end <= self.parts[n - 1][1]
        return next((n for n in holding if read(n)), holding[0])

    def elsewhere(self, passages: int = 0) -> tuple[tuple[int, str, float], ...]:
        """The passages a question's turn quotes besides its `passages` best ones when only a part of a
        long document is read: the ones the part's cache cannot see. The best-matching passage outside the part
        (scoring at least ELSEWHERE_SHARE of the best), and the second hop: the passage outside it that best names
        what the question's best passages name that the question does not (Ranking.bridged), with the question's own
        score as a tie-break. (passage number, text as quoted, score), at most two; () when the whole is read."""
        start, end = self.span
        if not self.parts or (not self.held and (start, end) == (0, len(self.document.text))):
            return ()
        held = self.held or ((start, end, 0),)
        ranking = self.ranking
        chosen = set(ranked_passages(ranking.scores)[:passages])
        outside = [i for i, (a, b) in enumerate(ranking.spans)
                   if not any(s <= (a + b) // 2 < e for s, e, _ in held) and i not in chosen
                   and ranking.text[a:b].strip()]
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

    def _within(self) -> Ranking:
        """The ranking over what was read: the whole document, or the part of it that is (offsets into its text)."""
        if self.read.text == self.document.text:
            return self.ranking
        return self.ranking.within(*self.span, self.read.text)
