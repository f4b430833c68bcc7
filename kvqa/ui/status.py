"""The document's panel: what was read, by which model and why, how the cache was had and what it holds, how many of
a long document's parts are ready; and the line under the title that says what the answers promise."""

from __future__ import annotations

import gradio as gr

from kvqa.messages import render, say
from kvqa.model.presets import language_note
from kvqa.session.service import Service
from kvqa.session.session import Session
from kvqa.ui.latency import cache_origin
from kvqa.ui.page import Page

AHEAD_TICK_S = 2.0  # how often the status refreshes while a long document's parts are read ahead


class StatusView:
    """The status texts of the app's sessions, and the timer's handler that refreshes them (page.status and
    page.ahead_timer)."""

    def __init__(self, service: Service, page: Page):
        self.service, self.page = service, page

    def status_markdown(self, session: Session | None, lang: str = "en", *, reused: bool = False) -> str:
        """The document's panel in Markdown (reused: the document was already loaded and was not read again)."""
        if session is None or session.document is None:
            return say("ui.no_document", lang)
        doc, info = session.prefilled, session.engine.info
        if doc is None:
            return say("status.freed", lang, name=session.document.name)
        pages = say("status.pages", lang, pages=session.document.pages) if session.document.pages else ""
        note = say("status.reused", lang) if reused else ""
        part = f"**{render(session.notice, lang)}**\n\n" if session.notice else ""
        part += self.behind_line(session, lang)
        language = language_note(info.model, session.document.text, cache_dir=self.service.config.cache_dir)
        part += f"**{render(language, lang)}**\n\n" if language else ""
        rate = say("status.rate", lang, rate=doc.tokens_per_s) if session.origin == "prefill" else ""
        estimate = self.service.notes(session).estimate
        if session.origin == "prefill" and estimate is not None:
            rate += say("status.estimated", lang, seconds=estimate)
        reason = self.service.reason(session)
        config, budget = self.service.config, self.service.budget
        cache = (say("status.cache_size", lang, mb=doc.cache_bytes / 2**20, reserve=config.limits.reserve_tokens)
                 if doc.cache_bytes else say("status.cache_remote", lang))
        memory = say("status.memory", lang, used=budget.used_bytes / 2**20, limit=budget.limit_bytes / 2**20)
        parts = f"- {self.parts_line(session, lang)}\n" if len(session.parts) > 1 else ""
        model = say("status.model", lang, model=info.model, device=info.device, dtype=info.precision, reason=reason)
        details = (f"- {model}\n"
                   f"- {say('status.tokens', lang, tokens=doc.tokens)}\n"
                   f"- {render(cache_origin(session), lang)}{rate}\n"
                   f"{parts}"
                   f"- {cache}\n"
                   f"- {memory}")
        # at a glance: the document, that it is ready (or which parts are still read) and what to do next; the
        # figures one click away
        ready = say("status.ready_parts" if self.service.reading_ahead(session) else "status.ready", lang)
        return (f"**{session.document.name}**{pages}{note}: {ready}\n\n{part}"
                f"<details class='kvqa-details'><summary>{say('status.details', lang)}</summary>\n\n"
                f"{details}\n\n</details>")

    def behind_line(self, session: Session, lang: str = "en") -> str:
        """While a better model reads the document behind this session's faster one: how far, and that it takes
        over; once it did, that it answers now; nothing otherwise (kvqa.session.takeover)."""
        notes, take = self.service.notes(session), self.service.choice.behind_of(session)
        if take is not None and take.error is not None:
            return say("status.behind_failed", lang, model=take.model, stand_in=take.stand_in,
                       error=render(take.error.message, lang)) + "\n\n"
        if take is not None:
            return say("status.behind", lang, model=take.model, stand_in=take.stand_in, percent=take.fraction * 100,
                       seconds=take.estimate or 0) + "\n\n"
        if notes.took_over:
            return say("status.took_over", lang, model=session.engine.info.model, stand_in=notes.took_over) + "\n\n"
        return ""

    def parts_line(self, session: Session, lang: str = "en") -> str:
        """For a document cut into parts: how many are ready, and whether the others are being read."""
        ready, parts = session.parts.ready, len(session.parts)
        if self.service.reading_ahead(session):
            return say("status.ahead", lang, ready=ready, parts=parts)
        return say("status.ahead_done" if ready == parts else "status.ahead_later", lang, ready=ready, parts=parts)

    def promise(self, session: Session | None = None, lang: str = "en") -> str:
        """What the answers are promised to be, for this engine's precision."""
        engine = session.engine if session is not None else self.service.engine
        if not engine.loaded:  # said without loading the model: it loads with the first document
            return f"<sub>{say('promise.not_loaded', lang, model=self.service.config.model)}</sub>"
        info = engine.info
        line = say("promise.line", lang, model=info.model, device=info.device, dtype=info.precision,
                   guarantee=info.guarantee)
        return f"<sub>{line}</sub>"

    def on_tick(self, session, lang="en") -> dict:
        """UI, every few seconds while parts are read ahead or a better model reads behind: the status (and the
        session, once that model took over), and the timer stops when nothing is read any more."""
        session = self.service.choice.take_over(session)
        return {self.page.state: session, self.page.status: self.status_markdown(session, lang),
                self.page.ahead_timer: gr.Timer(active=self.service.busy_behind(session))}
