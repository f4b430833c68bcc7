"""Where an answer came from: the document's passages that share the most (rare) words with it.

A lexical alignment, not the model's attention: it reads only the document's text and the answer's, so it cannot
change the answer or the cache, and it costs milliseconds. Passages are runs of whole sentences of about
PASSAGE_CHARS characters; words are lower-cased letters and digits, and for CJK text overlapping character
pairs. A passage scores the sum, over the answer's distinct words it contains, of how rare each word is in the
document (inverse document frequency over passages), with the question's words counted at a quarter weight to
break ties between passages that repeat the answer's words.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from dataclasses import dataclass
from functools import lru_cache

PASSAGE_CHARS = 320
_PAGE = re.compile(r"\[Page (\d+)\]")
_SENTENCE_END = re.compile(r"(?<=[.!?;:。！？；])\s+|\n+|(?<=[。！？；])")
_WORD = re.compile(r"[^\W_]+", re.UNICODE)
_CJK = re.compile(r"[\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uac00-\ud7af\uf900-\ufaff]")
STOPWORDS = frozenset("""a an and are as at be been but by can could did do does for from had has have he her his how
i if in into is it its may might more most no not of on or our she should so such than that the their them then there
these they this those to was we were what when where which while who whom why will with would you your document
answer question says according""".split())


@dataclass(frozen=True)
class Source:
    """A passage of the document an answer relies on: character offsets into the document's text, and its page."""

    text: str
    start: int
    end: int
    page: int | None  # the PDF page it starts on, None for text documents
    score: float


def terms(text: str) -> list[str]:
    """Lower-cased words without stopwords; CJK runs become overlapping character pairs (and single characters)."""
    out = []
    for word in _WORD.findall(text.lower()):
        if _CJK.search(word):
            chars = [c for c in word]
            out += chars if len(chars) == 1 else [a + b for a, b in zip(chars, chars[1:])]
        elif word not in STOPWORDS and (len(word) > 1 or word.isdigit()):
            out.append(word)
    return out


def passages(text: str) -> list[tuple[int, int]]:
    """(start, end) offsets of runs of whole sentences of about PASSAGE_CHARS characters, covering the text."""
    cuts = [m.end() for m in _SENTENCE_END.finditer(text)] + [len(text)]
    spans, start = [], 0
    for cut in cuts:
        if cut - start >= PASSAGE_CHARS or cut == len(text) or text.startswith("[Page ", cut):  # pages never mix
            if text[start:cut].strip():
                spans.append((start, cut))
            start = cut
    return spans


@lru_cache(maxsize=32)
def _index(text: str) -> tuple[list[tuple[int, int]], list[Counter], dict[str, float]]:
    """Passages, their term counts, and each term's inverse document frequency; cached per document text."""
    spans = passages(text)
    counts = [Counter(terms(text[a:b])) for a, b in spans]
    df = Counter(term for c in counts for term in c)
    n = len(spans)
    idf = {term: math.log(1 + n / d) for term, d in df.items()}
    return spans, counts, idf


def page_at(text: str, offset: int) -> int:
    """The page an offset lies on: after the last "[Page N]" marker before it, else page 1."""
    page = 1
    for m in _PAGE.finditer(text):
        if m.start() > offset:
            break
        page = int(m.group(1))
    return page


def find_sources(text: str, answer: str, question: str = "", *, pages: bool = False, limit: int = 3) -> list[Source]:
    """The passages of `text` that best support `answer`, best first: at most `limit`, each scoring at least half
    the best. Empty when the answer shares no word with the document."""
    wanted = sorted(set(terms(answer)))  # sorted: a float sum in set order would vary with the process's hash seed
    if not wanted or not text.strip():
        return []
    asked = sorted(set(terms(question)) - set(wanted))
    spans, counts, idf = _index(text)
    scored = []
    for (start, end), count in zip(spans, counts):
        score = sum(idf[t] for t in wanted if t in count) + 0.25 * sum(idf[t] for t in asked if t in count)
        if any(t in count for t in wanted):
            scored.append((score, start, end))
    if not scored:
        return []
    scored.sort(key=lambda s: (-s[0], s[1]))
    best = scored[0][0]
    found = []
    for score, start, end in scored[:limit]:
        if score < 0.5 * best:
            break
        start = _skip_space(text, start)
        if marker := _PAGE.match(text, start):  # the page's own "[Page N]" line is not a quote
            start = _skip_space(text, marker.end())
        quote = text[start:end].rstrip()
        found.append(Source(text=quote, start=start, end=start + len(quote),
                            page=page_at(text, start) if pages else None, score=round(score, 3)))
    return found


def _skip_space(text: str, offset: int) -> int:
    while offset < len(text) and text[offset].isspace():
        offset += 1
    return offset
