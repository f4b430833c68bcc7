"""A conversation to keep: the app's download (Markdown and JSON), the API's /export and `kvqa ask --json` share one
structure, and the JSON round-trips (the fake engine stands in for the model; its sources are the real ranking)."""

from __future__ import annotations

import json
from pathlib import Path

import gradio as gr
import pytest

import app as app_module
from fakes import FakeEngine
from kvqa.cache.budget import CacheBudget
from kvqa.config import Config
from kvqa.documents.reading import Document, document_from_text
from kvqa.export import from_json, session_dict, to_json, to_markdown
from kvqa.ui.export import on_export

CLI_KEYS = {"format", "model", "engine", "dtype", "weights", "kv_cache", "exact_vs_recompute", "guarantee", "document",
            "context_tokens", "prefill_s", "read_s", "cache_bytes", "cache_source", "parts", "answers"}
ANSWER_KEYS = {"question", "answer", "short", "question_tokens", "new_tokens", "ttft_s", "answer_s", "stop_reason",
               "sources", "unsupported", "unquoted", "part", "also",
               "composed"}
PAGES = ["The harbour ferry leaves at nine every morning.", "渡轮每天早上九点从港口出发，票价十元。",
         "The lighthouse keeper's code word is pelican."]


def pdf_like() -> Document:
    text, starts = "", []
    for n, page in enumerate(PAGES, start=1):
        starts.append(len(text))
        text += f"[Page {n}]\n{page}\n\n"
    return Document(name="港口 guide.pdf", text=text, pages=len(PAGES), page_starts=tuple(starts))


def app_with(document: Document, questions: list[str], context_tokens: int = 8192):
    kvqa_app = app_module.KvqaApp(Config(), FakeEngine(context_tokens), budget=CacheBudget(2**30))
    session, _ = kvqa_app.service.read(document, None, None, lambda *a, **k: None)
    for q in questions:
        session.ask(q).answer  # noqa: B018 - runs the answer
    return kvqa_app, session


def test_the_export_has_every_question_with_its_sources_and_round_trips():
    _, session = app_with(pdf_like(), ["When does the harbour ferry leave?", "渡轮票价是多少？"])
    conversation = session_dict(session)
    assert set(conversation) == CLI_KEYS and all(set(a) == ANSWER_KEYS for a in conversation["answers"])
    assert conversation["document"] == {"name": "港口 guide.pdf", "pages": 3, "chars": len(session.whole.text)}
    first, second = conversation["answers"]
    assert first["question"] == "When does the harbour ferry leave?" and first["sources"][0]["page"] == 1
    assert second["sources"][0]["page"] == 2 and "票价" in second["sources"][0]["text"]
    assert first["part"] == {"unit": "pages", "first": 1, "last": 3}
    assert from_json(to_json(conversation)) == json.loads(json.dumps(conversation))  # nothing lost
    with pytest.raises(ValueError):
        from_json('{"answers": "no"}')


def test_markdown_says_each_question_answer_source_and_timing_in_both_languages():
    _, session = app_with(pdf_like(), ["When does the harbour ferry leave?", "渡轮票价是多少？"])
    md = to_markdown(session_dict(session))
    assert md.startswith("# 港口 guide.pdf") and "## 1. When does the harbour ferry leave?" in md
    assert "## 2. 渡轮票价是多少？" in md and "> — page 2" in md and "> 渡轮每天早上九点从港口出发" in md
    assert md.count("first token") == 2


def test_a_long_document_exports_its_parts_and_where_each_answer_came_from():
    text = "\n\n".join(f"Section {n} tells of the {topic}. " + "filler " * 40
                       for n, topic in enumerate(["lighthouse", "ferry", "orchard", "viaduct", "comet"]))
    _, session = app_with(document_from_text(text, name="long.txt"), ["What about the comet?"], context_tokens=110)
    conversation = session_dict(session)
    assert len(conversation["parts"]) > 1 and conversation["parts"][-1]["last"] == len(session.whole.text)
    part = conversation["answers"][0]["part"]
    assert part["unit"] == "characters" and "comet" in text[part["first"] - 1: part["last"]]
    assert f"from characters {part['first']:,}-{part['last']:,}" in to_markdown(conversation)


def test_the_download_button_writes_both_files_and_refuses_an_empty_session(monkeypatch):
    kvqa_app, session = app_with(pdf_like(), ["When does the harbour ferry leave?"])
    shown = on_export(session)
    md, js = (Path(p) for p in shown["value"])
    assert shown["visible"] and md.suffix == ".md" and js.suffix == ".json"
    assert from_json(js.read_text(encoding="utf-8")) == json.loads(json.dumps(session_dict(session)))
    assert "When does the harbour ferry leave?" in md.read_text(encoding="utf-8")
    assert kvqa_app.api.api_export(session) == session_dict(session)
    warned = []
    monkeypatch.setattr(app_module.gr, "Warning", warned.append)  # the toast is the only output of a refusal
    assert on_export(None) == gr.skip() and "Nothing to download yet" in warned[0]


def test_the_status_tells_a_chinese_reader_when_the_model_reads_english_only():
    chinese = Document(name="指南.txt", text="渡轮每天早上九点从港口出发，票价十元。" * 30)
    for model, noted in (("SmolLM2-135M-Instruct", True), ("Qwen2.5-0.5B-Instruct", False)):
        kvqa_app = app_module.KvqaApp(Config(), FakeEngine(model=model), budget=CacheBudget(2**30))
        session, _ = kvqa_app.service.read(chinese, None, None, lambda *a, **k: None)
        assert ("只能读英文" in kvqa_app.status.status_markdown(session, "zh")) is noted
        assert ("reads English only" in kvqa_app.status.status_markdown(session, "en")) is noted
        session.close()
