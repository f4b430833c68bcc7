"""Everything that shows a session on the page, by component: the status, the chat (with the tab's questions still
waiting), the latency panel, the evidence viewer, the ask-again button, the part box and the promise line. The read,
question and language handlers all show a session through one Panels."""

from __future__ import annotations

import gradio as gr

from kvqa.documents.parts import unit_name, unit_total
from kvqa.messages import Message, say
from kvqa.session.service import Service
from kvqa.session.session import Session
from kvqa.ui.answers import chat_messages, waiting_messages
from kvqa.ui.evidence import EvidenceView
from kvqa.ui.latency import latency_plot, latency_summary, latency_table
from kvqa.ui.page import Page
from kvqa.ui.status import StatusView
from kvqa.ui.tabs import Tab


def also_button(session: Session | None, lang: str = "en"):
    """'Ask again from part 3 (pages 20-30)': shown when another part matched the last question too."""
    also = session.also_index if session is not None else None
    if also is None:
        return gr.update(visible=False)
    return gr.update(visible=True, value=say("answer.ask_again_from", lang, index=also + 1,
                                             part=session.conversation()[-1].also.name))


class Panels:
    """The page's view of a session, given the service (its notes), the page and the status and evidence views."""

    def __init__(self, service: Service, page: Page, status: StatusView, evidence: EvidenceView):
        self.service, self.page, self.status, self.evidence = service, page, status, evidence

    def show(self, session: Session | None, lang: str = "en", *, reused: bool = False, tab: Tab | None = None) -> dict:
        """Everything that shows the session, by component (tab: the browser tab's questions still waiting, shown
        in the chat after the conversation)."""
        page = self.page
        estimate = self.service.notes(session).estimate if session is not None else None
        shown = {page.state: session, page.status: self.status.status_markdown(session, lang, reused=reused),
                 page.ahead_timer: gr.Timer(active=self.service.busy_behind(session)),
                 page.chat: chat_messages(session, lang) + waiting_messages(tab, lang),
                 page.summary: latency_summary(session, lang, estimate=estimate),
                 page.table: latency_table(session, lang), page.plot: latency_plot(session, lang),
                 page.also_btn: also_button(session, lang)} | self.evidence.evidence(session, None, lang)
        if session is not None:
            shown[page.promise_box] = self.status.promise(session, lang)
            if page.model_box is not None:
                shown[page.model_box] = self.service.model_of(session)
        return shown

    def part_box(self, session: Session | None, lang: str = "en") -> dict:
        """The part control, labelled in pages for a PDF and characters for text, showing what was read."""
        source = session.whole if session else None
        if source is None:
            return {}
        part = session.document.part
        value = f"{part.first}-{part.last}" if part else ""
        label = say("part.label", lang, unit=Message(f"unit.{unit_name(source)}"), total=unit_total(source))
        return {self.page.part: gr.update(label=label, value=value)}

    def chat(self, session: Session | None, lang: str, tab: Tab | None, *, taken: bool = False) -> list[dict]:
        """The chat: the conversation, then the tab's questions still waiting."""
        return chat_messages(session, lang) + waiting_messages(tab, lang, taken=taken)
