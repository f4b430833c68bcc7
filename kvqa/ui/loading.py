"""Documents from the page: an upload, pasted text (with the uploads), another part of the document, or the same
text read again by another model; then every panel and the part box show what was read. Each read is registered with
its browser tab (kvqa.ui.tabs), so questions asked meanwhile wait for it and show how far it is."""

from __future__ import annotations

import gradio as gr

from kvqa.documents.parts import parse_range, unit_name, unit_total
from kvqa.errors import BusyError, KvqaError
from kvqa.messages import Message, say
from kvqa.session.session import Session
from kvqa.ui import unchanged, warn


class Loading:
    """Part of KvqaApp (a Reading): the handlers that read a document, for its components part and promise_box (and
    its panels)."""

    def on_read_asked(self, request: gr.Request = None) -> None:
        """UI, at once when a read is asked for (before its handler begins, maybe after another tab's read): the
        questions asked meanwhile wait for it instead of finding no document."""
        self.tabs.of(request).expect()

    def show_read(self, get_document, session, lang, request, progress, *, pdf=lambda: None, part=None) -> dict:
        """Read the document get_document(progress) gives (or its part) and show it; `pdf()`: the file's bytes when
        the document is one PDF, kept for the evidence viewer. One read at a time per tab."""
        tab = self.tabs.of(request)
        if tab.read is not None:
            return warn(BusyError("busy.reading"), lang)
        try:
            with tab.reading(progress) as read:
                document = get_document(read.report)
                session, changed = self.read(document, session, request, read.report, part=part(document) if part
                                             else None, lang=lang)
                read.session = session
        except KvqaError as e:
            return warn(e, lang)
        if changed:
            self.pdfs.pop(session, None)
            if (data := pdf()) is not None:
                self.pdfs[session] = data
        return self.panels(session, lang, reused=not changed, tab=tab) | self.part_box(session, lang)

    def on_upload(self, file, session, lang="en", request: gr.Request = None, progress=gr.Progress()) -> dict:
        """UI: read an uploaded file once; show its figures."""
        self.tabs.of(request).begin()
        owner = self.owner(request)
        return self.show_read(lambda p: self.document_from(file, None, lang, p, owner=owner), session, lang, request,
                              progress, pdf=lambda: self.pdf_of(file, None, owner=owner))

    def on_paste(self, text, session, files=None, lang="en", request: gr.Request = None,
                 progress=gr.Progress()) -> dict:
        """UI: read pasted text once (with the uploaded files, if any, as one document)."""
        self.tabs.of(request).begin()
        owner = self.owner(request)
        return self.show_read(lambda p: self.document_from(files, text, lang, p, owner=owner), session, lang, request,
                              progress, pdf=lambda: self.pdf_of(files, text, owner=owner))

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
        return self.show_read(lambda p: whole, session, lang, request, progress, part=lambda d: part)

    def on_model(self, model, session, lang="en", request: gr.Request = None, progress=gr.Progress()) -> dict:
        """UI: switch model; the document's text is kept and read again by the new model. Refused while an answer is
        written or a document read (the list shows the model in use again)."""
        tab = self.tabs.of(request)
        tab.begin()
        put_back = {self.model_box: self.model_of(session)} if session is not None else {}
        if tab.answering or (session is not None and session.answering):
            return warn(BusyError("busy.switch_model"), lang, put_back=put_back)
        if tab.read is not None:
            return warn(BusyError("busy.reading"), lang, put_back=put_back)
        try:
            engine = self.engine_for(model)
            if session is not None and session.engine is engine:
                self.picked.add(session)  # chosen, though already reading: later documents keep it
                return unchanged()
            with tab.reading(progress) as read:
                self.load_engine(engine, model, lang, read.report)
                fresh = self.new_session(None, request, engine=engine)
                self.picked.add(fresh)
                if session is not None and session.whole is not None:
                    again = say("progress.reading_again", lang)
                    fresh.load(session.whole, progress=lambda f: read.report(f, desc=again))
                read.session = fresh
        except KvqaError as e:
            return warn(e, lang, put_back=put_back)
        if session is not None:
            session.close()
        return (self.panels(fresh, lang, tab=tab) | self.part_box(fresh, lang)
                | {self.promise_box: self.promise(fresh, lang)})

    def part_box(self, session: Session | None, lang: str = "en") -> dict:
        """The part control, labelled in pages for a PDF and characters for text, showing what was read."""
        source = session.whole if session else None
        if source is None:
            return {}
        part = session.document.part
        value = f"{part.first}-{part.last}" if part else ""
        total = unit_total(source)
        label = say("part.label", lang, unit=Message(f"unit.{unit_name(source)}"), total=total)
        return {self.part: gr.update(label=label, value=value)}
