"""What an answer says that the document does not: its numbers and names missing from the document's text; and its
numbers that the document has but not in the passage its turn quoted (unquoted).

A check on the surface, not on meaning: a number counts as found when the document has the same digits (thousands
separators and full-width digits aside) not inside a longer number; a name (a capitalised word that does not start a
sentence, or any capitalised word in a run of two or more) when the document has the word in any case. Words the
question uses are never marked. CJK answers are checked for numbers only (names need a segmenter).
"""

from __future__ import annotations

import re
import unicodedata

_NUMBER = re.compile(r"\d+(?:[.,:]\d+)*")
_NAME = re.compile(r"\b[A-Z][\w'\-]*[a-zA-Z][\w'\-]*(?:\s+[A-Z][\w'\-]+)*")  # HCoV-OC43, Hester Pryce
_SENTENCE_START = re.compile(r"(?:^|[.!?:;\n]\s*|[-*•]\s+|\d+\.\s+)$")
_LIST_MARKER = re.compile(r"\d{1,2}[.)](?:\s|$)")
_COMMON = frozenset("""I A An The This That These Those It Its In On At For From To Of And But Or Yes No Not None
According Based Answer Question Document Documents Page Pages Section Sections Table Figure The""".split())


def _plain(text: str) -> str:
    """NFKC (full-width digits become ASCII), thousands separators dropped."""
    return re.sub(r"(?<=\d),(?=\d{3}(?!\d))", "", unicodedata.normalize("NFKC", text))


def _has_number(document: str, number: str) -> bool:
    """True when the number occurs in the document and is not part of a longer number there."""
    return re.search(rf"(?<![\d.,]){re.escape(number)}(?![\d]|[.,]\d)", document) is not None


def _numbers(plain_answer: str) -> list[tuple[int, str]]:
    """The figures an answer states, with where each starts: its numbers, less the ones that number a list."""
    found = []
    for m in _NUMBER.finditer(plain_answer):
        if _LIST_MARKER.match(plain_answer, m.start()) and _SENTENCE_START.search(plain_answer[:m.start()]):
            continue  # "2. " numbering a list, not a figure
        found.append((m.start(), m.group().rstrip(".,:")))
    return found


def unsupported(answer: str, document: str, question: str = "") -> tuple[str, ...]:
    """The numbers and names in `answer` that neither `document` nor `question` contains, in order, each once."""
    plain_doc, plain_answer, plain_question = _plain(document), _plain(answer), _plain(question)
    lower_doc = plain_doc.lower() + "\n" + plain_question.lower()
    missing: list[str] = []
    for _, number in _numbers(plain_answer):
        if not _has_number(plain_doc, number) and not _has_number(plain_question, number):
            missing.append(number)
    for m in _NAME.finditer(plain_answer):
        words = m.group().split()
        at_start = _SENTENCE_START.search(plain_answer[:m.start()]) is not None
        for i, word in enumerate(words):
            if (i == 0 and at_start and len(words) == 1) or word in _COMMON:
                continue
            if not re.search(rf"(?<!\w){re.escape(word.lower())}(?!\w)", lower_doc):
                missing.append(word)
    names = [m for m in missing if not _NUMBER.fullmatch(m)]
    missing = [m for m in missing if m in names or not any(m in name for name in names)]  # "63" of "HCoV-NL63"
    return tuple(dict.fromkeys(missing))


def unquoted(answer: str, quoted: list[str], document: str, question: str = "") -> tuple[str, ...]:
    """The numbers in `answer` that the document holds but none of the passages `quoted` in the question's turn (nor
    the question) does, in order, each once: a figure copied from elsewhere, or a passage's figure changed into one
    the document has for something else. Empty when nothing was quoted. A number the document lacks is unsupported's."""
    if not quoted:
        return ()
    plain_answer, plain_doc, plain_question = _plain(answer), _plain(document), _plain(question)
    passages = [_plain(text) for text in quoted]
    return tuple(dict.fromkeys(
        number for _, number in _numbers(plain_answer)
        if _has_number(plain_doc, number) and not _has_number(plain_question, number)
        and not any(_has_number(passage, number) for passage in passages)))
