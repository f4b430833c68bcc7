"""Questions from the page: an answer streamed into the chat, then every panel; asking again from the other part that
matched; remembering the conversation, starting a new one, and stopping an answer."""

from __future__ import annotations

import gradio as gr

from kvqa.errors import KvqaError, QuestionError
from kvqa.messages import render, say
from kvqa.session import Session, cache_origin
from kvqa.ui import warn
from kvqa.ui.answers import chat_messages


class Asking:
    """Part of KvqaApp: the question handlers, for its components question, chat and also_btn (and its panels)."""

    def on_ask(self, question, session, baseline, remember=False, lang="en", ready_only=False, progress=gr.Progress(),
               part=None):
        """UI: stream the answer into the chat, then its latency. ready_only: a long document's question is answered
        from the best part ready rather than waiting for the part that matches it best to be read. part: from this
        part instead (an index into session.parts)."""
        if session is not None:
            session.remember, session.ready_only = bool(remember), bool(ready_only)
        if session is None:
            yield warn(QuestionError("question.no_document"), lang)
            return
        chat_before = chat_messages(session, lang)
        history = chat_before + [{"role": "user", "content": question}, {"role": "assistant", "content": ""}]

        def rebuilt(d):
            return gr.Info(say("toast.rebuilt", lang, origin=render(cache_origin(session), lang)))

        def part_read(d):
            return gr.Info(f"{render(session.notice, lang)} ({render(cache_origin(session), lang)})")

        reading = say("progress.reading_part" if len(session.parts) > 1 else "progress.reading_again", lang)
        try:
            with session.ask(question, baseline=bool(baseline), on_rebuild=rebuilt, on_part=part_read, part=part,
                             progress=lambda f: progress(f, desc=reading)) as pieces:
                text = ""
                for piece in pieces:
                    text += piece
                    history[-1] = {"role": "assistant", "content": text}
                    yield {self.question: "", self.chat: history}  # only the chat changes while streaming
        except KvqaError as e:  # the chat goes back to what it was; the question stays in its box
            yield {self.question: question, self.chat: chat_before} | warn(e, lang)
            return
        yield self.panels(session, lang)

    def on_ask_also(self, session, baseline, remember=False, lang="en", ready_only=False, progress=gr.Progress()):
        """UI: ask the last question again, from the other part that matched it too (Session.also_index)."""
        if session is None or session.also_index is None:
            yield warn(QuestionError("question.no_document" if session is None else "question.nothing_to_ask_again"),
                       lang)
            return
        yield from self.on_ask(session.conversation()[-1].question, session, baseline, remember, lang, ready_only,
                               progress, part=session.also_index)

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

    @staticmethod
    def on_stop(session) -> None:
        """UI: end the answer being written; the cache is left as it was."""
        if session is not None:
            session.stop()
