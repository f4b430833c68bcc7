"""The Gradio app: handlers called directly, the gradio_client API against the app on loopback, and sessions."""

from __future__ import annotations

import uuid

import gradio as gr
import pytest
from gradio_client import Client

import app
from conftest import as_upload
from kvqa.session.session import Ask
from kvqa.ui.answers import chat_messages

DOC_A = "The secret word is pelican. The museum opens at 9 am on weekdays."
DOC_B = "The capital of Zorbia is Quentin. Zorbia's river is called the Lune."
UI = app.kvqa_app


def drain(events) -> dict:
    outputs = None
    for outputs in events:
        pass
    return outputs


def last_answer(outputs: dict) -> str:
    return outputs[UI.page.chat][-1]["content"]


@pytest.fixture
def session(default_lm):
    session = UI.reads.on_paste(DOC_A, None)[UI.page.state]
    yield session
    session.close()


def test_paste_prefills_once_and_shows_figures(default_lm):
    text = f"{DOC_A} This copy is only for this test ({uuid.uuid4().hex})."  # no other session can hold its cache
    session = UI.reads.on_paste(text, None)[UI.page.state]
    try:
        status = UI.status.status_markdown(session)
        assert "document tokens" in status and "read now:" in status and "tokens/s" in status and "MB" in status
        prefilled = session.prefilled
        again = UI.reads.on_paste(text, session)
        # no second prefill
        assert again[UI.page.state].prefilled is prefilled and "already loaded" in again[UI.page.status]
    finally:
        session.close()


def test_two_sessions_with_one_document_share_its_cache(default_lm):
    """The second session's cache is the first one's, and its status says so."""
    text = DOC_B + " This copy is only for the sharing test."
    first, second = UI.reads.on_paste(text, None)[UI.page.state], None
    try:
        shown = UI.reads.on_paste(text, None)
        second = shown[UI.page.state]
        assert second is not first and second.prefilled is first.prefilled
        assert "shared with another session: " in shown[UI.page.status]
        assert "read now: " in UI.status.status_markdown(first)
        outputs = drain(UI.questions.on_ask(Ask("What is the capital of Zorbia?"), second))
        assert "Quentin" in last_answer(outputs)
    finally:
        first.close()
        if second is not None:
            second.close()


def test_ask_streams_then_shows_latency(session):
    steps = list(UI.questions.on_ask(Ask("What is the secret word?"), session))
    assert len(steps) >= 3  # streamed: several partial updates before the final one
    # only the chat changes while streaming
    assert all(set(step) == {UI.page.question, UI.page.chat} for step in steps[:-1])
    final = steps[-1]
    chat = final[UI.page.chat]
    assert chat[-2] == {"role": "user", "content": "What is the secret word?"}
    assert "pelican" in chat[-1]["content"].lower() and "first token" in chat[-1]["content"]
    assert "estimated" in final[UI.page.summary] and len(final[UI.page.table]["data"]) == 1
    assert final[UI.page.plot] is not None


def test_questions_are_independent(session):
    first = last_answer(drain(UI.questions.on_ask(Ask("What is the secret word?"), session)))
    drain(UI.questions.on_ask(Ask("When does the museum open?"), session))
    again = last_answer(drain(UI.questions.on_ask(Ask("What is the secret word?"), session)))
    assert first.split("<sub>")[0] == again.split("<sub>")[0]
    assert len(session.turns) == 3


def test_baseline_switch_measures_the_speedup(session):
    final = drain(UI.questions.on_ask(Ask("What is the secret word?", baseline=True), session))
    assert "measured" in final[UI.page.summary] and final[UI.page.table]["data"][-1][7] is not None
    assert "measured" in final[UI.page.table]["data"][-1][8]
    turn = session.turns[-1]
    assert turn.baseline_same is True  # float32: the recomputed answer is token for token the cached one
    assert final[UI.page.table]["data"][-1][7] == round(turn.baseline.ttft_s, 3)
    factor = turn.baseline.ttft_s / turn.timings.ttft_s
    assert final[UI.page.table]["data"][-1][8] == f"{factor:.1f}x (measured)"


def test_errors_are_warnings_that_leave_the_session_and_the_screen_as_they_were(session, tmp_path):
    drain(UI.questions.on_ask(Ask("What is the secret word?"), session))
    before = (session.document, session.prefilled, list(session.turns))
    chat = chat_messages(session)
    bad = tmp_path / "bad.pdf"
    bad.write_bytes(b"not a pdf at all")
    for action, message in ((lambda: UI.reads.on_upload(as_upload(bad), session), "not a PDF"),
                            (lambda: UI.reads.on_paste("   ", session), "Nothing to read"),
                            (lambda: drain(UI.questions.on_ask(Ask("   "), session)), "question is empty"),
                            (lambda: drain(UI.questions.on_ask(Ask("x" * 30_000), session)), "30,000 characters")):
        with pytest.warns(UserWarning, match=message):  # shown as a toast by Gradio
            outputs = action()
        assert (session.document, session.prefilled, list(session.turns)) == before
        assert session.prefilled.cache.length == session.prefilled.tokens
        if UI.page.chat in outputs:  # asking: the chat is put back as it was, the question stays in its box
            assert outputs == {UI.page.chat: chat, UI.page.question: outputs[UI.page.question]}
            assert outputs[UI.page.question]
        else:  # loading: nothing on screen changes
            assert outputs == gr.skip()


def test_asking_before_any_document_is_a_message_not_a_trace():
    with pytest.warns(UserWarning, match="No document is loaded"):
        outputs = drain(UI.questions.on_ask(Ask("Hello?"), None))
    assert outputs == {UI.page.question: "Hello?"}  # kept in its box; every other output as it was


def test_stop_ends_the_answer_and_keeps_the_cache(session):
    full = last_answer(drain(UI.questions.on_ask(Ask("Describe the document in detail."), session)))
    events = UI.questions.on_ask(Ask("Describe the document in detail."), session)
    next(events)
    UI.questions.on_stop(session)
    last = drain(events)
    assert "stopped" in last_answer(last) and session.turns[-1].stopped
    assert session.prefilled.cache.length == session.prefilled.tokens
    after = last_answer(drain(UI.questions.on_ask(Ask("Describe the document in detail."), session)))
    assert after.split("<sub>")[0] == full.split("<sub>")[0]


def test_an_abandoned_answer_frees_the_session_when_its_request_ends(session):
    """Gradio closes the handler's generator when a request ends early; the session is free at once."""
    events = UI.questions.on_ask(Ask("Describe the document in detail."), session)
    next(events)
    assert session.busy
    events.close()
    assert not session.busy and session.prefilled.cache.length == session.prefilled.tokens
    assert "pelican" in last_answer(drain(UI.questions.on_ask(Ask("What is the secret word?"), session))).lower()


def test_gradio_client_sessions_each_get_their_own_document(server, tmp_path):
    path = tmp_path / "zorbia.txt"
    path.write_text(DOC_B)
    a, b = Client(server, verbose=False), Client(server, verbose=False)
    assert "tokens" in a.predict(text=DOC_A, api_name="/prefill")
    assert "zorbia.txt" in b.predict(file={"path": str(path), "meta": {"_type": "gradio.FileData"}},
                                      api_name="/prefill")
    answers_a = [a.predict(question=q, api_name="/ask")
                 for q in ("What is the secret word?", "When does the museum open?")]
    answer_b = b.predict(question="What is the capital of Zorbia?", api_name="/ask")
    assert all(answers_a) and "pelican" in answers_a[0].lower() and "9" in answers_a[1]
    assert "quentin" in answer_b.lower()
    with pytest.raises(Exception, match="is not one of this document's parts"):  # `part` reaches the handler
        a.predict(question="What is the secret word?", part="1-2", api_name="/ask")
    with pytest.raises(Exception, match="No document is loaded"):
        Client(server, verbose=False).predict(question="Anything?", api_name="/ask")


def test_a_client_that_goes_away_mid_answer_leaves_the_session_exact(server):
    client = Client(server, verbose=False)
    client.predict(text=DOC_A, api_name="/prefill")
    fresh = client.predict(question="What is the secret word?", api_name="/ask")
    job = client.submit(question="Describe the document in detail, sentence by sentence.", api_name="/ask")
    for partial in job:  # wait until the answer is streaming: the client goes away in the middle of it
        if partial:
            break
    job.cancel()  # what a closed tab or a dropped connection does
    assert client.predict(question="What is the secret word?", api_name="/ask") == fresh
    asked = [a["question"] for a in client.predict(api_name="/export")["answers"]]
    assert asked == ["What is the secret word?"] * 2  # the cancel landed before the answer ended: no turn of it


def test_ending_a_session_frees_its_cache(default_lm):
    import gc
    import weakref

    session = UI.reads.on_paste(DOC_B + " Held by this session alone.", None)[UI.page.state]  # a cache nobody shares
    cache = weakref.ref(session.prefilled.cache)
    used = UI.service.budget.used_bytes
    app.close_session(session)  # gr.State's delete_callback, when the tab closes or the time-to-live passes
    gc.collect()
    assert cache() is None and UI.service.budget.used_bytes < used


def test_ask_streams_to_api_clients(server):
    client = Client(server, verbose=False)
    client.predict(text=DOC_A, api_name="/prefill")
    job = client.submit(question="Describe the document.", api_name="/ask")
    final = job.result()
    updates = job.outputs()
    assert len(updates) > 2 and updates[-1] == final
    assert all(later.startswith(earlier) for earlier, later in zip(updates, updates[1:]))


def test_the_app_is_built_from_one_composition_root(default_lm):
    """Another model or setting means another KvqaApp, not a rebound global."""
    import kvqa

    seven = kvqa.Config.of(max_new_tokens=7)
    other = app.KvqaApp(seven, kvqa.make_engine(seven, lm=default_lm))
    page = other.demo
    assert page is not app.demo and other.config.limits.max_new_tokens == 7 and UI.config.limits.max_new_tokens != 7
    session = other.reads.on_paste(DOC_A, None)[other.page.state]
    assert session.engine is other.service.engine
    drain(other.questions.on_ask(Ask("Describe the document in detail."), session))
    assert session.turns[-1].timings.new_tokens <= 7
    session.close()


# ---- the page in Chinese

DOC_ZH = "秘密词是鹈鹕。博物馆在工作日上午九点开门。"


def test_the_page_opens_in_the_browsers_language():
    """On load, the switch takes the language of the request's Accept-Language header, and the page says so."""
    from types import SimpleNamespace

    zh = UI.language.on_load(None, SimpleNamespace(headers={"accept-language": "zh-CN,zh;q=0.9,en;q=0.8"}))
    assert zh[UI.page.lang] == "zh" and zh[UI.page.status] == "还没有加载文档。"
    assert zh[UI.page.table]["headers"][1] == "问题"
    promise = zh[UI.page.promise_box]  # said without loading the model when it has not loaded yet
    loaded = UI.service.engine.loaded
    assert ("运行于" in promise) is loaded and ("随第一份文档加载" in promise) is not loaded
    labels = {update.get("label") or update.get("value") or update.get("placeholder") for update in
              (zh[c] for c in UI.texts.fixed)}
    assert {"提问", "停止", "问与答", "新对话", "加载示例"} <= labels
    en = UI.language.on_load(None, SimpleNamespace(headers={"accept-language": "en-GB,en;q=0.9"}))
    assert en[UI.page.lang] == "en" and en[UI.page.status] == "No document loaded yet."


def test_every_fixed_text_is_shown_through_i18n_in_both_languages():
    """gr.I18n gets every ui.* message in both languages, and every component with a fixed text uses one."""
    texts = UI.texts.i18n.translations_dict
    assert set(texts) == {"en", "zh"} and texts["en"].keys() == texts["zh"].keys()
    used = {key for fixed in UI.texts.fixed.values() for key in fixed.values()}
    assert used <= texts["zh"].keys() and {"ui.ask", "ui.upload", "ui.limits", "ui.latency"} <= used
    assert "768" in texts["zh"]["ui.limits"] and "个 token" in texts["zh"]["ui.limits"]  # filled in for this app


def test_the_upload_box_takes_any_file_and_kvqa_names_the_kinds_it_reads(tmp_path):
    """The upload box sets no file types: with them, Gradio's page drops a file of another kind without a word. kvqa
    refuses it itself, in a warning naming every kind it reads (kvqa.documents.reading' list, not a copy of it)."""
    from fakes import FakeEngine
    from kvqa.cache.budget import CacheBudget
    from kvqa.config import Config
    from kvqa.documents.reading import SUPPORTED_SUFFIXES

    ui = app.KvqaApp(Config(), FakeEngine(), budget=CacheBudget(2**30))
    page = ui.demo
    upload = next(block for block in page.blocks.values() if getattr(block, "elem_id", None) == "upload")
    assert upload.file_types is None
    odd = tmp_path / "notes.xyz"
    odd.write_text("A kind of file kvqa does not read.")
    with pytest.warns(UserWarning, match="kvqa cannot read '.xyz' files") as warned:
        assert ui.reads.on_upload(as_upload(odd), None) == gr.skip()
    assert all(suffix in str(warned[0].message) for suffix in SUPPORTED_SUFFIXES)


def test_the_readme_the_cli_and_the_refusal_name_the_same_kinds(capsys, tmp_path):
    """One list of kinds, said the same everywhere: the README, `kvqa ask --help` and the message for a file of another
    kind list kvqa.documents.reading' one list of kinds, all of it."""
    from pathlib import Path

    import kvqa
    from kvqa.cli import main
    from kvqa.documents.reading import SUPPORTED_SUFFIXES

    readme = (Path(__file__).parent.parent / "README.md").read_text()
    with pytest.raises(SystemExit):
        main(["ask", "--help"])
    helped = " ".join(capsys.readouterr().out.split())
    with pytest.raises(kvqa.DocumentError) as refused:
        kvqa.load_document(tmp_path / "sheet.xlsx")
    for suffix in SUPPORTED_SUFFIXES:
        assert f"`{suffix}`" in readme and suffix in helped and suffix in str(refused.value), suffix


def test_a_chinese_document_answered_in_chinese(default_lm):
    """CJK end to end through the handlers: the status, the answer's sources and figures, the latency panel,
    and a switch back to English that re-says them."""
    session = UI.reads.on_paste(DOC_ZH, None, None, "zh")[UI.page.state]
    try:
        assert session.document.text == DOC_ZH
        status = UI.status.status_markdown(session, "zh")
        assert "文档 token 数" in status and "刚刚读取" in status and "token/秒" in status
        # the default model reads English only: the offline model that reads Chinese reads it, and the status says why
        assert "gemma-3-270m" in status and "读不懂中文" in status and "只能读英文" not in status
        final = drain(UI.questions.on_ask(Ask("秘密词是什么？"), session, "zh"))
        chat = final[UI.page.chat]
        assert chat[-2] == {"role": "user", "content": "秘密词是什么？"}
        assert "首 token" in chat[-1]["content"] and "token/秒" in chat[-1]["content"]
        assert "文档中的出处" in chat[-1]["content"] and "鹈鹕" in chat[-1]["content"]  # the quoted passage
        assert "首 token 时间中位数" in final[UI.page.summary] and "估算" in final[UI.page.table]["data"][0][8]
        assert final[UI.page.table]["headers"][4] == "首 token 时间（秒）"

        english = UI.language.on_language("en", session)
        assert english[UI.page.chat]["label"] == "Questions and answers"
        assert "first token" in english[UI.page.chat]["value"][-1]["content"]
        assert "document tokens" in english[UI.page.status] and english[UI.page.summary].startswith("Cache read now")
        chinese = UI.language.on_language("zh", session)
        chat = chinese[UI.page.chat]
        assert chat["label"] == "问与答" and "首 token" in chat["value"][-1]["content"]
        assert chinese[UI.page.part]["label"].startswith("要读取的部分")
    finally:
        session.close()


def test_errors_and_toasts_in_chinese(session, tmp_path):
    """The library's errors, said in the switch's language; the session is left as it was."""
    bad = tmp_path / "scan.pdf"
    bad.write_bytes(b"not a pdf at all")
    with pytest.warns(UserWarning, match="scan.pdf 名为 .pdf，却不是 PDF"):
        assert UI.reads.on_upload(as_upload(bad), session, "zh") == gr.skip()
    with pytest.warns(UserWarning, match="问题是空的"):
        drain(UI.questions.on_ask(Ask("   "), session, "zh"))
    with pytest.warns(UserWarning, match="还没有加载文档"):
        drain(UI.questions.on_ask(Ask("你好？"), None, "zh"))
    with pytest.warns(UserWarning, match="“第三页”不是字符范围"):
        UI.reads.on_part("第三页", session, "zh")
    good = tmp_path / "good.txt"
    good.write_text(DOC_ZH, encoding="utf-8")
    with pytest.warns(UserWarning, match="已跳过：scan.pdf 名为 .pdf"):  # a bad file among good ones
        shown = UI.reads.on_upload([as_upload(bad), as_upload(good)], None, "zh")
    shown[UI.page.state].close()
    assert session.document.text == DOC_A
