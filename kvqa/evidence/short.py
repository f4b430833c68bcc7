"""The shortest phrase that answers: cut from the answer once it is in, and where its sources say it.

A small model answers in a sentence ("The document states that the average age was 46 years."); a reader wants
"46 years". The phrase is cut by rule, not asked of the model, so the answer's tokens (and the cache's exactness)
do not change:
- what is cut: in space-separated text, the answer's own words found in its sources (Source.answer, the run the
  passage says in the same order, so a figure in the phrase is the passage's own); in CJK text the answer itself
  (its runs are matched a character at a time and can start inside a word).
- the clause: of its clauses (cut at sentence ends, CJK commas, brackets and ", which"...), the one that has words
  of its own (neither the question's nor stopwords), holds a figure when the question asks for one (how many,
  when, 多少, 几, 何时...), and shares most with the question, the first of those.
- its ends: without the question's words (in another form too: "opposes" for "oppose"), stopwords or CJK
  function characters (是, 的...); a counter or unit right after a number stays ("10次", "1889年"). In CJK text the
  question's characters that end the clause right after the answer's own stay ("两层" for 几层, "法国宇航公司" for
  什么公司, but "王处直" of "王处直的儿子", "研究院" of "研究院制造的"): CJK is matched a character at a time, and
  the characters a clause ends with are most often its last word's (chosen on the tuning split over keeping one
  character only: docs/quality.md).
- a figure asked for: the phrase is its figures, from the first to the last with their multipliers ("66
  million", "28亿"), a month's name or a hyphened word before them ("May 18, 1756", "mid-18th"), and up to two words
  after them that are neither stopwords, prepositions nor the question's ("7 to 10 percent", "22,000 years ago"; in
  CJK text the counter: "2003年").
No phrase when nothing is left (an answer that only says the question again).
Measured in docs/quality.md ("The shortest phrase first").
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

from kvqa.evidence.sources import _CJK, STOPWORDS, Source, terms, units

FIGURE_ASKED = re.compile(r"\b(?:how (?:many|much|long|old|far|large|big|high|tall|often)|when|"
                          r"what (?:year|date|percentage|proportion|number|age)|which year)\b|"
                          r"多少|几|多[高大长久远重深宽]|何时|哪一?年|什么时候", re.IGNORECASE)
_CLAUSE = re.compile(r"[，。；！？;!?\n]+|(?<=[.;])\s+|\s+\(|\)"
                     r"|,\s+(?=(?:which|who|where|while|whereas|but|although)\b)")
CJK_FUNCTION = frozenset("是的了在为有着和与及也都就被将把对于由其之而或即约")
PREPOSITIONS = frozenset("""about above across after against along among around before behind below beneath beside
between beyond during except inside near off onto outside over past per since through throughout toward towards under
until upon within without""".split())
MONTHS = frozenset("""january february march april may june july august september october november december jan feb
mar apr jun jul aug sep sept oct nov dec""".split())
MULTIPLIERS = frozenset("hundred thousand million billion trillion 十 百 千 万 亿".split())
_SUFFIXES = ("ing", "es", "ed", "s", "e", "d")


def stem(word: str) -> str:
    """The word without one common English ending ("opposes", "opposed", "oppose": "oppos"), kept 3 letters long."""
    for suffix in _SUFFIXES:
        if word.endswith(suffix) and len(word) - len(suffix) >= 3 and word.isascii():
            return word[:-len(suffix)]
    return word


def _is_cjk(text: str) -> bool:
    """The text has at least as many CJK characters as other words ("836人" is CJK text)."""
    cjk = len(_CJK.findall(text))
    return cjk > 0 and cjk >= len(units(text)) - cjk


def _attached(words: list[tuple[str, int, int]], i: int) -> bool:
    """Whether the unit after words[i] is a CJK character written right after it (a counter, a word's next one)."""
    return i + 1 < len(words) and not words[i + 1][0].isascii() and words[i + 1][1] == words[i][2]


def _own(text: str, asked: set[str]) -> str:
    """text without the question's words (`asked`, stemmed), stopwords or CJK function characters at its ends (see
    the module: a number's counter, and in CJK text the question's characters that end the clause, kept); "" when
    nothing of its own is left."""
    words = units(text)
    other = [stem(word) in asked or word in STOPWORDS or word in CJK_FUNCTION or (a > 0 and text[a - 1] in "'’")
             for word, a, _ in words]  # ("s" of a possessive's "'s" too)
    kept = [i for i, skip in enumerate(other) if not skip]
    if not kept:
        return ""
    first, last = kept[0], kept[-1]
    while words[last][0].isdigit() and _attached(words, last):
        last += 1  # 10次, 1889年, 836人: the counter stays though the question says it
    if _is_cjk(text):
        end = last
        while _attached(words, end) and words[end + 1][0] not in CJK_FUNCTION:
            end += 1
        if end + 1 == len(words):
            last = end  # 两层, 法国宇航公司: the question's characters that end the clause
    return text[words[first][1]:words[last][2]]


def _figures(phrase: str, asked: set[str]) -> str:
    """The phrase's figures, first to last, with a month's name before them and up to two words after them (see the
    module); the phrase itself when it has none of its own (`asked`: the question's words, stemmed)."""
    words = units(phrase)
    digits = [i for i, (word, _, _) in enumerate(words) if any(c.isdigit() for c in word) and stem(word) not in asked]
    if not digits:
        return phrase
    first, last = digits[0], digits[-1]
    if first > 0 and (words[first - 1][0] in MONTHS or phrase[words[first - 1][2]:words[first][1]] == "-"):
        first -= 1  # May 18, 1756; mid-18th
    while last + 1 < len(words) and words[last + 1][0] in MULTIPLIERS:
        last += 1  # 66 million, 28亿
    if _is_cjk(phrase):
        if _attached(words, last):
            last += 1  # the counter
    else:
        for _ in range(2):
            word = words[last + 1][0] if last + 1 < len(words) else ""
            if (not word.isalpha() or word in STOPWORDS or word in PREPOSITIONS or stem(word) in asked
                    or phrase[words[last][2]:words[last + 1][1]].strip()):
                break  # not a word, or not next to the figure (a comma or a bracket between)
            last += 1
    return phrase[words[first][1]:words[last][2]]


def short_answer(answer: str, question: str, sources: Sequence[Source] = ()) -> str:
    """The shortest phrase of the answer that answers the question ("" when none stands out): see the module."""
    base = answer if _is_cjk(answer) else next((s.answered for s in sources if s.answer), "")
    asked, figure = set(terms(question)), FIGURE_ASKED.search(question) is not None
    stems = {stem(word) for word, _, _ in units(question)}
    best, best_key = "", None
    for i, clause in enumerate(_CLAUSE.split(base)):
        phrase = _own(clause, stems)
        if not phrase:
            continue
        key = (figure and any(c.isdigit() for c in clause), len(asked & set(terms(clause))), -i)
        if best_key is None or key > best_key:
            best, best_key = phrase, key
    return _figures(best, stems) if figure else best


def mark_short(sources: Sequence[Source], phrase: str) -> tuple[Source, ...]:
    """The sources, each told where the phrase stands in it (Source.short: inside the answer's run first, else its
    first place in the passage; None where it is not there)."""
    if not phrase:
        return tuple(sources)

    def where(source: Source) -> tuple[int, int] | None:
        a, b = (source.answer[0] - source.start, source.answer[1] - source.start) if source.answer else (0, 0)
        at = source.text.find(phrase, a, b) if source.answer else -1
        if at < 0:
            at = source.text.find(phrase)
        return (source.start + at, source.start + at + len(phrase)) if at >= 0 else None

    return tuple(replace(source, short=where(source)) for source in sources)
