"""Documents from the page: an upload, pasted text (with the uploads), the sample, another part of the document, or
the same text read again by another model; then every panel and the part box show what was read. Each read is
registered with its browser tab (kvqa.ui.tabs), so questions asked meanwhile wait for it and show how far it is."""

from __future__ import annotations

from pathlib import Path

import gradio as gr

from kvqa.documents.parts import parse_range
from kvqa.documents.reading import Document, load_document
from kvqa.errors import BusyError, KvqaError
from kvqa.messages import render
from kvqa.session.service import Service
from kvqa.ui import unchanged, warn
from kvqa.ui.page import Page
from kvqa.ui.panels import Panels
from kvqa.ui.tabs import Tabs

SAMPLE = Path(__file__).parent.parent.parent / "assets" / "declaration-of-independence.md"


def owner(request: gr.Request | None) -> str | None:
    """Who sends this request, for the uploads it may read (Gradio's session hash); None: called directly."""
    return getattr(request, "session_hash", None)


class Reads:
    """The handlers that read a document, given the service that reads, the page, its panels and the tabs."""

    def __init__(self, service: Service, page: Page, panels: Panels, tabs: Tabs):
        self.service, self.page, self.panels, self.tabs = service, page, panels, tabs

    def on_read_asked(self, request: gr.Request = None) -> None:
        """UI, at once when a read is asked for (before its handler begins, maybe after another tab's read): the
        questions asked meanwhile wait for it instead of finding no document."""
        self.tabs.of(request).expect()

    def document_from(self, files, text: str | None, lang: str, progress, request) -> Document:
        """The document the client sent (Service.document_from), each file skipped and each note a warning."""
        document, warnings = self.service.document_from(files, text, lang, progress, owner=owner(request))
        for message in warnings:
            gr.Warning(render(message, lang))
        return document

    def show_read(self, get_document, session, lang, request, progress, *, pdf=lambda: None, part=None) -> dict:
        """Read the document get_document(progress) gives (or its part) and show it; `pdf()`: the file's bytes when
        the document is one PDF, kept for the evidence viewer. One read at a time per tab."""
        tab = self.tabs.of(request)
        if tab.read is not None:
            return warn(BusyError("busy.reading"), lang)
        try:
            with tab.reading(progress) as read:
                document = get_document(read.report)
                session, changed = self.service.read(document, session, request, read.report, part=part, lang=lang)
                read.session = session
        except KvqaError as e:
            return warn(e, lang)
        if changed:
            self.service.notes(session).pdf = pdf()
        return self.panels.show(session, lang, reused=not changed, tab=tab) | self.panels.part_box(session, lang)

    def on_upload(self, file, session, lang="en", request: gr.Request = None, progress=gr.Progress()) -> dict:
        """UI: read an uploaded file once; show its figures."""
        self.tabs.of(request).begin()
        return self.show_read(lambda p: self.document_from(file, None, lang, p, request), session, lang, request,
                              progress, pdf=lambda: self.service.pdf_of(file, None, owner=owner(request)))

    def on_paste(self, text, session, files=None, lang="en", request: gr.Request = None,
                 progress=gr.Progress()) -> dict:
        """UI: read pasted text once (with the uploaded files, if any, as one document)."""
        self.tabs.of(request).begin()
        return self.show_read(lambda p: self.document_from(files, text, lang, p, request), session, lang, request,
                              progress, pdf=lambda: self.service.pdf_of(files, text, owner=owner(request)))

    def on_sample(self, session, lang="en", request: gr.Request = None, progress=gr.Progress()) -> dict:
        """UI: load the sample document (a file of the app's own, never a path from the client)."""
        self.tabs.of(request).begin()
        return self.show_read(lambda _: load_document(SAMPLE, config=self.service.config), session, lang, request,
                              progress)

    def on_part(self, text, session, lang="en", request: gr.Request = None, progress=gr.Progress()) -> dict:
        """UI: read another part of the loaded document (pages of a PDF, characters of a text)."""
        self.tabs.of(request).begin()
        if session is None or session.whole is None:
            return warn(KvqaError("part.load_first"), lang)
        try:
            whole = session.whole
            part = parse_range(text, whole)  # a bad range is refused before anything is read
        except KvqaError as e:
            return warn(e, lang)
        return self.show_read(lambda p: whole, session, lang, request, progress, part=part)

    def on_model(self, model, session, lang="en", request: gr.Request = None, progress=gr.Progress()) -> dict:
        """UI: switch model; the document's text is kept and read again by the new model. Refused while an answer is
        written or a document read (the list shows the model in use again)."""
        tab = self.tabs.of(request)
        tab.begin()
        put_back = {self.page.model_box: self.service.model_of(session)} if session is not None else {}
        if tab.answering or (session is not None and session.answering):
            return warn(BusyError("busy.switch_model"), lang, put_back=put_back)
        if tab.read is not None:
            return warn(BusyError("busy.reading"), lang, put_back=put_back)
        try:
            if session is not None and session.engine is self.service.engine_for(model):
                self.service.notes(session).picked = True  # chosen, though already reading: later documents keep it
                return unchanged()
            with tab.reading(progress) as read:
                fresh = self.service.choice.switch_model(model, session, request, lang, read.report)
                read.session = fresh
        except KvqaError as e:
            return warn(e, lang, put_back=put_back)
        if session is not None:
            session.close()
        return self.panels.show(fresh, lang, tab=tab) | self.panels.part_box(fresh, lang)
