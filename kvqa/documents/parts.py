"""Documents longer than the model reads: read the part that fits, say which, and let the user choose another.

A PDF is cut at page boundaries, text at paragraph (or line) boundaries; parts are named in pages or characters.
Nothing is truncated silently: a Document holding a part carries a Part, and parts.notice() says what was read.
Token counts come from counting each page or paragraph once; only the chosen part's prompt is tokenized again.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import replace

from kvqa.documents.reading import Document, Part
from kvqa.errors import DocumentError
from kvqa.messages import Message
from kvqa.prompt import system_text

MAX_UNIT_CHARS = 4000  # a paragraph longer than this is cut at line ends, then every this many characters


def unit_name(document: Document) -> str:
    return "pages" if document.page_starts else "characters"


def unit_total(document: Document) -> int:
    """How many of its units (unit_name) the document has: pages of a PDF, characters of a text."""
    return len(document.page_starts) if document.page_starts else len(document.text)


def parse_range(text: str, document: Document) -> Part:
    """'14-27', '14', '14-' (to the end) or '-27' -> the Part first..last of the document, 1-based and inclusive;
    raises DocumentError with what to type when it is not a range of this document's pages or characters."""
    unit = unit_name(document)
    total = unit_total(document)
    m = re.fullmatch(r"\s*([\d,]*)\s*(?:[-–—]\s*([\d,]*))?\s*", text or "")
    if not m or not (m.group(1) or m.group(2)):
        raise DocumentError("part.not_a_range", text=text, unit=Message(f"unit.{unit}"))
    first = int(m.group(1).replace(",", "")) if m.group(1).replace(",", "") else 1
    dash = m.group(2) is not None  # "14-": to the end
    last_text = (m.group(2) or "").replace(",", "")
    last = int(last_text) if last_text else (total if dash else first)
    if not 1 <= first <= last <= total:
        raise DocumentError("part.out_of_range", name=document.name, total=total, unit=Message(f"unit.{unit}"),
                            text=text.strip())
    return part_of(document, first, last)


def asked_range(document: Document, *, pages: str | None, chars: str | None) -> Part | None:
    """`kvqa ask --pages 14-27` (a PDF) or `--chars 1-40000` (a text) as a Part; None when neither is given."""
    if pages and chars:
        raise DocumentError("cli.pages_and_chars")
    if pages and not document.page_starts:
        raise DocumentError("cli.pages_for_pdf")
    if chars and document.page_starts:
        raise DocumentError("cli.chars_for_text")
    return parse_range(pages or chars, document) if pages or chars else None


def part_of(document: Document, first: int, last: int) -> Part:
    """Pages (PDF) or characters (text) first..last of the document, named as a Part ("pages 20-30 of 36")."""
    return Part(unit_name(document), first, last, unit_total(document))


def select(document: Document, first: int, last: int) -> Document:
    """The document's pages (PDF) or characters (text) first..last, 1-based and inclusive, as a Document."""
    part = part_of(document, first, last)
    if document.page_starts:
        start, end = offsets(document, first, last)
        text = document.text[start: end].lstrip("\n")
    else:
        text = document.text[first - 1: last]
    if first == 1 and part.last == part.total:
        return document
    return replace(document, text=text, page_starts=(), part=part)


def units(document: Document, first: int, last: int, *, max_chars: int = MAX_UNIT_CHARS) -> list[tuple[int, int]]:
    """The (first, last) spans, in the document's unit, that a part may end after: each page of a PDF, each
    paragraph of a text (long ones cut at line ends or every max_chars characters)."""
    if document.page_starts:
        return [(n, n) for n in range(first, last + 1)]
    spans, pos = [], first - 1
    text = document.text[:last]
    for m in re.finditer(r"\n\s*\n", text[first - 1:]):
        end = first - 1 + m.end()
        spans += _cut(text, pos, end, max_chars)
        pos = end
    spans += _cut(text, pos, last, max_chars)
    return [(a + 1, b) for a, b in spans if b > a]


def _cut(text: str, start: int, end: int, max_chars: int) -> list[tuple[int, int]]:
    """[start, end) as spans of at most max_chars, cut after a line end where there is one."""
    spans = []
    while end - start > max_chars:
        newline = text.rfind("\n", start + 1, start + max_chars)
        cut = newline + 1 if newline > start else start + max_chars
        spans.append((start, cut))
        start = cut
    return spans + [(start, end)]


def span_text(document: Document, span: tuple[int, int]) -> str:
    first, last = span
    return select(document, first, last).text


def plan(spans: list[tuple[int, int]], counts: list[int], room: int, *,
         first_take: int | None = None) -> list[tuple[int, int, int]]:
    """Consecutive parts of the units `spans` (with their token `counts`), as (first, last, tokens): each holds as
    many units as fit in `room` tokens (at least one), and starts with the last unit of the one before (overlap),
    unless that part held a single unit. The first part holds `first_take` units when given (what was read)."""
    parts, i = [], 0
    while i < len(spans):
        j, used = i, 0
        limit = first_take if not parts and first_take else len(spans)
        while j < limit and (j == i or used + counts[j] <= room):
            used += counts[j]
            j += 1
        parts.append((spans[i][0], spans[j - 1][1], used))
        if j == len(spans):
            break
        i = j - 1 if j - 1 > i else j  # the next part starts with this one's last unit
    return parts


def planned_parts(document: Document, count_tokens: Callable[[str], int], room: int) -> int:
    """How many parts a document makes when `room` tokens (the context less the reserve) are read at a time, before
    reading it: its pages or paragraphs counted as prefill_parts() counts them, around the prompt's own tokens."""
    spans = units(document, 1, unit_total(document), max_chars=max(100, min(MAX_UNIT_CHARS, room // 4)))
    overhead = count_tokens(system_text("")) + 32
    return len(plan(spans, [count_tokens(span_text(document, s)) for s in spans], room - overhead))


def span_of(document: Document, part: Document) -> tuple[int, int]:
    """[start, end) of a part's text in the whole document's text (select(): a PDF's part starts at its page's text,
    the newlines before it left out)."""
    if part.part is None:
        return 0, len(document.text)
    start, end = offsets(document, part.part.first, part.part.last)
    if document.page_starts:
        start += len(document.text[start:end]) - len(document.text[start:end].lstrip("\n"))
    return start, end


def offsets(document: Document, first: int, last: int) -> tuple[int, int]:
    """[start, end) in the document's text of its units first..last (pages, or 1-based characters)."""
    if not document.page_starts:
        return first - 1, last
    starts = document.page_starts
    return starts[first - 1], starts[last] if last < len(starts) else len(document.text)


def notice(document: Document, source: Document, *, asked: tuple[int, int] | None = None,
           parts: int = 1) -> Message | None:
    """What was read, when it is not the whole document: 'Read pages 1-13 of 36 ...'. asked: the range the user
    chose, if any (then a part that is all of it is not news beyond naming it); parts: how many parts the source
    was cut into, to be routed to (more than one: questions go to the part that matches them)."""
    part = document.part
    if part is None:
        return None
    if asked is None and parts > 1:
        return Message("notice.parts", part=part.name, name=source.name, parts=parts)
    if asked is not None and (part.first, part.last) == tuple(asked):
        return Message("notice.chosen", part=part.name, name=source.name)
    return Message(f"notice.fits_{part.unit}", part=part.name, name=source.name)


__all__ = ["asked_range", "notice", "offsets", "parse_range", "part_of", "plan", "planned_parts", "select", "span_of",
           "span_text", "unit_name", "unit_total", "units"]
