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
- its ends: without the question's words, stopwords or CJK function characters (是, 的...); a counter or unit
  right after a number stays ("10次", "1889年").
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


def _is_cjk(text: str) -> bool:
    """The text has at least as many CJK characters as other words ("836人" is CJK text)."""
    cjk = len(_CJK.findall(text))
    return cjk > 0 and cjk >= len(units(text)) - cjk


def _own(text: str, question: str) -> str:
    """text without the question's words, stopwords or CJK function characters at its ends (a number's counter or
    unit right after it kept); "" when nothing of its own is left."""
    words = units(text)
    asked = {word for word, _, _ in units(question)}
    kept = [i for i, (word, _, _) in enumerate(words)
            if word not in asked and word not in STOPWORDS and word not in CJK_FUNCTION]
    if not kept:
        return ""
    first, last = kept[0], kept[-1]
    while (last + 1 < len(words) and words[last][0].isdigit() and not words[last + 1][0].isascii()
           and words[last + 1][1] == words[last][2]):
        last += 1  # 10次, 1889年, 836人: the counter stays though the question says it
    return text[words[first][1]:words[last][2]]


def short_answer(answer: str, question: str, sources: Sequence[Source] = ()) -> str:
    """The shortest phrase of the answer that answers the question ("" when none stands out): see the module."""
    base = answer if _is_cjk(answer) else next((s.answered for s in sources if s.answer), "")
    asked, figure = set(terms(question)), FIGURE_ASKED.search(question) is not None
    best, best_key = "", None
    for i, clause in enumerate(_CLAUSE.split(base)):
        phrase = _own(clause, question)
        if not phrase:
            continue
        key = (figure and any(c.isdigit() for c in clause), len(asked & set(terms(clause))), -i)
        if best_key is None or key > best_key:
            best, best_key = phrase, key
    return best


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
