"""The browser app's parts, by concern; app.py lays out the Page (page.py), gives each handler object what it uses
and wires its events. The app's sessions and their reads are kvqa.session.service's, with no component.

loading.py (documents from the page), asking.py (questions from the page), language.py (the page's texts and the
language switch), panels.py (everything that shows a session), answers.py (an answer in the chat), latency.py (the
latency panel), evidence.py (the sources on their page), status.py (the document's panel), tabs.py (each browser
tab's work in flight), api.py (the gradio_client API), export.py (the conversation as files). Every text is said in
the language of the request (kvqa.messages); `warn` is how a page handler refuses.
"""

from __future__ import annotations

import gradio as gr

from kvqa.errors import KvqaError
from kvqa.messages import render


def unchanged() -> dict:
    """What a handler returns (or yields) to leave every one of its outputs as it is. Gradio reads one skip() as a skip
    of every output; an empty dict it reads as one value, short of the outputs, and marks all of them "Error"."""
    return gr.skip()


def warn(error: KvqaError, lang: str = "en", *, put_back: dict | None = None) -> dict:
    """Show the error's message as a warning; the outputs in `put_back` are set to what they were before the handler
    began, every other output is left as it is (gr.Error would mark every output)."""
    gr.Warning(render(error.message, lang))
    return put_back or unchanged()
