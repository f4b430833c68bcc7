"""Questions from the page: taken at once (shown in the chat, waiting, while a document or a model loads or another
answer is written), then answered in turn, streamed into the chat, then every panel; asking again from the other part
that matched; remembering the conversation, starting a new one, and Stop (the answer being written, and every question
still waiting)."""

from __future__ import annotations

import time

import gradio as gr

from kvqa.errors import KvqaError, QuestionError
from kvqa.messages import render, say
from kvqa.session.session import Session, cache_origin
from kvqa.ui import unchanged, warn
from kvqa.ui.answers import chat_messages
from kvqa.ui.tabs import Tab, Waiting

WAIT_TICK_S = 0.5  # how often a question waiting for a read shows how far the read is
ANNOUNCE_S = 0.5  # how long a question with no document waits for a read asked for at the same moment


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


class Asking:
    """Part of KvqaApp: the question handlers, for its components question, chat and also_btn (and its panels)."""

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
        return {self.question: "", self.chat: chat_messages(session, lang) + waiting_messages(tab, lang)}

    def on_answer(self, session, baseline, remember=False, lang="en", ready_only=False, request: gr.Request = None,
                  progress=gr.Progress()):
        """UI, after on_question, one at a time: answer the tab's oldest waiting question, first waiting for the
        document (or the model) being read, its progress shown in the chat; nothing when Stop withdrew it."""
        tab = self.tabs.of(request)
        waiting = tab.take()
        if waiting is None:
            yield unchanged()
            return
        try:
            session = yield from self.wait_for_read(tab, waiting, session, lang)
            if waiting.withdrawn:
                yield {self.chat: chat_messages(session, lang) + waiting_messages(tab, lang)}
                return
            yield from self.on_ask(waiting.question, session, baseline, remember, lang, ready_only, progress,
                                   part=waiting.part, tab=tab)
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
                yield {self.chat: chat_messages(session, lang) + waiting_messages(tab, lang, taken=True)}
            if read is None:
                time.sleep(WAIT_TICK_S / 5)  # asked for, not begun: another tab's read goes first
                continue
            read.done.wait(WAIT_TICK_S)
            if read.done.is_set() and read.session is not None:
                session = read.session
        return session

    def on_ask(self, question, session, baseline, remember=False, lang="en", ready_only=False, progress=gr.Progress(),
               part=None, tab: Tab | None = None):
        """Stream the answer into the chat, then its latency. ready_only: a long document's question is answered
        from the best part ready rather than waiting for the part that matches it best to be read. part: from this
        part instead (an index into session.parts). tab: the browser tab's questions still waiting, shown below."""
        if session is not None:
            session.remember, session.ready_only = bool(remember), bool(ready_only)
        if session is None or session.document is None:
            after = waiting_messages(tab, lang)
            yield warn(QuestionError("question.no_document"), lang, put_back={self.question: question} | (
                {self.chat: chat_messages(session, lang) + after} if tab is not None else {}))
            return
        chat_before = chat_messages(session, lang)
        history = chat_before + [{"role": "user", "content": question}, {"role": "assistant", "content": ""}]

        def rebuilt(d):
            return gr.Info(say("toast.rebuilt", lang, origin=render(cache_origin(session), lang)))

        def part_read(d):
            return gr.Info(f"{render(session.notice, lang)} ({render(cache_origin(session), lang)})")

        reading = say("progress.reading_part" if len(session.parts) > 1 else "progress.reading_again", lang)
        if tab is not None:
            tab.answering = True
        try:
            with session.ask(question, baseline=bool(baseline), on_rebuild=rebuilt, on_part=part_read, part=part,
                             progress=lambda f: progress(f, desc=reading)) as pieces:
                text = ""
                for piece in pieces:
                    text += piece
                    history[-1] = {"role": "assistant", "content": text}
                    yield {self.question: "", self.chat: history + waiting_messages(tab, lang)}  # only the chat
        except KvqaError as e:  # the chat goes back to what it was; the question goes back to its box
            yield warn(e, lang, put_back={self.question: question,
                                          self.chat: chat_before + waiting_messages(tab, lang)})
            return
        finally:
            if tab is not None:
                tab.answering = False
        yield self.panels(session, lang, tab=tab)

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
        yield from self.on_ask(session.conversation()[-1].question, session, baseline, remember, lang, ready_only,
                               progress, part=session.also_index, tab=tab)

    @staticmethod
    def also_button(session: Session | None, lang: str = "en"):
        """'Ask again from part 3 (pages 20-30)': shown when another part matched the last question too."""
        also = session.also_index if session is not None else None
        if also is None:
            return gr.update(visible=False)
        return gr.update(visible=True, value=say("answer.ask_again_from", lang, index=also + 1,
                                                 part=session.conversation()[-1].also.name))

    @staticmethod
    def on_remember(remember, session) -> None:
        """UI: follow-up questions on or off (off: every question is read after the document alone)."""
        if session is not None:
            session.remember = bool(remember)

    def on_new_conversation(self, session, lang="en") -> dict:
        """UI: start a new conversation on the same document, without reading it again."""
        if session is not None:
            session.new_conversation()
        return {self.chat: chat_messages(session, lang), self.also_btn: self.also_button(session, lang)}

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
