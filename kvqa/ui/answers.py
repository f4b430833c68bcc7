"""An answer in the chat: its text, then the part it came from, what it names that the document lacks, its sources
(the first one quoted, every one folded below) and its figures, all in the language of the request."""

from __future__ import annotations

import html
import re

from kvqa.messages import render, say
from kvqa.session.session import Session
from kvqa.ui.tabs import Tab


def latency_line(timings, *, stop_reason: str = "eos", follows: int = 0, lang: str = "en") -> str:
    t = timings
    drafted = ""
    if t.drafted_tokens:
        drafted = (say("answer.drafting_speedup", lang, kept=t.drafted_per_step, speedup=t.draft_speedup)
                   if t.draft_speedup else say("answer.drafting", lang, kept=t.drafted_per_step))
    stopped = say(f"answer.{stop_reason}", lang) if stop_reason in ("stopped", "repeating") else ""
    after = (say("answer.after_turn", lang) if follows == 1 else say("answer.after_turns", lang, turns=follows)
             if follows else "")
    figures = say("answer.latency", lang, ttft=t.ttft_s, total=t.answer_s, tokens=t.new_tokens,
                  rate=t.decode_tokens_per_s)
    return f"\n\n<sub>{figures}{drafted}{server_cache_note(t, lang)}{stopped}{after}</sub>"


def short_line(short: str, lang: str = "en") -> str:
    """Above an answer: its shortest phrase (kvqa.evidence.short), bold; nothing when none stands out."""
    if not short:
        return ""
    return f"<p class='kvqa-short'>{say('answer.short', lang, phrase=f'<b>{html.escape(short)}</b>')}</p>\n\n"


def part_line(part, lang: str = "en", composed=None) -> str:
    """Under an answer from a document cut into parts: which part it came from, or the parts its composed cache was
    cut from (kvqa.session.gather.Composed), said to be approximate."""
    if composed is not None:
        numbers = ", ".join(str(number) for number in composed.numbers)
        said = say("answer.composed", lang, parts=numbers, tokens=composed.tokens, seconds=composed.seconds)
        return f"\n\n<sub class='kvqa-composed'>{said}</sub>"
    return f"\n\n<sub>{say('answer.part', lang, part=render(part.name, lang))}</sub>" if part is not None else ""


def server_cache_note(t, lang: str = "en") -> str:
    """For answers from a serving engine: how much of the prompt came from its prefix cache, or that it did not say."""
    if t.prompt_tokens is None:
        return ""
    if t.cached_tokens is None:
        return say("answer.server_cache_unknown", lang)
    return say("answer.server_cache", lang, cached=t.cached_tokens, prompt=t.prompt_tokens)


def source_place(source, lang: str = "en") -> str:
    """Where a source lies: its page (else its characters), after its part when the document was read in parts."""
    where = (say("answer.page", lang, page=source.page) if source.page else
             say("answer.characters", lang, start=source.start + 1, end=source.end))
    return where if source.part is None else f"{say('answer.in_part', lang, part=source.part)} · {where}"


def sources_block(sources, lang: str = "en", unsupported=(), unquoted=()) -> str:
    """Under an answer: what it names that the document lacks, the figures it took from outside the passage quoted to
    the model, its first source shown ("From the document, page
    12: ...", the best-matching sentence marked), every source folded below, each with its page where there is one."""
    block = ""
    if unsupported:
        items = html.escape(", ".join(unsupported))
        block += f"\n\n<p class='unsupported'>⚠ {say('answer.unsupported', lang, items=items)}</p>"
    if unquoted:
        items = html.escape(", ".join(unquoted))
        block += f"\n\n<p class='unsupported unquoted'>⚠ {say('answer.unquoted', lang, items=items)}</p>"
    if not sources:
        return block
    first = sources[0]
    where = say("answer.from_page", lang, page=first.page) if first.page else say("answer.from_text", lang)
    if first.part is not None:
        colon = where[-1]
        where = f"{where[:-1]} ({say('answer.in_part', lang, part=first.part)}){colon}"
    block += f"\n\n<blockquote class='evidence'><b>{where}</b> {_marked_quote(first)}</blockquote>"
    items = []
    for source in sources:
        items.append(f"<li><b>{source_place(source, lang)}</b>: “{_marked_quote(source)}”</li>")
    return (block + f"\n\n<details class='sources'><summary>{say('answer.sources', lang, count=len(sources))}"
            f"</summary><ol>{''.join(items)}</ol></details>")


def _marked_quote(source) -> str:
    """The source's text on one line, HTML-escaped, its best-matching sentence in <mark> and the answer's shortest
    phrase in it, else its own words (Source.bold), in <strong class='kvqa-answer'> (kvqa-short too when it is the
    phrase), so a reader sees at a glance where the passage says it."""
    def flat(text):  # each run of whitespace as one space, kept where it was (none is added: CJK has no spaces)
        return html.escape(re.sub(r"\s+", " ", text))

    def within(span) -> tuple[int, int]:
        a, b = (span[0] - source.start, span[1] - source.start) if span else (0, 0)
        return (a, b) if 0 <= a < b <= len(source.text) else (0, 0)

    sentence, said = within(source.mark), within(source.bold)
    bold = "kvqa-answer kvqa-short" if source.short else "kvqa-answer"
    cuts = sorted({0, len(source.text), *sentence, *said})
    pieces = []
    for a, b in zip(cuts, cuts[1:]):
        piece = flat(source.text[a:b])
        if said[0] <= a and b <= said[1]:
            piece = f"<strong class='{bold}'>{piece}</strong>"
        if sentence[0] <= a and b <= sentence[1]:
            piece = f"<mark>{piece}</mark>"
        pieces.append(piece)
    return "".join(pieces).strip().replace("</mark><mark>", "")


def model_line(turn, current: str, lang: str = "en") -> str:
    """Under an answer given by another model than the session's now: which, and whether it stood in while a better
    model read the document (kvqa.session.takeover); nothing otherwise."""
    if turn.behind:
        said = say("answer.by_stand_in", lang, model=turn.model, behind=turn.behind)
    elif turn.model and turn.model != current:
        said = say("answer.by", lang, model=turn.model)
    else:
        return ""
    return f"\n\n<sub class='kvqa-model'>{said}</sub>"


def chat_messages(session: Session | None, lang: str = "en") -> list[dict]:
    """The current conversation (since "New conversation"); every turn stays in the latency table."""
    messages = []
    current = session.engine.info.model if session is not None and session.engine.loaded else ""
    for turn in (session.conversation() if session else []):
        messages.append({"role": "user", "content": turn.question})
        messages.append({"role": "assistant",
                         "content": short_line(turn.short, lang) + (turn.answer or "…")
                         + part_line(turn.part, lang, turn.composed)
                         + sources_block(turn.sources, lang, turn.unsupported, turn.unquoted)
                         + latency_line(turn.timings, stop_reason=turn.stop_reason, follows=turn.follows, lang=lang)
                         + model_line(turn, current, lang)})
    return messages


def waiting_messages(tab: Tab | None, lang: str = "en", *, taken: bool = False) -> list[dict]:
    """The questions waiting in the tab, each with why it waits: the read in flight (how far), or its turn; taken:
    the one being answered first too (while it waits for the read)."""
    if tab is None:
        return []
    read, messages = tab.read, []
    for waiting in tab.queued(taken=taken):
        note = (say("wait.read", lang, stage=read.stage or say("progress.reading", lang), percent=read.fraction * 100)
                if read is not None else say("wait.read_asked", lang) if tab.expected else say("wait.turn", lang))
        messages += [{"role": "user", "content": waiting.question},
                     {"role": "assistant", "content": f"<sub>⏳ {note}</sub>"}]
    return messages
