"""The browser app's parts, by concern; app.py builds the page from them and wires its events.

reading.py (the app's sessions and their reads, no component), loading.py (documents from the page), asking.py
(questions from the page), answers.py (an answer in the chat), latency.py (the latency panel), evidence.py (the sources
on their page), status.py (the document's panel), api.py (the gradio_client API), export.py (the conversation as
files). Every text is said in the language of the request (kvqa.messages); `warn` is how a page handler refuses.
"""

from __future__ import annotations

import gradio as gr

from kvqa.errors import KvqaError
from kvqa.messages import render


def warn(error: KvqaError, lang: str = "en") -> dict:
    """Show the error's message as a warning and change nothing on screen (gr.Error would mark every output)."""
    gr.Warning(render(error.message, lang))
    return {}
