"""The evidence viewer beside the chat: every source of the conversation's answers to choose from, and the chosen one
on its PDF page (rendered, the passage highlighted) or in its surrounding text."""

from __future__ import annotations

import html

import gradio as gr

from kvqa.documents.pages import render_page, text_context
from kvqa.documents.parts import select
from kvqa.messages import say
from kvqa.session.service import Service
from kvqa.session.session import Session
from kvqa.ui import unchanged
from kvqa.ui.answers import source_place
from kvqa.ui.page import Page


def evidence_choices(session: Session | None, lang: str = "en") -> list[tuple[str, str]]:
    """(label, "turn:source") for every source of the current conversation's answers, oldest first."""
    choices = []
    for t, turn in enumerate(session.conversation() if session else []):
        for n, source in enumerate(turn.sources):
            choices.append((f"Q{t + 1} · {n + 1}. {source_place(source, lang)} · {turn.question[:40]}", f"{t}:{n}"))
    return choices


class EvidenceView:
    """The evidence viewer (page.evidence_pick, page.evidence_page, page.evidence_text) and its handlers; the PDF
    pages it shows are the sessions' notes (Service.notes)."""

    def __init__(self, service: Service, page: Page):
        self.service, self.page = service, page

    def evidence(self, session: Session | None, pick: str | None, lang: str = "en") -> dict:
        """The evidence viewer: every source of the conversation's answers to choose from, and the chosen one (by
        default the latest answer's first) on its PDF page, highlighted, or in its surrounding text."""
        choices = evidence_choices(session, lang)
        if not choices:
            return {self.page.evidence_pick: gr.update(choices=[], value=None), self.page.evidence_page: gr.update(
                value=None, visible=False), self.page.evidence_text: say("evidence.none", lang)}
        values = [v for _, v in choices]
        conversation = session.conversation()
        latest = f"{len(conversation) - 1}:0"  # the latest answer's first source, when it has one
        pick = pick if pick in values else latest if latest in values else values[-1]
        t, n = (int(x) for x in pick.split(":"))
        turn = conversation[t]
        source = turn.sources[n]
        page, note = None, ""
        pdf = self.service.notes(session).pdf
        if pdf is not None and source.page is not None:
            try:
                shown = render_page(pdf, source.page, source.text, source.marked,
                                    scan=session.whole.scans.get(source.page))
                page = shown.image
                note = say("evidence.page" if shown.highlighted else "evidence.page_not_found", lang,
                           page=source.page, seconds=shown.seconds)
            except ValueError as e:
                note = say("evidence.no_render", lang, page=source.page, why=str(e))
        # offsets into the whole document (a source of a document read in parts), else into what was read
        whole = source.part is not None or not turn.part
        read = session.whole if whole else select(session.whole, turn.part.first, turn.part.last)
        context = text_context(read.text, source.start, source.end, source.mark, answer=source.bold,
                               short=source.short is not None)
        return {self.page.evidence_pick: gr.update(choices=choices, value=pick),
                self.page.evidence_page: gr.update(value=page, visible=page is not None),
                self.page.evidence_text: (f"<p class='kvqa-evidence-note'>{html.escape(note)}</p>" if note else "")
                + context}

    def on_evidence(self, pick, session, lang="en") -> dict:
        """UI: show another source in the evidence viewer."""
        return self.evidence(session, pick, lang)

    def on_chat_select(self, session, lang="en", selected: gr.SelectData = None) -> dict:
        """UI: a click on a message shows its turn's first source in the evidence viewer."""
        index = selected.index if selected is not None else None
        index = index[0] if isinstance(index, (list, tuple)) else index
        if session is None or not isinstance(index, int):
            return unchanged()
        turn = index // 2  # a user message, then its answer, per turn of the conversation
        if not 0 <= turn < len(session.conversation()) or not session.conversation()[turn].sources:
            return unchanged()
        return self.evidence(session, f"{turn}:0", lang)

