"""The Gradio app: handlers called directly, the gradio_client API against the app on loopback, and sessions."""

from __future__ import annotations

import pytest
from conftest import as_upload
from gradio_client import Client

import app

DOC_A = "The secret word is pelican. The museum opens at 9 am on weekdays."
DOC_B = "The capital of Zorbia is Quentin. Zorbia's river is called the Lune."
UI = app.kvqa_app


def drain(events) -> dict:
    outputs = None
    for outputs in events:
        pass
    return outputs


def last_answer(outputs: dict) -> str:
    return outputs[UI.chat][-1]["content"]


@pytest.fixture
def session(default_lm):
    session = UI.on_paste(DOC_A, None)[UI.state]
    yield session
    session.close()


def test_paste_prefills_once_and_shows_figures(session):
    status = UI.status_markdown(session)
    assert "document tokens" in status and "read now:" in status and "tokens/s" in status and "MB" in status
    prefilled = session.prefilled
    again = UI.on_paste(DOC_A, session)
    assert again[UI.state].prefilled is prefilled and "already loaded" in again[UI.status]  # no second prefill


def test_two_sessions_with_one_document_share_its_cache(default_lm):
    """Issue 14: the second session's cache is the first one's, and its status says so."""
    text = DOC_B + " This copy is only for the sharing test."
    first, second = UI.on_paste(text, None)[UI.state], None
    try:
        shown = UI.on_paste(text, None)
        second = shown[UI.state]
        assert second is not first and second.prefilled is first.prefilled
        assert "shared with another session: " in shown[UI.status] and "read now: " in UI.status_markdown(first)
        outputs = drain(UI.on_ask("What is the capital of Zorbia?", second, False))
        assert "Quentin" in last_answer(outputs)
    finally:
        first.close()
        if second is not None:
            second.close()


def test_ask_streams_then_shows_latency(session):
    steps = list(UI.on_ask("What is the secret word?", session, False))
    assert len(steps) >= 3  # streamed: several partial updates before the final one
    assert all(set(step) == {UI.question, UI.chat} for step in steps[:-1])  # only the chat changes while streaming
    final = steps[-1]
    chat = final[UI.chat]
    assert chat[-2] == {"role": "user", "content": "What is the secret word?"}
    assert "pelican" in chat[-1]["content"].lower() and "first token" in chat[-1]["content"]
    assert "estimated" in final[UI.summary] and len(final[UI.table]["data"]) == 1 and final[UI.plot] is not None


def test_questions_are_independent(session):
    first = last_answer(drain(UI.on_ask("What is the secret word?", session, False)))
    drain(UI.on_ask("When does the museum open?", session, False))
    again = last_answer(drain(UI.on_ask("What is the secret word?", session, False)))
    assert first.split("<sub>")[0] == again.split("<sub>")[0]
    assert len(session.turns) == 3


def test_baseline_switch_measures_the_speedup(session):
    final = drain(UI.on_ask("What is the secret word?", session, True))
    assert "measured" in final[UI.summary] and final[UI.table]["data"][-1][7] is not None
    assert "measured" in final[UI.table]["data"][-1][8]


def test_errors_are_warnings_that_leave_the_session_and_the_screen_as_they_were(session, tmp_path):
    drain(UI.on_ask("What is the secret word?", session, False))
    before = (session.document, session.prefilled, list(session.turns))
    chat = app.chat_messages(session)
    bad = tmp_path / "bad.pdf"
    bad.write_bytes(b"not a pdf at all")
    for action, message in ((lambda: UI.on_upload(as_upload(bad), session), "not a PDF"),
                            (lambda: UI.on_paste("   ", session), "Nothing to read"),
                            (lambda: drain(UI.on_ask("   ", session, False)), "question is empty"),
                            (lambda: drain(UI.on_ask("x" * 30_000, session, False)), "30,000 characters")):
        with pytest.warns(UserWarning, match=message):  # shown as a toast by Gradio
            outputs = action()
        assert (session.document, session.prefilled, list(session.turns)) == before
        assert session.prefilled.cache.length == session.prefilled.tokens
        if UI.chat in outputs:  # asking: the chat is put back as it was, the question stays in its box
            assert outputs == {UI.chat: chat, UI.question: outputs[UI.question]} and outputs[UI.question]
        else:  # loading: nothing on screen changes
            assert outputs == {}


def test_asking_before_any_document_is_a_message_not_a_trace():
    with pytest.warns(UserWarning, match="No document is loaded"):
        outputs = drain(UI.on_ask("Hello?", None, False))
    assert outputs == {}


def test_stop_ends_the_answer_and_keeps_the_cache(session):
    full = last_answer(drain(UI.on_ask("Describe the document in detail.", session, False)))
    events = UI.on_ask("Describe the document in detail.", session, False)
    next(events)
    UI.on_stop(session)
    last = drain(events)
    assert "stopped" in last_answer(last) and session.turns[-1].stopped
    assert session.prefilled.cache.length == session.prefilled.tokens
    after = last_answer(drain(UI.on_ask("Describe the document in detail.", session, False)))
    assert after.split("<sub>")[0] == full.split("<sub>")[0]


def test_an_abandoned_answer_frees_the_session_when_its_request_ends(session):
    """Issue 10: Gradio closes the handler's generator when a request ends early; the session is free at once."""
    events = UI.on_ask("Describe the document in detail.", session, False)
    next(events)
    assert session.busy
    events.close()
    assert not session.busy and session.prefilled.cache.length == session.prefilled.tokens
    assert "pelican" in last_answer(drain(UI.on_ask("What is the secret word?", session, False))).lower()


def test_gradio_client_sessions_each_get_their_own_document(server, tmp_path):
    path = tmp_path / "zorbia.txt"
    path.write_text(DOC_B)
    a, b = Client(server, verbose=False), Client(server, verbose=False)
    assert "tokens" in a.predict(text=DOC_A, api_name="/prefill")
    assert "zorbia.txt" in b.predict(file={"path": str(path), "meta": {"_type": "gradio.FileData"}},
                                      api_name="/prefill")
    answers_a = [a.predict(question=q, api_name="/ask") for q in ("What is the secret word?", "When does the museum open?")]
    answer_b = b.predict(question="What is the capital of Zorbia?", api_name="/ask")
    assert all(answers_a) and "pelican" in answers_a[0].lower() and "9" in answers_a[1]
    assert "quentin" in answer_b.lower()
    with pytest.raises(Exception, match="No document is loaded"):
        Client(server, verbose=False).predict(question="Anything?", api_name="/ask")


def test_a_client_that_goes_away_mid_answer_leaves_the_session_exact(server):
    client = Client(server, verbose=False)
    client.predict(text=DOC_A, api_name="/prefill")
    fresh = client.predict(question="What is the secret word?", api_name="/ask")
    job = client.submit(question="Describe the document in detail.", api_name="/ask")
    job.cancel()  # what a closed tab or a dropped connection does
    assert client.predict(question="What is the secret word?", api_name="/ask") == fresh


def test_ending_a_session_frees_its_cache(default_lm):
    import gc
    import weakref

    session = UI.on_paste(DOC_B + " Held by this session alone.", None)[UI.state]  # a cache nobody shares
    cache = weakref.ref(session.prefilled.cache)
    used = UI.budget.used_bytes
    UI.close_session(session)  # gr.State's delete_callback, when the tab closes or the time-to-live passes
    gc.collect()
    assert cache() is None and UI.budget.used_bytes < used


def test_ask_streams_to_api_clients(server):
    client = Client(server, verbose=False)
    client.predict(text=DOC_A, api_name="/prefill")
    job = client.submit(question="Describe the document.", api_name="/ask")
    final = job.result()
    updates = job.outputs()
    assert len(updates) > 2 and updates[-1] == final
    assert all(later.startswith(earlier) for earlier, later in zip(updates, updates[1:]))


def test_the_app_is_built_from_one_composition_root(default_lm):
    """Issue 10: another model or setting means another KvqaApp, not a rebound global."""
    import kvqa

    other = app.KvqaApp(kvqa.Config(max_new_tokens=7), kvqa.make_engine(kvqa.Config(max_new_tokens=7), lm=default_lm))
    page = other.build()
    assert page is not app.demo and other.config.max_new_tokens == 7 and UI.config.max_new_tokens != 7
    session = other.on_paste(DOC_A, None)[other.state]
    assert session.engine is other.engine
    drain(other.on_ask("Describe the document in detail.", session, False))
    assert session.turns[-1].timings.new_tokens <= 7
    session.close()
