"""The page in the reader's language: its fixed texts (the ui.* messages) shown through gr.I18n in the browser's
language before any event, and said again in the one chosen with the language switch, with every panel."""

from __future__ import annotations

import gradio as gr

from kvqa.config import Config
from kvqa.errors import BusyError
from kvqa.messages import CATALOG, LANGUAGES, language_of, say
from kvqa.ui import warn
from kvqa.ui.page import Page
from kvqa.ui.panels import Panels
from kvqa.ui.tabs import Tabs


class PageTexts:
    """The page's fixed texts by language, and which component shows which (filled while the page is laid out)."""

    def __init__(self, config: Config):
        said = config.limits
        limits = dict(file_mb=said.max_file_mb, reserve=said.reserve_tokens, pages=said.max_pdf_pages,
                      question=said.max_question_tokens, answer=said.max_new_tokens)
        self.by_language = {lang: {key: say(key, lang, **(limits if key == "ui.limits" else {}))
                                   for key in CATALOG if key.startswith("ui.")} for lang in LANGUAGES}
        for texts in self.by_language.values():
            texts["ui.limits"] = f"<sub>{texts['ui.limits']}</sub>"  # small print
        self.i18n = gr.I18n(**self.by_language)  # for launch(i18n=...)
        self.fixed: dict[gr.components.Component, dict[str, str]] = {}  # component -> {property: message id}

    def localized(self, make, texts: dict[str, str], /, **options):
        """make(**options) with its fixed texts (property -> message id) through gr.I18n, remembered for relabel."""
        component = make(**{prop: self.i18n(key) for prop, key in texts.items()}, **options)
        self.fixed[component] = texts
        return component

    def relabel(self, lang: str) -> dict:
        """The page's fixed texts in `lang`, by component."""
        return {component: gr.update(**{prop: self.by_language[lang][key] for prop, key in texts.items()})
                for component, texts in self.fixed.items()}


class Language:
    """The handlers that set the page's language, given its texts, the page, its panels and the tabs."""

    def __init__(self, texts: PageTexts, page: Page, panels: Panels, tabs: Tabs):
        self.texts, self.page, self.panels, self.tabs = texts, page, panels, tabs

    @property
    def outputs(self) -> list:
        """Everything the language changes: every panel, the part box and every fixed text, each once."""
        return list(dict.fromkeys(self.page.shown + [self.page.part, self.page.promise_box, *self.texts.fixed]))

    def on_load(self, session=None, request: gr.Request = None) -> dict:
        """UI, when the page opens: the language from the browser's Accept-Language header, and the page in it, with
        the tab's session as it is by then (on a busy machine a document pasted and read at once can be ready before
        this event runs: its panels are said again, not wiped)."""
        lang = language_of(request.headers.get("accept-language") if request is not None else None)
        return {self.page.lang: lang} | self.on_language(lang, session, request)

    def on_language(self, lang, session, request: gr.Request = None) -> dict:
        """UI: say everything on the page in `lang`: the fixed texts, the panels and the answers so far. Refused while
        an answer is written (the switch shows the language in use again)."""
        tab = self.tabs.of(request)
        if tab.answering or (session is not None and session.answering):
            return warn(BusyError("busy.switch_language"), tab.lang, put_back={self.page.lang: tab.lang})
        tab.lang = lang
        page = self.texts.relabel(lang)
        shown = (self.panels.show(session, lang, tab=tab) | self.panels.part_box(session, lang)
                 | {self.page.promise_box: self.panels.status.promise(session, lang)})
        for component, value in shown.items():
            if component in page:  # the chat and the part box: a fixed text and what they show
                is_update = isinstance(value, dict) and value.get("__type__") == "update"
                value = page[component] | (value if is_update else {"value": value})
            page[component] = value
        return page
