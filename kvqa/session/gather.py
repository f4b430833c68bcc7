"""A question on a long document answered from its evidence in every part at once: the passages
Evidence.gathered chooses (its best ones and its second hop), cut from the caches of the parts that hold them (the
part in memory, and the parts read before, restored from the store one at a time) and composed into one cache
(Engine.compose) without reading any part again. Approximate: a run was read in its own part and never saw the runs
composed before it (docs/quality.md says by how much); a question whose passages lie in one part is answered from
that part, exactly. Decoding.gather_tokens sets how much the composed cache holds (0: never composed)."""

from __future__ import annotations

import time
from dataclasses import dataclass, replace

from kvqa.documents.parts import offsets, part_of, select
from kvqa.documents.reading import Document, Part
from kvqa.engines import Engine
from kvqa.errors import DocumentTooLong
from kvqa.evidence.evidence import Evidence
from kvqa.results import PrefilledDocument
from kvqa.session.parts import Parts


@dataclass(frozen=True)
class Composed:
    """What a composed answer was answered from, for its Turn: the parts its cache was cut from (named), the runs of
    the document it held ([start, end) in the whole text, the part index each came from), its tokens and how long
    cutting and composing took (restoring the parts from the store included)."""

    parts: tuple[Part, ...]
    numbers: tuple[int, ...]  # the parts' numbers (1-based), as the status and the sources name them
    held: tuple[tuple[int, int, int], ...]
    tokens: int
    seconds: float


@dataclass(frozen=True)
class Gathered:
    """A question's composed cache, and its account for the Turn."""

    prefilled: PrefilledDocument
    composed: Composed


def gather(engine: Engine, evidence: Evidence, whole: Document, parts: Parts, current: PrefilledDocument,
           current_index: int) -> Gathered | None:
    """The question's passages of every part to be had without reading one (current, in memory; those read before,
    in the store), about engine.options.gather_tokens of them, composed into one cache; None when that is 0, the
    engine cannot compose, a part is pinned, or they lie in fewer than two parts (the question's part then answers
    alone, exactly). A passage in a part not read yet is left out (its turn may quote it: Evidence.elsewhere)."""
    tokens = min(getattr(engine.options, "gather_tokens", 0), len(current.ids) * 9 // 10)  # room for the estimate
    if len(parts) < 2 or parts.pinned or tokens <= 0 or not engine.info.composes:
        return None
    ready = parts.ready_indexes(current_index, stored=engine.info.keeps_caches)
    chars = tokens * len(whole.text) // max(sum(count for *_, count in parts), 1)
    ranges = {index: parts.read_range(index) for index in sorted(ready) if index != current_index}
    spans = {current_index: current.document.span} | {i: offsets(whole, *r) for i, r in ranges.items() if r}
    placed = []
    for start, end in evidence.gathered(chars):
        holding = [i for i, (a, b) in spans.items() if a <= start and end <= b]
        if holding:
            placed.append((start, end, current_index if current_index in holding else holding[0]))
    used = tuple(sorted({part for *_, part in placed}))
    if len(used) < 2:
        return None
    started = time.perf_counter()
    cut = {}
    for index in used:  # one part in memory at a time besides the current one
        read = current if index == current_index else engine.prefill(select(whole, *ranges[index]))
        at = read.document.start
        cut[index] = iter(engine.cut(read, [(a - at, b - at) for a, b, part in placed if part == index]))
        del read
    runs = [next(cut[part]) for *_, part in placed]
    held = replace(whole, part=None, start=0, page_starts=(), pages=None)
    try:
        prefilled = engine.compose(current, runs, held)
    except DocumentTooLong:  # the runs came out longer than estimated: the part answers alone
        return None
    names = tuple(part_of(whole, *parts[index][:2]) for index in used)
    return Gathered(prefilled, Composed(names, tuple(index + 1 for index in used), tuple(placed), len(prefilled.ids),
                                        time.perf_counter() - started))
