"""The Gradio app: handlers called directly, the gradio_client API against the app on loopback, and sessions."""

from __future__ import annotations

import gradio as gr
import pytest
from gradio_client import Client, handle_file

import app
from conftest import as_upload

DOC_A = "The secret word is pelican. The museum opens at 9 am on weekdays."
DOC_B = "The capital of Zorbia is Quentin. Zorbia's river is called the Lune."


def drain(events):
    outputs = None
    for outputs in events:
        pass
    return outputs


@pytest.fixture
def session(default_lm):
    session, *_ = app.on_paste(DOC_A, None)
    yield session
    session.close()


def test_paste_prefills_once_and_shows_figures(session):
    status = app.status_markdown(session)
    assert "document tokens" in status and "prefill (once)" in status and "tokens/s" in status and "MB" in status
    prefilled = session.prefilled
    again, status_again, *_ = app.on_paste(DOC_A, session)
    assert again.prefilled is prefilled and "already loaded" in status_again  # same document: no second prefill


def test_ask_streams_then_shows_latency(session):
    steps = list(app.on_ask("What is the secret word?", session, False))
    assert len(steps) >= 3  # streamed: several partial updates before the final one
    _, box, chat, status, summary, table, plot = steps[-1]
    assert box == "" and chat[-2] == {"role": "user", "content": "What is the secret word?"}
    assert "pelican" in chat[-1]["content"].lower() and "first token" in chat[-1]["content"]
    assert "estimated" in summary and len(table) == 1 and plot is not None


def test_questions_are_independent(session):
    first = drain(app.on_ask("What is the secret word?", session, False))[2][-1]["content"]
    drain(app.on_ask("When does the museum open?", session, False))
    again = drain(app.on_ask("What is the secret word?", session, False))[2][-1]["content"]
    assert first.split("<sub>")[0] == again.split("<sub>")[0]
    assert len(session.turns) == 3


def test_baseline_switch_measures_the_speedup(session):
    _, _, _, _, summary, table, _ = drain(app.on_ask("What is the secret word?", session, True))
    assert "measured" in summary and table[-1][7] is not None and "measured" in table[-1][8]


def is_skip(update) -> bool:
    return update == gr.skip()


def test_errors_are_warnings_that_leave_the_session_and_the_screen_as_they_were(session, tmp_path):
    drain(app.on_ask("What is the secret word?", session, False))
    before = (session.document, session.prefilled, list(session.turns))
    chat = app.chat_messages(session)
    bad = tmp_path / "bad.pdf"
    bad.write_bytes(b"not a pdf at all")
    for action, message in ((lambda: app.on_upload(as_upload(bad), session), "not a PDF"),
                            (lambda: app.on_paste("   ", session), "Nothing to read"),
                            (lambda: drain(app.on_ask("   ", session, False)), "question is empty"),
                            (lambda: drain(app.on_ask("x" * 30_000, session, False)), "30,000 characters")):
        with pytest.warns(UserWarning, match=message):  # shown as a toast by Gradio
            outputs = action()
        assert (session.document, session.prefilled, list(session.turns)) == before
        assert session.prefilled.cache.length == session.prefilled.tokens
        if len(outputs) == 6:  # loading: nothing on screen changes
            assert all(is_skip(o) for o in outputs)
        else:  # asking: the chat is put back as it was, the question stays in its box
            assert outputs[2] == chat and all(is_skip(o) for o in outputs[3:])


def test_asking_before_any_document_is_a_message_not_a_trace():
    with pytest.warns(UserWarning, match="No document is loaded"):
        outputs = drain(app.on_ask("Hello?", None, False))
    assert all(is_skip(o) for o in outputs)


def test_stop_ends_the_answer_and_keeps_the_cache(session):
    full = drain(app.on_ask("Describe the document in detail.", session, False))[2][-1]["content"]
    events = app.on_ask("Describe the document in detail.", session, False)
    next(events)
    app.on_stop(session)
    last = drain(events)
    assert "stopped" in last[2][-1]["content"] and session.turns[-1].stopped
    assert session.prefilled.cache.length == session.prefilled.tokens
    after = drain(app.on_ask("Describe the document in detail.", session, False))[2][-1]["content"]
    assert after.split("<sub>")[0] == full.split("<sub>")[0]


def test_gradio_client_sessions_each_get_their_own_document(server, tmp_path):
    path = tmp_path / "zorbia.txt"
    path.write_text(DOC_B)
    a, b = Client(server, verbose=False), Client(server, verbose=False)
    assert "tokens" in a.predict(text=DOC_A, api_name="/prefill")
    assert "zorbia.txt" in b.predict(file=handle_file(str(path)), api_name="/prefill")
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

    session, *_ = app.on_paste(DOC_B, None)
    cache = weakref.ref(session.prefilled.cache)
    used = app.budget().used_bytes
    app.close_session(session)  # gr.State's delete_callback, when the tab closes or the time-to-live passes
    gc.collect()
    assert cache() is None and app.budget().used_bytes < used


def test_ask_streams_to_api_clients(server):
    client = Client(server, verbose=False)
    client.predict(text=DOC_A, api_name="/prefill")
    job = client.submit(question="Describe the document.", api_name="/ask")
    final = job.result()
    updates = job.outputs()
    assert len(updates) > 2 and updates[-1] == final
    assert all(later.startswith(earlier) for earlier, later in zip(updates, updates[1:]))
