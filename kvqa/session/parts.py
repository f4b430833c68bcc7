"""A Session's long document: its parts (Parts, held by the session), what the status says of the part a question
went to (routed_notice; kvqa.evidence.evidence.Evidence.route chooses it), and the reading of one part
(prefill_part), which a question that needs another part and the read ahead both use.

The session (kvqa.session.session) owns the locks and the caches; what is decided here is given what it uses.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import NamedTuple

from kvqa.documents.parts import counted_units, part_of, plan, select, unit_name, unit_total
from kvqa.documents.reading import Document, Part
from kvqa.errors import DocumentTooLong, QuestionError
from kvqa.evidence.routing import Routed
from kvqa.messages import Message
from kvqa.results import PrefilledDocument

RETRIES = 4  # the part's real prompt may be a few tokens longer than its counted pages: drop a unit and try again


class Reading(NamedTuple):
    """What prefill_parts read: the part read now, the parts the document is cut into (first, last, tokens) and the
    document they count in (the one given, or it in_characters when one of its pages alone does not fit)."""

    prefilled: PrefilledDocument
    parts: list[tuple[int, int, int]]
    whole: Document


def prefill_part(prefill: Callable[[Document], PrefilledDocument], count_tokens: Callable[[str], int],
                 document: Document, *, first: int | None = None, last: int | None = None) -> PrefilledDocument:
    """Prefill the document, or its pages/characters first..last when given; when that does not fit the model's
    context, the longest run of whole pages (or paragraphs, or finer: kvqa.documents.parts) from its start that does.
    The PrefilledDocument's document then carries a Part."""
    return prefill_parts(prefill, count_tokens, document, first=first, last=last).prefilled


def prefill_parts(prefill: Callable[[Document], PrefilledDocument], count_tokens: Callable[[str], int],
                  document: Document, *, first: int | None = None, last: int | None = None) -> Reading:
    """prefill_part(), and the parts first..last is cut into to be read whole, as (first, last, tokens) in the
    document's unit: consecutive runs of whole units that each fit the model (counted), neighbours sharing one, the
    first one the part read now. One part when it all fits. A document whose one page alone does not fit is cut
    in characters (Reading.whole says so). Raises DocumentTooLong only when the model's room is so small that not
    even a hundred characters fit."""
    whole = (1, unit_total(document))
    first, last = first or whole[0], last or whole[1]
    try:
        doc = prefill(select(document, first, last))
        return Reading(doc, [(first, last, doc.tokens)], document)
    except DocumentTooLong as error:
        if error.limit is None:  # the memory budget refused it, not the context: no part is chosen for the user
            raise
        too_long = error
    counted = counted_units(document, first, last, count_tokens, too_long.limit, prompt_tokens=too_long.tokens or 0)
    document, first, spans, counts, room = counted.document, counted.first, counted.spans, counted.counts, counted.room
    overhead = too_long.limit - room
    take, used = 0, 0
    while take < len(spans) and used + counts[take] <= room:
        used += counts[take]
        take += 1
    for _ in range(RETRIES):
        if take == 0:
            break
        try:
            doc = prefill(select(document, first, spans[take - 1][1]))
        except DocumentTooLong as error:
            if error.limit is None:
                raise
            take -= 1
            continue
        return Reading(doc, [(a, b, tokens + overhead) for a, b, tokens in plan(spans, counts, room, first_take=take)],
                       document)
    raise DocumentTooLong("part.first_unit_too_long", tokens=too_long.tokens, limit=too_long.limit,
                          unit_one=Message("unit.paragraph"), unit=Message(f"unit.{unit_name(document)}"))


class Parts:
    """A document's parts, as read one at a time: (first, last, tokens) each in the document's unit, whether the user
    chose one (pinned: questions are not routed to another), and how each part read here was had (reads)."""

    def __init__(self, spans: list[tuple[int, int, int]] | None = None, *, pinned: bool = False,
                 reads: dict[tuple[int, int], Message] | None = None):
        self.spans = list(spans or [])
        self.pinned = pinned
        self.reads: dict[tuple[int, int], Message] = dict(reads or {})  # (first, last) -> how it was read

    def __len__(self) -> int:
        return len(self.spans)

    def __iter__(self) -> Iterator[tuple[int, int, int]]:
        return iter(self.spans)

    def __getitem__(self, index: int) -> tuple[int, int, int]:
        return self.spans[index]

    def __eq__(self, other) -> bool:
        return list(self.spans) == list(other)

    def __repr__(self) -> str:
        return f"Parts({self.spans!r}, pinned={self.pinned})"

    def index_of(self, first: int, last: int) -> int | None:
        """Which part is units first..last, or None when none is."""
        return next((i for i, (a, b, _) in enumerate(self.spans) if (a, b) == (first, last)), None)

    def index_read(self, read: Document | None) -> int:
        """Which part `read` (the document as read now) is: 0 when the document is one part. By its first unit: a
        part whose prompt came out a few tokens over is read a unit shorter (prefill_part)."""
        part = read.part if read is not None else None
        if part is None or len(self.spans) < 2:
            return 0
        return next((i for i, (a, _, _) in enumerate(self.spans) if a == part.first), 0)

    def asked(self, part: Part) -> int:
        """The index of a part the user asked for by its range; QuestionError naming the parts when it is none."""
        index = self.index_of(part.first, part.last)
        if index is None:
            raise QuestionError("question.not_a_part", range=f"{part.first}-{part.last}", parts=self.listed())
        return index

    def listed(self) -> str:
        """'1-13, 13-25, 25-36'."""
        return ", ".join(f"{a}-{b}" for a, b, _ in self.spans)

    def read_range(self, index: int) -> tuple[int, int] | None:
        """The units part `index` was read as here (a part may be read a unit shorter: prefill_part), or None."""
        first = self.spans[index][0]
        return next(((a, b) for a, b in self.reads if a == first), None)

    def has(self, first: int) -> bool:
        """Whether the part starting at unit `first` was read (or restored) for this document."""
        return any(a == first for a, _ in self.reads)

    def ready_indexes(self, in_memory: int | None, *, stored: bool) -> set[int]:
        """The parts a question can have without reading one: the part in memory (its index, or None) and, with an
        engine that keeps caches (stored), those read or restored here before, which its store holds."""
        ready = {in_memory} if in_memory is not None else set()
        if stored:
            ready |= {i for i, (first, _, _) in enumerate(self.spans) if self.has(first)}
        return ready

    @property
    def ready(self) -> int:
        """How many parts were read (or restored) here: in memory, or in the store."""
        return sum(self.has(first) for first, _, _ in self.spans)


def routed_notice(routed: Routed, whole: Document, parts: Parts, *, asked: bool, switched: bool, said: dict,
                  before: Message | None) -> tuple[Message | None, Part | None]:
    """What the status says about the part a question was answered from (before: what it said until now), and the
    other part of `whole` that matched the question too (routed.also, named), if any."""
    also = part_of(whole, *parts[routed.also][:2]) if routed.also is not None else None
    if asked:
        return Message("notice.routed_asked", **said), also
    if routed.target != routed.best:
        return Message("notice.routed_ready", best=routed.best + 1, **said), also
    if also is not None:
        return Message("notice.routed_also", also=routed.also + 1, also_part=also.name, **said), also
    if switched or (before is not None and before.key in ("notice.routed_ready", "notice.routed_also",
                                                         "notice.routed_asked")):
        return Message("notice.routed", **said), also  # (no longer short of a better part)
    return before, also
