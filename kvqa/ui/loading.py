"""Documents from the page: an upload, pasted text (with the uploads), another part of the document, or the same
text read again by another model; then every panel and the part box show what was read."""

from __future__ import annotations

import gradio as gr

from kvqa.errors import KvqaError
from kvqa.messages import Message, say
from kvqa.parts import parse_range, unit_name, unit_total
from kvqa.session import Session
from kvqa.ui import warn


class Loading:
    """Part of KvqaApp (a Reading): the handlers that read a document, for its components part and promise_box (and
    its panels)."""

    def show_read(self, get_document, session, lang, request, progress, *, pdf=lambda: None) -> dict:
        """Read the document get_document() gives and show it; `pdf()`: the file's bytes when the document is one
        PDF, kept for the evidence viewer."""
        try:
            session, changed = self.read(get_document(), session, request, progress, lang=lang)
        except KvqaError as e:
            return warn(e, lang)
        if changed:
            self.pdfs.pop(session, None)
            if (data := pdf()) is not None:
                self.pdfs[session] = data
        return self.panels(session, lang, reused=not changed) | self.part_box(session, lang)

    def on_upload(self, file, session, lang="en", request: gr.Request = None, progress=gr.Progress()) -> dict:
        """UI: read an uploaded file once; show its figures."""
        return self.show_read(lambda: self.document_from(file, None, lang, progress), session, lang, request, progress,
                              pdf=lambda: self.pdf_of(file, None))

    def on_paste(self, text, session, files=None, lang="en", request: gr.Request = None,
                 progress=gr.Progress()) -> dict:
        """UI: read pasted text once (with the uploaded files, if any, as one document)."""
        return self.show_read(lambda: self.document_from(files, text, lang, progress), session, lang, request, progress,
                              pdf=lambda: self.pdf_of(files, text))

    def on_part(self, text, session, lang="en", request: gr.Request = None, progress=gr.Progress()) -> dict:
        """UI: read another part of the loaded document (pages of a PDF, characters of a text)."""
        if session is None or session.whole is None:
            return warn(KvqaError("part.load_first"), lang)
        try:
            part = parse_range(text, session.whole)
            session, changed = self.read(session.whole, session, request, progress, part=part, lang=lang)
        except KvqaError as e:
            return warn(e, lang)
        return self.panels(session, lang, reused=not changed) | self.part_box(session, lang)

    def on_model(self, model, session, lang="en", request: gr.Request = None, progress=gr.Progress()) -> dict:
        """UI: switch model; the document's text is kept and read again by the new model."""
        try:
            engine = self.engine_for(model)
            if session is not None and session.engine is engine:
                self.picked.add(session)  # chosen, though already reading: later documents keep it
                return {}
            progress(0, desc=say("progress.loading_model", lang, model=model))
            engine.load()
            fresh = self.new_session(None, request, engine=engine)
            self.picked.add(fresh)
            if session is not None and session.whole is not None:
                fresh.load(session.whole, progress=lambda f: progress(f, desc=say("progress.reading_again", lang)))
        except KvqaError as e:
            return warn(e, lang)
        if session is not None:
            session.close()
        return self.panels(fresh, lang) | self.part_box(fresh, lang) | {self.promise_box: self.promise(fresh, lang)}

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
