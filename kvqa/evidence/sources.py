"""Evidence: the document's passages ranked by a question (BM25, the `bm25s` library), and an answer's sources.

Lexical retrieval, not the model's attention: it reads only the document's text, the question and the answer, so it
cannot change the cache, and it costs milliseconds. Passages are runs of whole sentences of about PASSAGE_CHARS
characters that never cross a heading, a file boundary or a PDF page. Words are lower-cased letters and digits
without stopwords; CJK runs become overlapping character pairs, so Chinese needs no word segmenter.

Tables (Markdown tables, one line per row: kvqa.documents.tables writes a PDF's tables so) are cut by rows: a line
starting
with '|' is never cut inside ("| Acme Inc. | 12 |" is one row, not two sentences), and each row of a table is a
passage of its own, indexed with its table's header words and quoted after its header: a question names a row's key
and a column, and the column's name is only in the header (docs/quality.md, "Reading tables").

- rank(): the question scored once against the passages (a Ranking), before any answer exists: its best passages
  (quoted in the question's turn, and where a long document's question is routed) and, once answered, the answer's
  sources, ranked by the question first, with the answer's words as a second signal, and in each the sentence that
  matches best (`mark`).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache

import bm25s
import numpy as np

from kvqa.documents.tables import ROW, TABLE
from kvqa.languages import UNSPACED

PASSAGE_CHARS = 320
CJK_WEIGHT = 1.5  # a CJK character counts 1 + 1.5 towards PASSAGE_CHARS: Chinese passages of about 130 characters
ANSWER_WEIGHT = 0.5  # the answer's words count half as much as the question's when ranking an answer's sources
_PAGE = re.compile(r"\[Page (\d+)\]")
_BOUNDARY = re.compile(r"^(?:#{1,6} |=== File \d+ of \d+: |\[Page \d+\]$)", re.MULTILINE)  # headings, files, pages
_SENTENCE_END = re.compile(r"(?<=[.!?;:。！？；])\s+|\n+|(?<=[。！？；])")
_MARK_END = re.compile(r"(?<=[.!?;。！？；])\s+|\n\s*\n|(?<=[。！？；])")  # sentences may wrap a line
_CLAUSE_END = re.compile(r"(?<=[,:;])\s+|(?<=[，、：；])")  # where a sentence too long to quote whole is cut
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CJK = re.compile(f"[{UNSPACED}]")
STOPWORDS = frozenset("""a an and are as at be been but by can could did do does for from had has have he her his how
i if in into is it its may might more most no not of on or our she should so such than that the their them then there
these they this those to was we were what when where which while who whom why will with would you your document
answer question says according""".split())


@dataclass(frozen=True)
class Source:
    """A passage of the document: character offsets into the document's text, its page, and the sentence in it that
    matches best (offsets into the document's text too; (start, start) when none stands out)."""

    text: str
    start: int
    end: int
    page: int | None  # the PDF page it lies on, None for text documents
    score: float
    mark: tuple[int, int] = (0, 0)
    answer: tuple[int, int] | None = None  # where the answer's own words stand in it (answer_span), if they do
    short: tuple[int, int] | None = None  # where the answer's shortest phrase stands in it (kvqa.evidence.short)
    part: int | None = None  # the part of a long document it lies in (1-based); None: the document is one part

    @property
    def marked(self) -> str:
        """The best-matching sentence's text ("" when none)."""
        return self.text[self.mark[0] - self.start: self.mark[1] - self.start]

    @property
    def bold(self) -> tuple[int, int] | None:
        """What to show in bold in it: the answer's shortest phrase where it is there, else the answer's own words."""
        return self.short or self.answer

    @property
    def answered(self) -> str:
        """The run of the answer found in the passage ("" when none)."""
        return self.text[self.answer[0] - self.start: self.answer[1] - self.start] if self.answer else ""


def source_dict(source: Source) -> dict:
    """A source as JSON: page (PDFs), start and end (character offsets into the document's text), text, and the
    best-matching sentence's offsets (mark_start, mark_end), the answer's own words' in it (answer_start,
    answer_end) and its shortest phrase's (short_start, short_end; each None when not there)."""
    return {"page": source.page, "part": source.part, "start": source.start, "end": source.end, "text": source.text,
            "mark_start": source.mark[0], "mark_end": source.mark[1],
            "answer_start": source.answer[0] if source.answer else None,
            "answer_end": source.answer[1] if source.answer else None,
            "short_start": source.short[0] if source.short else None,
            "short_end": source.short[1] if source.short else None}


def terms(text: str) -> list[str]:
    """Lower-cased words without stopwords; CJK runs become overlapping character pairs (and single characters).
    Not stemmed: Snowball stemming found the gold passage first 1-3 points more often, but the answers it quoted for
    were right less often (docs/quality.md)."""
    out = []
    for word in _WORD.findall(text.lower()):
        if _CJK.search(word):
            chars = list(word)
            out += chars if len(chars) == 1 else [a + b for a, b in zip(chars, chars[1:])]
        elif word not in STOPWORDS and (len(word) > 1 or word.isdigit()):
            out.append(word)
    return out


@dataclass(frozen=True)
class _Table:
    """A Markdown table in a text: offsets of its header line, of its first row (after the '| --- |' line) and of its
    end; its header and '| --- |' lines."""

    start: int
    rows: int
    end: int
    head: str


def _tables(text: str) -> list[_Table]:
    """The text's Markdown tables."""
    found = []
    for m in TABLE.finditer(text):
        lines = m.group().split("\n", 2)
        head = lines[0] + "\n" + lines[1] + "\n"
        found.append(_Table(m.start(), min(m.start() + len(head), m.end()), m.end(), head))
    return found


def _sentence_ends(pattern: re.Pattern, text: str) -> set[int]:
    """Where the pattern ends a sentence in the text, except inside a line of a table ("| Acme Inc. | 3.5 |")."""
    ends = {m.end() for m in pattern.finditer(text)}
    rows = [(m.start(), m.end()) for m in ROW.finditer(text)] if "|" in text else []
    if not rows:
        return ends
    starts = [a for a, _ in rows]

    def inside(cut: int) -> bool:
        i = bisect_right(starts, cut) - 1
        return i >= 0 and rows[i][0] < cut < rows[i][1]

    return {cut for cut in ends if not inside(cut)}


def passages(text: str) -> list[tuple[int, int]]:
    """(start, end) offsets of runs of whole sentences of about PASSAGE_CHARS characters (CJK ones weighing more:
    CJK_WEIGHT), covering the text; a run ends before a heading, a file's header or a PDF page marker, whatever its
    length. Each row of a table is a run, the first with the header and '| --- |' lines above it; a line of a table
    is never cut."""
    hard = {m.start() for m in _BOUNDARY.finditer(text)}
    for table in _tables(text):
        hard |= {table.start, table.end} | {m.start() for m in ROW.finditer(text, table.rows, table.end)}
        hard.discard(table.rows)  # the first row's passage holds the header: no passage of the table but a row
    cuts = sorted(_sentence_ends(_SENTENCE_END, text) | hard | {len(text)})
    cjk = [0]  # cjk[i]: CJK characters before offset i
    for c in text:
        cjk.append(cjk[-1] + bool(_CJK.match(c)))
    spans, start = [], 0
    for cut in cuts:
        size = cut - start + CJK_WEIGHT * (cjk[cut] - cjk[start])  # a CJK character says about as much as 2.5 others
        if size >= PASSAGE_CHARS or cut == len(text) or cut in hard:
            if text[start:cut].strip():
                spans.append((start, cut))
            start = cut
    return spans


@dataclass(frozen=True)
class _Index:
    spans: list[tuple[int, int]]
    retriever: bm25s.BM25 | None  # None when no passage has a word
    heads: list[str]  # each passage's table header and '| --- |' lines when it is a table's row without them, else ""


@lru_cache(maxsize=32)
def _index(text: str) -> _Index:
    """The document's passages and their BM25 index, a table's rows with its header's words; cached per text."""
    spans, tables = passages(text), _tables(text)
    heads, k = [], 0  # both in the text's order
    for a, _ in spans:
        while k < len(tables) and tables[k].end <= a:
            k += 1
        heads.append(tables[k].head if k < len(tables) and tables[k].start < a else "")
    corpus = [terms(text[a:b]) + terms(head) for (a, b), head in zip(spans, heads)]
    if not any(corpus):
        return _Index(spans, None, heads)
    retriever = bm25s.BM25()
    retriever.index(corpus, show_progress=False)
    return _Index(spans, retriever, heads)


def _scores(index: _Index, query: str) -> np.ndarray:
    """Each passage's BM25 score for the query's words (zeros when it has none the document has)."""
    words = sorted(set(terms(query)))  # sorted: a float sum in set order would vary with the process's hash seed
    if index.retriever is None or not words:
        return np.zeros(len(index.spans))
    known = [w for w in words if w in index.retriever.vocab_dict]
    return index.retriever.get_scores(known) if known else np.zeros(len(index.spans))


@dataclass(frozen=True)
class Ranking:
    """A question's BM25 scores over a text's passages, computed once (rank): what the question's turn quotes, a long
    document's routing and the answer's sources all read. within() narrows it to a part of the text without scoring
    again: the whole document's passages inside the part, clipped to it, with offsets into the part's text."""

    text: str  # the text the spans are offsets into
    question: str
    spans: tuple[tuple[int, int], ...]  # its passages
    scores: np.ndarray  # the question's score of each
    index: _Index  # the BM25 index the scores came from (the whole document's)
    rows: tuple[int, ...]  # each span's passage in that index

    def best(self, limit: int = 1) -> list[tuple[int, int, float]]:
        """(start, end, score) of the `limit` passages that best match the question, best first, trimmed; fewer (or
        none) when fewer share a word with it."""
        best = ranked_passages(self.scores)[:limit]
        return [(*_trim(self.text, *self.spans[i]), float(self.scores[i])) for i in best]

    def placed(self, limit: int, share: float) -> list[tuple[float, int, int]]:
        """(score, start, end) of the `limit` passages that best match the question, those scoring at least `share`
        of the best, each placed by its best-matching sentence (where a long document's routing looks for it):
        near-duplicates below the share cannot outvote the best passage (a document repeating a sentence with one
        word changed)."""
        found = self.best(limit)
        return [(points, *(best_sentence(self.text, start, end, self.question) or (start, end)))
                for start, end, points in found if points >= share * found[0][2]]

    def candidates(self, limit: int) -> list[tuple[int, str, float]]:
        """(passage number, text, score) of the `limit` best passages, best first: what the question's turn quotes
        and a reranker (kvqa.generation.rerank) reorders, naming passages by their number as `order` does below."""
        return [(i, self.quoted(i), float(self.scores[i])) for i in ranked_passages(self.scores)[:limit]]

    def quoted(self, i: int) -> str:
        """Passage i's text as quoted, trimmed: a table's row after its table's header and '| --- |' lines."""
        return self.index.heads[self.rows[i]] + self.text[slice(*_trim(self.text, *self.spans[i]))]

    def quotes(self, n: int, order: Sequence[int] | None = None, *, chars: int = 0) -> list[str]:
        """The texts of the n passages that best match the question, to quote in its turn (quoted); with `order`
        (passage numbers, best first, from a reranker), its first n instead; chars > 0: each cut to its best
        sentences (excerpt)."""
        if n <= 0:
            return []
        return [excerpt(self.quoted(i), self.question, chars) for i in (order or ranked_passages(self.scores))[:n]]

    def sources(self, answer: str, *, pages: bool = False, limit: int = 3, order: Sequence[int] | None = None,
                first_page: int = 1) -> list[Source]:
        """The passages an answer relies on, best first: ranked by the question, with the answer's words as a second
        signal (ANSWER_WEIGHT), each scoring at least half the best, at most `limit`. `order` (passage numbers, best
        first, from a reranker) reorders the question's ranking: the passages it names take its best scores, in its
        order. Empty when neither the answer nor the question shares a word with the text. first_page: the page the
        text starts on (a part of a document of pages cut inside a page has no "[Page n]" line before it)."""
        text = self.text
        if not text.strip() or not self.spans:
            return []
        asked, said = _unit(self.scores), self.scores_for(answer)
        if order:
            asked = asked.copy()
            asked[list(order)] = np.sort(asked[list(order)])[::-1]
        combined = asked + ANSWER_WEIGHT * _unit(said)
        ranked = ranked_passages(combined)
        if not ranked:
            return []
        best = combined[ranked[0]]
        asked_words, said_words = set(terms(self.question)), set(terms(answer))
        found = []
        for i in ranked[:limit]:
            if combined[i] < 0.5 * best:
                break
            start, end = _trim(text, *self.spans[i])
            found.append(Source(text=text[start:end], start=start, end=end,
                                page=page_at(text, start, first_page) if pages else None,
                                score=round(float(combined[i]), 3),
                                mark=_best_sentence(text, start, end, asked_words, said_words),
                                answer=answer_span(text, start, end, answer, self.question)))
        return found

    def bridged(self, i: int) -> np.ndarray:
        """The second hop from passage i: each passage's score for the names passage i holds that the question does
        not (names()): a two-hop question's bridge, as the actress named in the passage about her film leads to the
        passage about her. Zeros when passage i names nothing new."""
        asked = set(terms(self.question))
        new = [name for name in names(self.quoted(i)) if not set(terms(name)) <= asked]
        return self.scores_for(" ".join(new)) if new else np.zeros(len(self.spans))

    def scores_for(self, text: str) -> np.ndarray:
        """Another text's scores over the same passages (an answer's words)."""
        return _scores(self.index, text)[list(self.rows)] if self.rows else np.zeros(0)

    def within(self, start: int, end: int, text: str) -> Ranking:
        """The ranking inside self.text[start:end], which is `text`: the passages that overlap it, clipped."""
        assert self.text[start:end] == text, "the part's text is not where it was said to be"
        spans, keep = [], []  # keep: which of self.spans each clipped span is
        for i, (a, b) in enumerate(self.spans):
            a, b = max(a, start), min(b, end)
            if b > a and self.text[a:b].strip():
                spans.append((a - start, b - start))
                keep.append(i)
        rows = [self.rows[i] for i in keep]
        return Ranking(text, self.question, tuple(spans), self.scores[keep] if keep else np.zeros(0), self.index,
                       tuple(rows))


_NAME = re.compile(r"[A-Z][\w'’-]*(?:\s+(?:(?:of|the|de|du|la|von|van|der)\s+)*[A-Z][\w'’-]*)*")


def names(text: str) -> list[str]:
    """The names in a text written in Latin letters: runs of capitalised words ("Shirley Temple", "University of
    Oxford"), a stopword before them ("The", "In" at a sentence's start) left out. Chinese has no capitals: none."""
    found = []
    for match in _NAME.finditer(text):
        words = match.group().split()
        while words and words[0].lower() in STOPWORDS:
            words.pop(0)
        name = " ".join(words)
        if name and terms(name) and name not in found:
            found.append(name)
    return found


def rank(text: str, question: str) -> Ranking:
    """The question scored against the text's passages: the one BM25 scoring of a question
    (kvqa.evidence.evidence.Evidence)."""
    index = _index(text)
    return Ranking(text, question, tuple(index.spans), _scores(index, question), index, tuple(range(len(index.spans))))


def excerpt(passage: str, question: str, chars: int) -> str:
    """The run of the passage's whole sentences, at most `chars` long (CJK characters weighing 1 + CJK_WEIGHT, as
    passages are cut), that shares the most distinct words with the question; the longest such run, then the
    earliest. A sentence longer than `chars` is cut at its commas and colons, a clause still longer at its words (CJK
    characters). The passage whole when it fits, when chars <= 0, or when it holds a table's line (a row is quoted
    with its header)."""
    if chars <= 0 or _size(passage, 0, len(passage)) <= chars or ROW.search(passage):
        return passage
    pieces = _pieces(passage, 0, len(passage), chars)
    asked = set(terms(question))
    best, best_key = pieces[0], (-1, 0, 0)
    for i, (a, _) in enumerate(pieces):
        for _, b in pieces[i:]:
            if _size(passage, a, b) > chars:
                break
            key = (len(set(terms(passage[a:b])) & asked), b - a, -a)
            if key > best_key:
                best, best_key = (a, b), key
    return passage[slice(*_trim(passage, *best))]


def _size(text: str, start: int, end: int) -> float:
    """text[start:end]'s length as passages count it: a CJK character weighs 1 + CJK_WEIGHT."""
    return end - start + CJK_WEIGHT * len(_CJK.findall(text, start, end))


_WORD_GAP = re.compile(rf"\s+|(?<={_CJK.pattern})")  # between words, and after each CJK character
_FINER = (_MARK_END, _CLAUSE_END, _WORD_GAP)  # sentences, then clauses, then words (CJK: characters)


def _pieces(text: str, start: int, end: int, chars: int, level: int = 0) -> list[tuple[int, int]]:
    """text[start:end] cut into consecutive (start, end) pieces: its sentences, a sentence longer than `chars` cut at
    its clauses, a clause still longer at its words (a CJK character being a word)."""
    cuts = sorted({start + m.end() for m in _FINER[level].finditer(text[start:end])} - {start, end})
    bounds = [start, *cuts, end]
    out = []
    for a, b in zip(bounds, bounds[1:]):
        if _size(text, a, b) > chars and level + 1 < len(_FINER):
            out += _pieces(text, a, b, chars, level + 1)
        else:
            out.append((a, b))
    return out


def best_sentence(text: str, start: int, end: int, question: str) -> tuple[int, int] | None:
    """(start, end) of the sentence of text[start:end] sharing the most words with the question; None if none."""
    a, b = _best_sentence(text, start, end, set(terms(question)), set())
    return (a, b) if b > a else None


def ranked_passages(scores: np.ndarray) -> list[int]:
    """The passages that score above zero, best first (the earlier one first on a tie)."""
    return sorted((i for i in range(len(scores)) if scores[i] > 0), key=lambda i: (-scores[i], i))


def _unit(scores: np.ndarray) -> np.ndarray:
    """Scores scaled so the best is 1 (all zeros stay zeros)."""
    top = scores.max() if len(scores) else 0.0
    return scores / top if top > 0 else scores


def _best_sentence(text: str, start: int, end: int, asked: set[str], said: set[str]) -> tuple[int, int]:
    """(start, end) of the sentence of text[start:end] sharing the most distinct words with the answer (twice) and
    the question; (start, start) if it shares none."""
    best, best_span = 0, (start, start)
    cuts = [start] + sorted(start + cut for cut in _sentence_ends(_MARK_END, text[start:end])) + [end]
    for a, b in zip(cuts, cuts[1:]):
        words = set(terms(text[a:b]))
        shared = 2 * len(words & said) + len(words & asked)
        if shared > best:
            a, b = _trim(text, a, b)
            best, best_span = shared, (a, b)
    return best_span


_UNIT = re.compile(rf"[{UNSPACED}]|[^\W_{UNSPACED}]+")  # a CJK character, or a run of other letters or digits


def units(text: str, offset: int = 0) -> list[tuple[str, int, int]]:
    """The text's words (a CJK character each), lower-cased, with their offsets."""
    return [(m.group().lower(), offset + m.start(), offset + m.end()) for m in _UNIT.finditer(text)]


def answer_span(text: str, start: int, end: int, answer: str, question: str = "") -> tuple[int, int] | None:
    """Where in text[start:end] the answer's own words stand: of the runs of the answer's words (CJK: characters)
    that the passage has in the same order, the one with the most words that are neither stopwords nor the question's
    (the longest of those first), without such words at its ends; it must hold a number, a word of two letters or
    more, or two CJK characters of its own. Offsets into text; None when no run qualifies, so a reader sees at a
    glance whether the passage holds what the answer says."""
    said, passage = units(answer), units(text[start:end], start)
    asked = {word for word, _, _ in units(question)}
    if not said or not passage:
        return None
    new = [word not in asked and word not in STOPWORDS for word, _, _ in passage]
    at: dict[str, list[int]] = {}
    for j, (word, _, _) in enumerate(passage, start=1):
        at.setdefault(word, []).append(j)
    best, best_at = (0, 0), None  # (new words, words) of the best run, and where it ends in the passage
    previous: dict[int, tuple[int, int]] = {}  # the runs ending at passage words, for the answer's word before
    for word, _, _ in said:
        current = {}
        for j in at.get(word, ()):
            fresh, length = previous.get(j - 1, (0, 0))
            current[j] = (fresh + new[j - 1], length + 1)
            if current[j] > best:
                best, best_at = current[j], j
        previous = current
    if best_at is None or best[0] == 0:
        return None
    run = list(range(best_at - best[1], best_at))
    while not new[run[0]]:
        run = run[1:]
    while not new[run[-1]]:
        run = run[:-1]
    own = [passage[i][0] for i in run if new[i]]
    cjk = [w for w in own if len(w) == 1 and not w.isascii()]
    if not (any(w.isdigit() for w in own) or any(len(w) > 1 for w in own) or len(cjk) >= 2):
        return None
    return passage[run[0]][1], passage[run[-1]][2]


def page_at(text: str, offset: int, first: int = 1) -> int:
    """The page an offset lies on: after the last "[Page N]" marker before it, else `first` (the text's first)."""
    page = first
    for m in _PAGE.finditer(text):
        if m.start() > offset:
            break
        page = int(m.group(1))
    return page


def _trim(text: str, start: int, end: int) -> tuple[int, int]:
    """The span without leading and trailing space, nor the "[Page N]" line a page's first passage starts with."""
    while start < end and text[start].isspace():
        start += 1
    if marker := _PAGE.match(text, start, end):
        start = marker.end()
        while start < end and text[start].isspace():
            start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return start, end
