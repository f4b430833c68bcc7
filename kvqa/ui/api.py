"""The gradio_client API (docs/api.md): /prefill, /ask, /sources, /unsupported and /export, each client its own
session in the page's state. Errors reach the client as gr.Error with the library's English message."""

from __future__ import annotations

import gradio as gr

from kvqa.documents.parts import parse_range, unit_name
from kvqa.errors import KvqaError
from kvqa.evidence.sources import source_dict
from kvqa.export import session_dict
from kvqa.messages import Message
from kvqa.session.service import Service
from kvqa.session.session import Ask
from kvqa.ui.latency import cache_origin
from kvqa.ui.loading import owner


class Api:
    """The API's endpoints and handlers, given the service that reads and the page's state (each client's session),
    built inside the page (hidden inputs and outputs, wired to the handlers below)."""

    def __init__(self, service: Service, state: gr.State):
        self.service, self.state = service, state
        with gr.Row(visible=False):
            file, text, part, question = gr.File(), gr.Textbox(), gr.Textbox(), gr.Textbox()
            remember, ask_part = gr.Checkbox(), gr.Textbox()
            self.api_status, self.api_answer = gr.Textbox(), gr.Textbox()
            sources, unsupported = gr.JSON(), gr.JSON()
            prefill_btn, ask_btn, sources_btn, unsupported_btn, export_btn = (gr.Button() for _ in range(5))
            exported = gr.JSON()
        prefill_btn.click(self.api_prefill, [file, text, part, self.state], [self.api_status, self.state],
                          api_name="prefill")
        ask_btn.click(self.api_ask, [question, remember, ask_part, self.state], [self.api_answer, self.state],
                      api_name="ask")
        sources_btn.click(self.api_sources, [self.state], [sources], api_name="sources")
        unsupported_btn.click(self.api_unsupported, [self.state], [unsupported], api_name="unsupported")
        export_btn.click(self.api_export, [self.state], [exported], api_name="export")

    def api_prefill(self, file: str | None = None, text: str | None = None, part: str | None = None, session=None,
                    request: gr.Request = None, progress=gr.Progress()) -> dict:
        """API: read a document (`text` for pasted text, `file` for an upload of one of documents.SUPPORTED_SUFFIXES;
        `part`: pages or characters to read, like "14-27"); returns the prefill figures and, when only part of it was
        read, which."""
        try:
            document, _ = self.service.document_from(file, text, progress=progress, owner=owner(request))
            session, changed = self.service.read(document, session, request, progress,
                                                 part=parse_range(part, document) if part and part.strip() else None)
        except KvqaError as e:
            raise gr.Error(str(e), print_exception=False) from None
        doc = session.prefilled
        return {self.api_status: (f"{'prefilled' if changed else 'already loaded'} {session.document.name}: "
                                  f"{doc.tokens} tokens, {doc.prefill_s:.3f} s, {doc.tokens_per_s:.0f} tokens/s, "
                                  f"cache {doc.cache_bytes} bytes; {cache_origin(session)}"
                                  + (f". {session.notice}" if session.notice else "")
                                  + (f" Parts ({unit_name(session.whole)}): {session.parts.listed()}."
                                     if len(session.parts) > 1 else "")),
                self.state: session}

    def api_ask(self, question: str, remember: bool = False, part: str | None = None, session=None,
                request: gr.Request = None, progress=gr.Progress()):
        """API: answer a question about this client's document, streaming: each update is the answer so far, the last
        one the whole answer (client.predict returns it; client.submit iterates the updates). remember=True reads the
        question after this client's earlier remembered questions and answers (a follow-up). part: one of the parts
        /prefill lists ("13-25"), to answer from it instead of the part the question matches best. A question in a
        language the session's model does not read is answered by an offered model that reads it, the document read
        there first (as on the page)."""
        if session is None:
            raise gr.Error(Message("question.no_document_api"), print_exception=False)
        try:
            reader = self.service.choice.question_reader(session, question)
            if reader is not None:
                session = self.service.choice.read_for_question(session, reader, request, "en", progress)
            asked = parse_range(part, session.whole) if part and part.strip() else None
            with session.ask(Ask(question, remember=bool(remember), part=asked)) as pieces:
                text = ""
                for piece in pieces:
                    text += piece
                    yield {self.api_answer: text}
                yield {self.api_answer: pieces.answer.text, self.state: session}
        except KvqaError as e:
            raise gr.Error(str(e), print_exception=False) from None

    @staticmethod
    def api_export(session=None) -> dict:
        """API: this client's document, parts and every question so far with its answer, sources, flags and
        timings: the structure of `kvqa ask --json`."""
        if session is None or session.whole is None:
            raise gr.Error(Message("question.no_answer_api"), print_exception=False)
        return session_dict(session)

    @staticmethod
    def api_sources(session=None) -> list[dict]:
        """API: the passages of the document the last answer relies on, best first: page (PDFs), start and end
        (character offsets into the document's text) and text."""
        if session is None or not session.turns:
            raise gr.Error(Message("question.no_answer_api"), print_exception=False)
        return [source_dict(s) for s in session.turns[-1].sources]

    @staticmethod
    def api_unsupported(session=None) -> list[str]:
        """API: the numbers and names in the last answer that the document does not contain (empty: none)."""
        if session is None or not session.turns:
            raise gr.Error(Message("question.no_answer_api"), print_exception=False)
        return list(session.turns[-1].unsupported)
