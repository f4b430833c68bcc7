"""Questions asked while a tab's document is read (handlers called directly, the fake engine at the seam): they wait
in the chat with the read's progress, then are answered in the order asked; Stop withdraws the ones waiting; Stop with
nothing to stop says so; every refusal returns Gradio's no-change."""

from __future__ import annotations

import threading
from types import SimpleNamespace

import gradio as gr
import pytest

import app as app_module
from fakes import FakeEngine
from kvqa.cache.budget import CacheBudget
from kvqa.config import Config


def tab_request() -> SimpleNamespace:
    """What Gradio hands a handler: its tab's session hash (and the client's address, for per-client limits)."""
    return SimpleNamespace(session_hash=f"tab-{id(object())}", headers={}, client=SimpleNamespace(host="10.1.2.3"))


@pytest.fixture
def held():
    """An app whose fake engine holds every read at its first chunk until `release` is set."""
    release, reading = threading.Event(), threading.Event()

    def hold(document, chunk):
        reading.set()
        assert release.wait(10), "the test never let the read go on"

    ui = app_module.KvqaApp(Config(), FakeEngine(on_chunk=hold), budget=CacheBudget(2**30))
    return SimpleNamespace(ui=ui, release=release, reading=reading)


def read_in_background(ui, request, text="The secret word is pelican. The museum opens at nine.") -> dict:
    shown = {}
    thread = threading.Thread(target=lambda: shown.update(ui.reads.on_paste(text, None, None, "en", request)))
    thread.start()
    shown["thread"] = thread
    return shown


def contents(chat) -> list[str]:
    return [m["content"] for m in chat]


def test_questions_asked_during_a_read_wait_for_it_then_are_answered_in_turn(held):
    ui, request = held.ui, tab_request()
    ui.reads.on_read_asked(request)
    shown = read_in_background(ui, request)
    assert held.reading.wait(10)
    first = ui.questions.on_question("What is the secret word?", None, "en", request)
    assert first[ui.page.question] == "" and "answered when the document is ready" in contents(first[ui.page.chat])[-1]
    second = ui.questions.on_question("When does the museum open?", None, "en", request)
    assert contents(second[ui.page.chat])[::2] == ["What is the secret word?", "When does the museum open?"]
    answers = ui.questions.on_answer(None, False, False, "en", False, request)
    waiting = next(answers)  # the chat while the read goes on: both questions, the first one waiting for the read
    assert contents(waiting[ui.page.chat])[::2] == ["What is the secret word?", "When does the museum open?"]
    held.release.set()
    outputs = list(answers)[-1]
    shown["thread"].join(10)
    assert ui.page.state in shown, shown
    session = shown[ui.page.state]
    assert outputs[ui.page.state] is session and [t.question for t in session.turns] == ["What is the secret word?"]
    assert contents(outputs[ui.page.chat])[-2:] == ["When does the museum open?",
                                                "<sub>⏳ Waiting for the answer before it.</sub>"]
    outputs = list(ui.questions.on_answer(session, False, False, "en", False, request))[-1]
    assert [t.question for t in session.turns] == ["What is the secret word?", "When does the museum open?"]
    assert not any("⏳" in c for c in contents(outputs[ui.page.chat]))
    assert list(ui.questions.on_answer(session, False, False, "en", False, request)) == [gr.skip()]  # none left


def test_stop_withdraws_the_questions_waiting_for_a_read(held, monkeypatch):
    ui, request = held.ui, tab_request()
    ui.reads.on_read_asked(request)
    shown = read_in_background(ui, request)
    assert held.reading.wait(10)
    ui.questions.on_question("What is the secret word?", None, "en", request)
    answers = ui.questions.on_answer(None, False, False, "en", False, request)
    next(answers)
    ui.questions.on_question("When does the museum open?", None, "en", request)
    said = []
    monkeypatch.setattr(gr, "Info", lambda message, *a, **k: said.append(message))  # a toast, in a served app
    ui.questions.on_stop(None, "en", request)
    assert said == ["Stopped: 2 waiting question(s) withdrawn."]
    held.release.set()
    last = list(answers)[-1]
    assert not any("⏳" in c for c in contents(last[ui.page.chat]))  # the chat without them
    shown["thread"].join(10)
    assert shown[ui.page.state].turns == []  # neither was answered
    assert list(ui.questions.on_answer(shown[ui.page.state], False, False, "en", False, request)) == [gr.skip()]


def test_a_question_with_no_document_and_none_coming_is_refused_with_no_change():
    ui = app_module.KvqaApp(Config(), FakeEngine(), budget=CacheBudget(2**30))
    with pytest.warns(UserWarning, match="No document is loaded yet"):
        assert ui.questions.on_question("Hello?", None, "en", tab_request()) == gr.skip()
    with pytest.warns(UserWarning, match="The question is empty"):
        assert ui.questions.on_question("  ", None, "en", tab_request()) == gr.skip()
    with pytest.warns(UserWarning, match="Nothing to stop"):
        ui.questions.on_stop(None, "en", tab_request())


def test_a_page_whose_load_event_comes_after_its_first_read_keeps_the_document():
    """On a busy machine the page's load event (the browser's language, the page said in it) can run after a document
    pasted at once was read: the panels it says again are that session's, in the browser's language, not an empty
    page's."""
    ui = app_module.KvqaApp(Config(), FakeEngine(), budget=CacheBudget(2**30))
    request = tab_request()
    session = ui.reads.on_paste("学院现有教职工1200人。图书馆藏书81.6万册。", None, None, "en", request)[ui.page.state]
    request.headers = {"accept-language": "zh-CN,zh;q=0.9"}
    shown = ui.language.on_load(session, request)
    assert shown[ui.page.lang] == "zh"
    assert "已就绪" in str(shown[ui.page.status]) and "还没有加载文档" not in str(shown[ui.page.status])
    fresh = tab_request()
    fresh.headers = {"accept-language": "zh-CN,zh;q=0.9"}
    assert "还没有加载文档" in str(ui.language.on_load(None, fresh)[ui.page.status])  # a tab with nothing read
