"""Questions from the page: taken at once (shown in the chat, waiting, while a document or a model loads or another
answer is written), then answered in turn, streamed into the chat, then every panel; asking again from the other part
that matched; remembering the conversation, starting a new one, and Stop (the answer being written, and every question
still waiting)."""

from __future__ import annotations

import threading
import time

import gradio as gr

from kvqa.documents.reading import Part
from kvqa.errors import KvqaError, QuestionError
from kvqa.messages import render, say
from kvqa.prompt import asked_in_chinese
from kvqa.session.session import Ask, Session
from kvqa.ui import unchanged, warn
from kvqa.ui.answers import chat_messages, waiting_messages
from kvqa.ui.latency import cache_origin
from kvqa.ui.page import Page
from kvqa.ui.panels import Panels, also_button
from kvqa.ui.tabs import Tab, Tabs, Waiting

WAIT_TICK_S = 0.5  # how often a question waiting for a read shows how far the read is
ANNOUNCE_S = 0.5  # how long a question with no document waits for a read asked for at the same moment


class Questions:
    """The question handlers, given the page, its panels and the tabs (each tab's questions waiting)."""

    def __init__(self, page: Page, panels: Panels, tabs: Tabs):
        self.page, self.panels, self.tabs = page, panels, tabs

    def on_question(self, question, session, lang="en", request: gr.Request = None) -> dict:
        """UI, at once when a question is asked: it joins the tab's waiting questions and shows in the chat; on_answer
        answers it in turn. Refused (the page as it was) when it is empty or there is no document and none coming."""
        tab = self.tabs.of(request)
        if not (question or "").strip():
            return warn(QuestionError("question.empty"), lang)
        if session is None or session.document is None:
            deadline = time.monotonic() + ANNOUNCE_S
            while not tab.coming and time.monotonic() < deadline:  # a read asked for the same moment, not yet seen
                time.sleep(0.05)
            if not tab.coming:
                return warn(QuestionError("question.no_document"), lang)
        tab.ask(question)
        return {self.page.question: "", self.page.chat: self.panels.chat(session, lang, tab)}

    def on_answer(self, session, baseline=False, remember=False, lang="en", ready_only=False,
                  request: gr.Request = None, progress=gr.Progress()):
        """UI, after on_question, one at a time: answer the tab's oldest waiting question, first waiting for the
        document (or the model) being read, its progress shown in the chat; nothing when Stop withdrew it."""
        tab = self.tabs.of(request)
        waiting = tab.take()
        if waiting is None:
            yield unchanged()
            return
        try:
            session = yield from self.wait_for_read(tab, waiting, session, lang)
            session = self.panels.service.choice.take_over(session)  # a better model's read behind it done: it answers
            if waiting.withdrawn:
                yield {self.page.chat: self.panels.chat(session, lang, tab)}
                return
            try:
                session = yield from self.reader_for(waiting.question, session, lang, tab, request, progress)
            except KvqaError as e:  # said in the question's language; the question goes back to its box
                yield warn(e, "zh" if asked_in_chinese(waiting.question) else "en", put_back={
                    self.page.question: waiting.question, self.page.chat: self.panels.chat(session, lang, tab)})
                return
            asked = self.asking(waiting.question, session, lang, progress, baseline=baseline, remember=remember,
                                ready_only=ready_only, part=waiting.part)
            yield from self.on_ask(asked, session, lang, tab=tab)
        finally:
            tab.done(waiting)

    def wait_for_read(self, tab: Tab, waiting: Waiting, session, lang: str):
        """While the tab's document (or model) is read: show how far it is, under the waiting question; the session
        to answer from afterwards (the one read, else the one before)."""
        shown = ()  # what the chat shows of the read: (stage, fraction), None while it is only asked for
        while tab.coming and not waiting.withdrawn:
            read = tab.read
            now = (read.stage, round(read.fraction, 2)) if read is not None else None
            if now != shown:
                shown = now
                yield {self.page.chat: self.panels.chat(session, lang, tab, taken=True)}
            if read is None:
                time.sleep(WAIT_TICK_S / 5)  # asked for, not begun: another tab's read goes first
                continue
            read.done.wait(WAIT_TICK_S)
            if read.done.is_set() and read.session is not None:
                session = read.session
        return session

    def reader_for(self, question: str, session: Session | None, lang: str, tab: Tab, request, progress):
        """The session to answer `question` in: this one, or (a question in a language its model does not read) a
        new one on an offered model that reads it, the document read there first while the question waits in the
        chat with the read's progress and its reason. Raises QuestionError saying what to do when the model was
        chosen or no offered model reads the question."""
        service = self.panels.service
        reader = service.choice.question_reader(session, question)
        if reader is None:
            return session
        done: dict = {}

        def read_again(read) -> None:
            try:
                done["session"] = service.choice.read_for_question(session, reader, request, lang, read.report)
            except BaseException as e:  # handed to the handler's thread, which says it
                done["error"] = e

        with tab.reading(progress) as read:
            read.report(0, desc=say("progress.switching", lang, model=reader[0], reason=render(reader[1], lang)))
            shown = (read.stage, 0.0)
            yield {self.page.chat: self.panels.chat(session, lang, tab, taken=True)}  # why it waits, at once
            worker = threading.Thread(target=read_again, args=(read,), name="kvqa-read-for-question", daemon=True)
            worker.start()
            while worker.is_alive():
                if (read.stage, round(read.fraction, 2)) != shown:
                    shown = (read.stage, round(read.fraction, 2))
                    yield {self.page.chat: self.panels.chat(session, lang, tab, taken=True)}
                worker.join(WAIT_TICK_S)
            read.session = done.get("session")
        if "error" in done:
            raise done["error"]
        return done["session"]

    @staticmethod
    def asking(question: str, session: Session | None, lang: str, progress=None, *, baseline=False, remember=False,
               ready_only=False, part: Part | None = None) -> Ask:
        """The question as the session takes it, from the page's boxes: its toasts when the cache is read again or
        another part is read first, and that read's progress, all in `lang`."""
        def rebuilt(d):
            return gr.Info(say("toast.rebuilt", lang, origin=render(cache_origin(session), lang)))

        def part_read(d):
            return gr.Info(f"{render(session.notice, lang)} ({render(cache_origin(session), lang)})")

        parts = len(session.parts) if session is not None else 1
        reading = say("progress.reading_part" if parts > 1 else "progress.reading_again", lang)
        return Ask(question, remember=bool(remember), ready_only=bool(ready_only), baseline=bool(baseline), part=part,
                   progress=(lambda f: progress(f, desc=reading)) if progress is not None else None,
                   on_rebuild=rebuilt, on_part=part_read)

    def on_ask(self, asked: Ask, session, lang="en", *, tab: Tab | None = None):
        """Stream the answer to `asked` into the chat, then every panel. tab: the browser tab's questions still
        waiting, shown below."""
        page = self.page
        if session is None or session.document is None:
            yield warn(QuestionError("question.no_document"), lang, put_back={page.question: asked.question} | (
                {page.chat: self.panels.chat(session, lang, tab)} if tab is not None else {}))
            return
        chat_before = chat_messages(session, lang)
        history = chat_before + [{"role": "user", "content": asked.question}, {"role": "assistant", "content": ""}]
        if tab is not None:
            tab.answering = True
        try:
            with session.ask(asked) as pieces:
                text = ""
                for piece in pieces:
                    text += piece
                    history[-1] = {"role": "assistant", "content": text}
                    yield {page.question: "", page.chat: history + waiting_messages(tab, lang)}  # and waiting
        except KvqaError as e:  # the chat goes back to what it was; the question goes back to its box
            yield warn(e, lang, put_back={page.question: asked.question,
                                          page.chat: chat_before + waiting_messages(tab, lang)})
            return
        finally:
            if tab is not None:
                tab.answering = False
        yield self.panels.show(session, lang, tab=tab)

    def on_ask_also(self, session, baseline, remember=False, lang="en", ready_only=False, request: gr.Request = None,
                    progress=gr.Progress()):
        """UI: ask the last question again, from the other part that matched it too (Session.also_index)."""
        if session is None or session.also_index is None:
            yield warn(QuestionError("question.no_document" if session is None else "question.nothing_to_ask_again"),
                       lang)
            return
        tab = self.tabs.of(request)
        if tab.queued():  # asked again only once the questions before it are answered
            yield warn(QuestionError("question.wait_first"), lang)
            return
        last = session.conversation()[-1]
        yield from self.on_ask(self.asking(last.question, session, lang, progress, baseline=baseline,
                                           remember=remember, ready_only=ready_only, part=last.also), session, lang,
                               tab=tab)

    def on_new_conversation(self, session, lang="en") -> dict:
        """UI: start a new conversation on the same document, without reading it again."""
        if session is not None:
            session.new_conversation()
        return {self.page.chat: chat_messages(session, lang), self.page.also_btn: also_button(session, lang)}

    def on_stop(self, session, lang="en", request: gr.Request = None) -> None:
        """UI: end the answer being written (the cache is left as it was) and withdraw the questions still waiting;
        a warning when there is neither."""
        tab = self.tabs.of(request)
        answering = tab.answering or (session is not None and session.answering)
        withdrawn = tab.withdraw()
        if session is not None:
            session.stop()
        if withdrawn:
            gr.Info(say("stop.withdrawn", lang, count=withdrawn))
        elif not answering:
            warn(QuestionError("stop.reading" if tab.read is not None else "stop.nothing"), lang)
