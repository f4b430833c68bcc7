"""A conversation to keep: one JSON structure for `kvqa ask --json`, the app's download and the API's /export, and
the same as Markdown for people.

{"model", "engine", "dtype", "weights", "kv_cache", "exact_vs_recompute", "guarantee",
 "document": {"name", "pages", "chars"}, "context_tokens", "prefill_s", "read_s", "cache_bytes", "cache_source",
 "parts": [{"unit", "first", "last", "tokens"}], "answers": [{"question", "answer", "question_tokens", "new_tokens",
 "ttft_s", "answer_s", "stop_reason", "sources": [source_dict...], "unsupported", "part": {"unit", "first", "last"},
 "also": {"unit", "first", "last"} or null}]}
("also": another part of a long document that matched the question too, where the answer may be instead.)
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from kvqa.documents.parts import unit_name, unit_total
from kvqa.documents.reading import Document, Part
from kvqa.evidence.sources import Source, source_dict

from .messages import Message
from .timing import Timings

FORMAT = "kvqa-conversation-1"


def part_dict(part: Part | None, document: Document) -> dict:
    """The part an answer came from, 1-based and inclusive, in the document as loaded (all of it when whole)."""
    if part is not None:
        return {"unit": part.unit, "first": part.first, "last": part.last}
    return {"unit": unit_name(document), "first": 1, "last": unit_total(document)}


def composed_dict(composed, document: Document) -> dict | None:
    """A composed answer's cache (kvqa.session.gather.Composed) as JSON: the parts it was cut from, the passages it
    held (characters of the document as loaded, 0-based, end exclusive), its tokens, how long composing took, and
    that it is approximate (exact: false); None for an answer from one part or the whole."""
    if composed is None:
        return None
    return {"parts": [part_dict(p, document) for p in composed.parts], "part_numbers": list(composed.numbers),
            "held": [[start, end] for start, end, _ in composed.held], "tokens": composed.tokens,
            "seconds": round(composed.seconds, 3), "exact": False}


def parts_list(document: Document, parts: Sequence[tuple[int, int, int]]) -> list[dict]:
    """A document's parts (kvqa.session.parts.prefill_parts: first, last, tokens) as JSON, in its unit."""
    return [{"unit": unit_name(document), "first": a, "last": b, "tokens": tokens} for a, b, tokens in parts]


def document_dict(document: Document) -> dict:
    return {"name": document.name, "pages": len(document.page_starts) or None, "chars": len(document.text)}


def answer_dict(question: str, text: str, timings: Timings, *, stop_reason: str, sources: Sequence[Source],
                unsupported: Sequence[str], part: dict, also: dict | None = None, unquoted: Sequence[str] = (),
                short: str = "", composed: dict | None = None) -> dict:
    """One answer as JSON (a serving engine's own count of cached prompt tokens added when it gave one). composed:
    the parts its cache was composed of (composed_dict), None when one part (or the whole) answered."""
    t = timings
    return {"question": question, "answer": text, "short": short, "question_tokens": t.question_tokens,
            "new_tokens": t.new_tokens,
            "ttft_s": t.ttft_s, "answer_s": t.answer_s, "stop_reason": stop_reason,
            "sources": [source_dict(s) for s in sources], "unsupported": list(unsupported),
            "unquoted": list(unquoted), "part": part,
            "also": also, "composed": composed,
            **({"cached_tokens": t.cached_tokens} if t.cached_tokens is not None else {})}


def range_read(read, document) -> dict:
    """The pages (or characters) read of the document, for `kvqa ask --json`: {"pages_read": [1, 13],
    "pages_total": 36} (or chars_...); nothing for a whole text."""
    if read.part is not None:
        key = "pages" if read.part.unit == "pages" else "chars"
        return {f"{key}_read": [read.part.first, read.part.last], f"{key}_total": read.part.total}
    if document.page_starts:
        return {"pages_read": [1, len(document.page_starts)], "pages_total": len(document.page_starts)}
    return {}


def session_dict(session) -> dict:
    """A Session's document, parts and every question so far, as JSON (kvqa.session.session.Session)."""
    info, doc, source = session.engine.info, session.prefilled, session.whole
    return {
        "format": FORMAT, "model": info.model, "engine": info.kind, "dtype": info.dtype,
        "weights": info.weights, "kv_cache": info.kv_cache or info.dtype,  # what the cache holds: int8, or the dtype
        "exact_vs_recompute": info.exact_vs_recompute, "guarantee": str(info.guarantee),
        "document": document_dict(source),
        "context_tokens": doc.tokens if doc else 0, "prefill_s": doc.prefill_s if doc else 0.0,
        "read_s": doc.first_read_s if doc else None, "cache_bytes": doc.cache_bytes if doc else 0,
        "cache_source": session.origin,
        "parts": parts_list(source, session.parts),
        "answers": [answer_dict(t.question, t.answer, t.timings, stop_reason=t.stop_reason, sources=t.sources,
                                unsupported=t.unsupported, unquoted=t.unquoted, short=t.short,
                                part=part_dict(t.part, source),
                                also=part_dict(t.also, source) if t.also else None,
                                composed=composed_dict(t.composed, source))
                    for t in session.turns],
    }


def summary_table(conversation: dict) -> str:
    """The promise, how the document was read, and each answer's figures, for a terminal (`kvqa ask`)."""
    how = "restored from the store" if conversation["cache_source"] == "disk" else "prefill"
    read = ("no cache: every question recomputed the whole prompt" if conversation["cache_source"] is None else
            f"{how}: {conversation['context_tokens']:,} tokens once in {conversation['prefill_s']:.2f} s")
    lines = ["", conversation["guarantee"], "", read,
             f"{'question':<40} {'tokens in':>9} {'new':>5} {'TTFT s':>8} {'total s':>8}"]
    for a in conversation["answers"]:
        q = a["question"] if len(a["question"]) <= 40 else a["question"][:37] + "..."
        lines.append(f"{q:<40} {a['question_tokens']:>9,} {a['new_tokens']:>5} {a['ttft_s']:>8.3f} "
                     f"{a['answer_s']:>8.3f}")
    return "\n".join(lines)


def answer_notes(answer) -> str:
    """Under an answer in a terminal (`kvqa ask`): whether it repeated itself, its shortest phrase, what it names that
    the document lacks, and its sources, each quoted on one line."""
    lines = [f"\n   [{answer.stop_reason}]" if answer.stop_reason == "repeating" else ""]
    if answer.short:
        lines.append(f"   {Message('answer.short', phrase=answer.short)}")
    if answer.unsupported:
        lines.append(f"   {Message('answer.unsupported', items=', '.join(answer.unsupported))}")
    if answer.unquoted:
        lines.append(f"   {Message('answer.unquoted', items=', '.join(answer.unquoted))}")
    for n, source in enumerate(answer.sources, start=1):
        part = f"part {source.part}, " if source.part is not None else ""
        where = part + (f"page {source.page}, " if source.page else "")
        text = " ".join(source.text.split())
        quoted = text if len(text) <= 160 else text[:159] + "…"
        lines.append(f"   source {n} ({where}characters {source.start:,}-{source.end:,}): “{quoted}”")
    return "\n".join(lines)


def to_json(conversation: dict) -> str:
    return json.dumps(conversation, ensure_ascii=False, indent=1)


def from_json(text: str) -> dict:
    """A conversation written by to_json (or `kvqa ask --json`); raises ValueError when it is not one."""
    data = json.loads(text)
    if not isinstance(data, dict) or not isinstance(data.get("answers"), list) or "model" not in data:
        raise ValueError("not a kvqa conversation")
    return data


def to_markdown(conversation: dict) -> str:
    """The conversation for people: the document, then each question with its answer, flags, part, sources and
    timings."""
    document = conversation.get("document") or {}
    pages = f", {document['pages']} pages" if document.get("pages") else ""
    lines = [f"# {document.get('name', 'Document')}", "",
             f"{document.get('chars', 0):,} characters{pages}; model {conversation['model']} "
             f"({conversation['engine']}, {conversation['dtype']}). {conversation.get('guarantee', '')}".rstrip(), ""]
    parts = conversation.get("parts") or []
    if len(parts) > 1:
        lines += [f"Read in {len(parts)} parts: " + "; ".join(
            f"{p['unit']} {p['first']:,}-{p['last']:,}" for p in parts) + ".", ""]
    for n, a in enumerate(conversation["answers"], start=1):
        lines += [f"## {n}. {a['question']}", ""] + ([f"**{Message('answer.short', phrase=a['short'])}**", ""]
                                                      if a.get("short") else [])
        lines += [a["answer"].strip() or "(no answer)", ""]
        flags = []
        if a.get("stop_reason") in ("stopped", "repeating", "length"):
            flags.append({"stopped": "stopped by the user", "repeating": "stopped: it was repeating itself",
                          "length": "stopped at the token limit"}[a["stop_reason"]])
        if a.get("unsupported"):
            flags.append("not found in the document: " + ", ".join(a["unsupported"]))
        if a.get("unquoted"):
            flags.append("not in the passage quoted to the model: " + ", ".join(a["unquoted"]))
        part = a.get("part")
        if len(parts) > 1 and part:
            flags.append(f"from {part['unit']} {part['first']:,}-{part['last']:,}")
        also = a.get("also")
        if also:
            flags.append(f"{also['unit']} {also['first']:,}-{also['last']:,} matched the question too")
        lines += [f"*{'; '.join(flags)}*", ""] if flags else []
        for s in a.get("sources", []):
            where = f"page {s['page']}" if s.get("page") else f"characters {s['start'] + 1:,}-{s['end']:,}"
            quoted = " ".join(s["text"].split())
            lines += [f"> {quoted}", f"> — {where}", ""]
        lines += [f"<sub>first token {a['ttft_s']:.2f} s · total {a['answer_s']:.2f} s · {a['new_tokens']} tokens · "
                  f"{a['question_tokens']} question tokens</sub>", ""]
    return "\n".join(lines).rstrip() + "\n"
