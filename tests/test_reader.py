"""The model that reads the document's language (kvqa.model.presets.reader_for): on an offline install, a mostly Chinese
document goes from the English-only default to the offline model that reads Chinese, in the app and the API, unless a
model was named or chosen in the list; the status says which model reads it and why. Fake engines at the seam."""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr
import pytest

import app
import kvqa
from fakes import FakeEngine
from kvqa.messages import Message, render
from kvqa.model.presets import reader_for, reading_model, unread_question

CHINESE = "青石茶叶合作社成立于二〇〇八年，位于青石镇老粮站。合作社有社员一百二十户，主要种植绿茶和白茶。" * 8
ENGLISH = "The Lumaro CP-40 press holds 1.2 litres. Its frame is guaranteed for 24 months. " * 8


@pytest.fixture
def converted(tmp_path):
    """A cache folder where Gemma 3 270M's converted copy lies (so it counts as installed, packages or not)."""
    folder = tmp_path / "gemma-3-270m-f32"
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"")
    return tmp_path


def test_a_chinese_document_goes_to_the_model_that_reads_chinese(converted):
    default = Message("reason.default")
    model, why = reader_for("SmolLM2-135M-Instruct", default, CHINESE, cache_dir=converted)
    assert model == "gemma-3-270m" and "mostly Chinese" in why and "中文" in render(why, "zh")
    assert reader_for("SmolLM2-135M-Instruct", Message("reason.no_cuda"), CHINESE, cache_dir=converted)
    assert reader_for("SmolLM2-135M-Instruct", default, ENGLISH, cache_dir=converted) is None
    assert reader_for("gemma-3-270m", default, CHINESE, cache_dir=converted) is None  # reads it already
    assert reader_for("Qwen/Qwen2.5-0.5B-Instruct", default, CHINESE, cache_dir=converted) is None  # not offline
    for named in ("reason.env", "reason.command_line", "reason.app"):  # a person named the model: kept
        assert reader_for("SmolLM2-135M-Instruct", Message(named), CHINESE, cache_dir=converted) is None


LONG = ("The harbour office keeps the tide tables for every berth. Each ferry leaves from the north quay at the hour "
        "the board shows, and the pilots log each crossing in the ledger by the door. ") * 250  # ~43,000 characters


def test_a_document_longer_than_the_default_reads_goes_to_the_model_that_reads_it_whole(converted):
    default = Message("reason.default")
    model, why = reader_for("SmolLM2-135M-Instruct", default, LONG, cache_dir=converted)
    assert model == "gemma-3-270m" and "longer than SmolLM2-135M-Instruct reads at once" in str(why)
    assert "一次能读" in render(why, "zh")
    assert reader_for("SmolLM2-135M-Instruct", default, LONG[:20_000], cache_dir=converted) is None  # fits the default
    assert reader_for("SmolLM2-135M-Instruct", default, LONG * 4, cache_dir=converted) is None  # nor does Gemma hold it
    assert reader_for("gemma-3-270m", default, LONG, cache_dir=converted) is None  # reads it whole already
    for named in ("reason.env", "reason.command_line", "reason.app"):  # a person named the model: kept
        assert reader_for("SmolLM2-135M-Instruct", Message(named), LONG, cache_dir=converted) is None
    # a loaded model's own context counts: a Gemma that reads 8,192 tokens holds no more than the default
    assert reader_for("SmolLM2-135M-Instruct", default, LONG, cache_dir=converted,
                      contexts={"gemma-3-270m": 8192}) is None


def test_the_estimate_counts_a_cjk_ideograph_as_a_token_and_four_other_characters_as_one():
    from kvqa.model.presets import estimated_tokens

    assert estimated_tokens("abcd" * 100) == 100 and estimated_tokens("青石" * 50) == 100
    assert estimated_tokens(LONG) == len(LONG) // 4


def test_one_rule_for_the_app_and_the_cli_and_none_for_a_serving_engine(converted):
    """reading_model() is what the app, its API and the CLI ask; a serving engine serves the model it loaded."""
    config = kvqa.Config.of(model="SmolLM2-135M-Instruct", model_reason=Message("reason.default"), cache_dir=converted)
    assert reading_model(config, CHINESE)[0] == "gemma-3-270m"
    assert reading_model(config, ENGLISH) is None
    assert reading_model(config.replaced(engine_url="http://127.0.0.1:1/v1"), CHINESE) is None


def test_nothing_changes_where_the_chinese_model_is_not_installed(tmp_path, monkeypatch):
    monkeypatch.setattr("kvqa.model.offline.installed", lambda model, cache_dir: False)
    assert reader_for("SmolLM2-135M-Instruct", Message("reason.default"), CHINESE, cache_dir=tmp_path) is None


def offline_app(cache_dir, **settings):
    config = kvqa.Config.of(cache_dir=cache_dir, **settings)
    default, gemma = FakeEngine(model="SmolLM2-135M-Instruct"), FakeEngine(model="gemma-3-270m")
    ui = app.KvqaApp(config, default, models=["gemma-3-270m"])
    ui.service._engines["gemma-3-270m"] = gemma  # offered, already loaded
    return ui, default, gemma


def test_the_app_reads_a_chinese_document_with_the_model_that_reads_it_and_says_why(converted):
    ui, default, gemma = offline_app(converted)
    first = ui.reads.on_paste(ENGLISH, None)[ui.page.state]
    assert first.engine is default
    shown = ui.reads.on_paste(CHINESE, first, lang="zh")
    session = shown[ui.page.state]
    try:
        assert session is not first and session.engine is gemma and gemma.prefills == 1
        assert first.closed and first.prefilled is None  # the English one is freed once the new read succeeded
        assert shown[ui.page.model_box] == "gemma-3-270m"
        assert "gemma-3-270m" in shown[ui.page.status] and "文档主要是中文" in shown[ui.page.status]
        english = ui.reads.on_paste(ENGLISH, session)[ui.page.state]  # English again: the default reads it
        assert english.engine is default and session.closed
        english.close()
        api = ui.api.api_prefill(text=CHINESE)[ui.page.state]  # the API the same
        assert api.engine is gemma
        api.close()
    finally:
        session.close()


def test_the_app_reads_a_long_document_whole_with_the_model_whose_context_holds_it_and_says_why(converted):
    config = kvqa.Config.of(cache_dir=converted)
    default = FakeEngine(model="SmolLM2-135M-Instruct")
    gemma = FakeEngine(context_tokens=32768, model="gemma-3-270m")
    ui = app.KvqaApp(config, default, models=["gemma-3-270m"])
    ui.service._engines["gemma-3-270m"] = gemma  # offered, loaded: its context is what counts
    shown = ui.reads.on_paste(LONG, None)
    session = shown[ui.page.state]
    try:
        assert session.engine is gemma and gemma.prefills == 1 and default.prefills == 0
        assert len(session.parts) == 1 and session.notice is None  # read whole
        assert "gemma-3-270m" in shown[ui.page.status]
        assert "longer than SmolLM2-135M-Instruct reads at once" in shown[ui.page.status]
        short = ui.reads.on_paste(ENGLISH, session)[ui.page.state]  # a short one: the default reads it
        assert short.engine is default
        short.close()
    finally:
        session.close()


def test_a_model_chosen_in_the_list_or_named_is_kept(converted):
    ui, default, gemma = offline_app(converted)
    session = ui.reads.on_paste(ENGLISH, None)[ui.page.state]
    # chosen in the list, though already reading
    assert ui.reads.on_model("SmolLM2-135M-Instruct", session) == gr.skip()
    session = ui.reads.on_paste(CHINESE, session)[ui.page.state]
    try:
        assert session.engine is default  # chosen in the list: the Chinese document stays with it
    finally:
        session.close()
    named, default, gemma = offline_app(converted, model_reason=Message("reason.command_line"))
    session = named.reads.on_paste(CHINESE, None)[named.page.state]
    try:
        assert session.engine is default and gemma.prefills == 0
    finally:
        session.close()


def test_a_failed_read_on_the_other_model_leaves_the_session_as_it_was(converted):
    ui, default, gemma = offline_app(converted)

    def out_of_memory(document, chunk):
        raise kvqa.errors.OutOfMemory("memory.out", doing=Message("doing.reading"))

    gemma.on_chunk = out_of_memory
    session = ui.reads.on_paste(ENGLISH, None)[ui.page.state]
    try:
        with pytest.warns(UserWarning):
            shown = ui.reads.on_paste(CHINESE, session)
        assert ui.page.state not in shown or shown[ui.page.state] is session
        assert not session.closed and session.engine is default and session.document.text.startswith("The Lumaro")
    finally:
        session.close()


def test_the_list_offers_the_offline_models_installed_here(converted, monkeypatch):
    from kvqa.model.presets import offered

    assert offered("SmolLM2-135M-Instruct", {}, cache_dir=converted) == ["SmolLM2-135M-Instruct", "gemma-3-270m"]
    assert offered("my/own-model", {}, cache_dir=converted) == ["my/own-model"]  # a model named: only it
    monkeypatch.setattr("kvqa.model.offline.installed", lambda model, cache_dir: model.name.startswith("SmolLM2"))
    assert offered("SmolLM2-135M-Instruct", {}, cache_dir=converted) == ["SmolLM2-135M-Instruct"]


MIXED = ("虚拟化是指在一台物理计算机上运行多个虚拟系统。本章介绍三种方案，并说明各自的优点。\n\n"
         "The following commands were left untranslated: run xl create to start a domain and xl list to see it.\n\n"
         ) * 6  # Chinese with English passages, as published translations are: not mostly Chinese by letters


def test_the_questions_and_the_pages_language_choose_the_model_too(converted):
    default = Message("reason.default")
    assert reader_for("SmolLM2-135M-Instruct", default, MIXED, cache_dir=converted) is None  # asked in English
    model, why = reader_for("SmolLM2-135M-Instruct", default, MIXED, cache_dir=converted, page_lang="zh")
    assert model == "gemma-3-270m" and why.key == "reason.asks_chinese"
    model, why = reader_for("SmolLM2-135M-Instruct", default, ENGLISH, cache_dir=converted, questions=["容量是多少？"])
    assert model == "gemma-3-270m" and why.key == "reason.question_chinese" and "问题是中文" in render(why, "zh")
    # an English page, an English question, or an English document quoting a few Chinese words: no switch
    quoting = ENGLISH + " The tea is called 白茶 there."
    assert reader_for("SmolLM2-135M-Instruct", default, quoting, cache_dir=converted, page_lang="zh") is None
    assert reader_for("SmolLM2-135M-Instruct", default, MIXED, cache_dir=converted,
                      questions=["What does xl list show?"]) is None
    assert reader_for("SmolLM2-135M-Instruct", default, ENGLISH, cache_dir=converted,
                      questions=["What is the capacity of 白茶 cups?"]) is None  # an English question
    for chinese in ("Sky Movies和Sky Box office也包含什么可选音轨？", "Internet2是什么"):  # Chinese, naming Latin names
        assert reader_for("SmolLM2-135M-Instruct", default, ENGLISH, cache_dir=converted, questions=[chinese])
    named = Message("reason.command_line")  # a named model is kept; unread_question says what to do instead
    assert reader_for("SmolLM2-135M-Instruct", named, ENGLISH, cache_dir=converted, questions=["容量是多少？"]) is None
    refusal = unread_question("SmolLM2-135M-Instruct", "容量是多少？", cache_dir=converted)
    assert "gemma-3-270m" in render(refusal, "zh") and "用英文提问" in render(refusal, "zh")
    assert unread_question("SmolLM2-135M-Instruct", "What is the capacity?", cache_dir=converted) is None
    assert unread_question("gemma-3-270m", "容量是多少？", cache_dir=converted) is None


def tab_request() -> SimpleNamespace:
    """What Gradio hands a handler: its tab's session hash and the client's address."""
    return SimpleNamespace(session_hash=f"tab-{id(object())}", headers={}, client=SimpleNamespace(host="10.1.2.4"))


def test_a_chinese_question_on_an_english_document_is_answered_by_the_model_that_reads_it(converted):
    """The document is read again by Gemma while the question waits (its progress and reason in the chat); the
    conversation so far stays; the status says why; a second Chinese question reads nothing more."""
    ui, default, gemma = offline_app(converted)
    request = tab_request()
    session = ui.reads.on_paste(ENGLISH, None)[ui.page.state]
    list(ui.questions.on_answer(session, False, False, "en", False, request))  # nothing waiting: nothing changes
    ui.questions.on_question("How much does the press hold?", session, "en", request)
    session = list(ui.questions.on_answer(session, False, False, "en", False, request))[-1][ui.page.state]
    assert session.engine is default and gemma.prefills == 0
    ui.questions.on_question("压榨机能装多少？", session, "zh", request)
    shown = list(ui.questions.on_answer(session, False, False, "zh", False, request))
    waiting = [m["content"] for out in shown[:-1] for m in out.get(ui.page.chat, [])]
    assert any("⏳" in c and "gemma-3-270m" in c and "问题是中文" in c for c in waiting), waiting
    fresh = shown[-1][ui.page.state]
    try:
        assert fresh.engine is gemma and gemma.prefills == 1 and session.closed
        assert [t.question for t in fresh.turns] == ["How much does the press hold?", "压榨机能装多少？"]
        assert gemma.asked[-1].text == "压榨机能装多少？"
        assert "gemma-3-270m" in shown[-1][ui.page.status] and "问题是中文" in shown[-1][ui.page.status]
        assert shown[-1][ui.page.model_box] == "gemma-3-270m"
        ui.questions.on_question("保修多久？", fresh, "zh", request)
        again = list(ui.questions.on_answer(fresh, False, False, "zh", False, request))[-1][ui.page.state]
        assert again is fresh and gemma.prefills == 1
    finally:
        fresh.close()


def test_a_chinese_question_to_a_chosen_english_model_says_what_to_do_in_chinese(converted):
    ui, default, gemma = offline_app(converted, model_reason=Message("reason.command_line"))
    request = tab_request()
    session = ui.reads.on_paste(ENGLISH, None)[ui.page.state]
    try:
        ui.questions.on_question("压榨机能装多少？", session, "en", request)  # the English page, a Chinese question
        with pytest.warns(UserWarning, match="只能读英文"):
            shown = list(ui.questions.on_answer(session, False, False, "en", False, request))
        assert shown[-1][ui.page.question] == "压榨机能装多少？"  # back in its box; nothing answered, nothing read
        assert session.turns == [] and gemma.prefills == 0 and not session.closed
    finally:
        session.close()
