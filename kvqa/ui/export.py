"""The conversation to download from the page: the session as a Markdown and a JSON file (kvqa.export's structure,
the JSON that of `kvqa ask --json`), written to a fresh temporary folder that Gradio serves."""

from __future__ import annotations

import re
import tempfile
from pathlib import Path

import gradio as gr

from kvqa.errors import KvqaError
from kvqa.export import session_dict, to_json, to_markdown
from kvqa.session.session import Session
from kvqa.ui import warn


def conversation_files(session: Session | None) -> list[str]:
    """The paths of the session's Markdown and JSON files (document, parts, every question with its answer, sources,
    flags and timings), named after the document; KvqaError before a document and a question."""
    if session is None or session.whole is None or not session.turns:
        raise KvqaError("export.nothing")
    conversation = session_dict(session)
    folder = Path(tempfile.mkdtemp(prefix="kvqa-export-"))
    stem = re.sub(r"[^\w.-]+", "_", Path(session.whole.name).stem)[:60] or "document"
    md, js = folder / f"{stem}-conversation.md", folder / f"{stem}-conversation.json"
    md.write_text(to_markdown(conversation), encoding="utf-8")
    js.write_text(to_json(conversation), encoding="utf-8")
    return [str(md), str(js)]


def on_export(session, lang="en"):
    """UI: the conversation as a Markdown and a JSON file to download (the page's one exported box)."""
    try:
        files = conversation_files(session)
    except KvqaError as e:
        return warn(e, lang)
    return gr.update(value=files, visible=True)
