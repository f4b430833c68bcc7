"""Documents longer than the model reads: read the part that fits, say which, and let the user choose another.

A PDF (or any document of pages: slides, a Word file's or web page's sections, EPUB chapters) is cut at page
boundaries, text at paragraph boundaries; parts are named in pages or characters. When one page alone is longer than
the model reads (a Word file without page breaks, a long web page), the document is cut in characters instead
(in_characters): at paragraphs, then line ends (a table's rows), then sentences, then spaces, and only where a run
has none of those, inside it; its parts still say which pages they lie on and the words they start with.
Nothing is truncated silently: a Document holding a part carries a Part, and parts.notice() says what was read.
Token counts come from counting each page or paragraph once; only the chosen part's prompt is tokenized again.
"""

from __future__ import annotations

import bisect
import re
from collections.abc import Callable
from dataclasses import replace
from typing import NamedTuple

from kvqa.documents.reading import Document, Part
from kvqa.errors import DocumentError
from kvqa.messages import Message
from kvqa.prompt import system_text

MAX_UNIT_CHARS = 4000  # a paragraph longer than this is cut at line ends, sentences or spaces, at most this long
OPENING_CHARS = 40  # the words a part of a document of pages is named by ("from 'Network Configuration'")
_SENTENCE_END = re.compile(r"[.!?][\"'”’)\]]*\s+|[。！？；][”’）」』]*")
_SPACES = re.compile(r"\s+")


def unit_name(document: Document) -> str:
    """What its parts are counted in: "pages" for a document of pages, else (or in_characters) "characters"."""
    return "pages" if document.page_starts and not document.in_characters else "characters"


def unit_total(document: Document) -> int:
    """How many of its units (unit_name) the document has: pages of a PDF, characters of a text."""
    return len(document.page_starts) if unit_name(document) == "pages" else len(document.text)


def in_characters(document: Document) -> Document:
    """The document with its parts counted in characters: one of its pages alone does not fit the model."""
    return document if unit_name(document) == "characters" else replace(document, in_characters=True)


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
    if chars:  # characters are an address in any document
        return parse_range(chars, in_characters(document))
    return parse_range(pages, document) if pages else None


def part_of(document: Document, first: int, last: int) -> Part:
    """Pages (PDF) or characters (text) first..last of the document, named as a Part ("pages 20-30 of 36"; characters
    of a document of pages with the pages they lie on and their opening words)."""
    unit = unit_name(document)
    if unit == "pages" or not document.page_starts:
        return Part(unit, first, last, unit_total(document))
    pages = (page_of(document, first - 1), page_of(document, max(first, last) - 1))
    opening = _SPACES.sub(" ", document.text[first - 1: min(last, first - 1 + 4 * OPENING_CHARS)]).strip()
    if len(opening) > OPENING_CHARS:
        cut = opening.rfind(" ", OPENING_CHARS // 2, OPENING_CHARS)
        opening = opening[: cut if cut > 0 else OPENING_CHARS] + "…"
    return Part(unit, first, last, unit_total(document), pages=pages, opening=opening)


def page_of(document: Document, offset: int) -> int:
    """The page (1-based) of a document of pages that character `offset` (0-based) of its text lies on."""
    return max(1, bisect.bisect_right(document.page_starts, offset))


def select(document: Document, first: int, last: int) -> Document:
    """The document's pages (PDF) or characters (text) first..last, 1-based and inclusive, as a Document."""
    part = part_of(document, first, last)
    start, end = _page_text(document, first, last) if unit_name(document) == "pages" else (first - 1, last)
    text = document.text[start: end]
    if first == 1 and part.last == part.total:
        return document
    return replace(document, text=text, page_starts=(), part=part, start=document.start + start)


def units(document: Document, first: int, last: int, *, max_chars: int = MAX_UNIT_CHARS) -> list[tuple[int, int]]:
    """The (first, last) spans, in the document's unit, that a part may end after: each page of a PDF, each
    paragraph of a text (one over max_chars cut finer: _cut). They cover first..last, every character."""
    if unit_name(document) == "pages":
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
    """[start, end) as spans of at most max_chars, each cut after the last line end in it (so a table's row stays
    whole), else after its last sentence, else after its last space, else (a run with none) at max_chars."""
    spans = []
    while end - start > max_chars:
        spans.append((start, cut := _cut_point(text, start, start + max_chars)))
        start = cut
    return spans + [(start, end)]


def _cut_point(text: str, start: int, limit: int) -> int:
    """Where to end a span that starts at `start` and may reach `limit`: see _cut."""
    newline = text.rfind("\n", start + 1, limit)
    if newline > start:
        return newline + 1
    ends = [m.end() for m in _SENTENCE_END.finditer(text, start + 1, limit)]
    if ends:
        return ends[-1]
    space = text.rfind(" ", start + 1, limit)
    return space + 1 if space > start else limit


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


class Counted(NamedTuple):
    """A document's units first..last, counted (counted_units): the document they are in (in_characters when one
    page alone does not fit), first..last in its unit, the spans a part may end after, their tokens, and the tokens
    a part's text may have (room: the model's limit less the prompt around the text)."""

    document: Document
    first: int
    last: int
    spans: list[tuple[int, int]]
    counts: list[int]
    room: int


def counted_units(document: Document, first: int, last: int, count_tokens: Callable[[str], int], limit: int, *,
                  prompt_tokens: int = 0) -> Counted:
    """The units of first..last a part may end after, each with its tokens counted once, for a model that reads
    `limit` tokens; prompt_tokens: what the prompt of first..last came to when it was refused (0: unknown), which
    says what the prompt around the text takes. When one page alone is over the room, the document comes back
    in_characters, first..last as the characters of those pages, cut at paragraphs (or finer: _cut)."""
    max_chars = max(100, min(MAX_UNIT_CHARS, limit // 4))  # fits even at 3 tokens a character (rare CJK)
    spans = units(document, first, last, max_chars=max_chars)
    counts = [count_tokens(span_text(document, s)) for s in spans]
    overhead = max(prompt_tokens - sum(counts), 0) if prompt_tokens else count_tokens(system_text("")) + 32
    room = limit - overhead
    if unit_name(document) == "pages" and max(counts, default=0) > room:
        start, end = _page_text(document, first, last)
        document, first, last = in_characters(document), start + 1, end
        spans = units(document, first, last, max_chars=max_chars)
        counts = [count_tokens(span_text(document, s)) for s in spans]
    return Counted(document, first, last, spans, counts, room)


def planned_parts(document: Document, count_tokens: Callable[[str], int], room: int) -> int:
    """How many parts a document makes when `room` tokens (the context less the reserve) are read at a time, before
    reading it: its pages or paragraphs counted as prefill_parts() counts them, around the prompt's own tokens."""
    counted = counted_units(document, 1, unit_total(document), count_tokens, room)
    return len(plan(counted.spans, counted.counts, counted.room))


def _page_text(document: Document, first: int, last: int) -> tuple[int, int]:
    """[start, end) of pages first..last's text, the newlines before it left out (as select() leaves them out)."""
    start, end = offsets(document, first, last)
    return start + len(document.text[start:end]) - len(document.text[start:end].lstrip("\n")), end


def offsets(document: Document, first: int, last: int) -> tuple[int, int]:
    """[start, end) in the document's text of its units first..last (pages, or 1-based characters)."""
    if unit_name(document) == "characters":
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


__all__ = ["Counted", "asked_range", "counted_units", "in_characters", "notice", "offsets", "page_of", "parse_range",
           "part_of", "plan", "planned_parts", "select", "span_text", "unit_name", "unit_total", "units"]
