"""A newcomer's first minutes in a real browser (Debian's chromium): every refusal they can reach says what to do in a
warning and leaves every output as it was (no output in Gradio's error state), in English and Chinese; questions
asked while a document is read wait for it and are answered in turn, and Stop withdraws the ones waiting."""

from __future__ import annotations

import os
import re
import time
import uuid

import pytest
from playwright.sync_api import expect

from conftest import served
from fakes import FakeEngine
from kvqa.config import Config
from kvqa.errors import QuestionError
from kvqa.prompt import MAX_QUESTION_CHARS
from kvqa.results import Answer, AnswerStream
from kvqa.timing import Timings
from test_browser import CHROMIUM, NAMES, browser, page_at  # noqa: F401 (the module's browser fixture)

pytestmark = [pytest.mark.browser]

# an output in Gradio's error state: its status tracker shows "Error"; an error toast is a gr.Error
ERRORS = ("document.querySelectorAll('[data-testid=\"status-tracker\"] .error').length + "
          "document.querySelectorAll('.toast-body.error').length")


def no_errors(page) -> None:
    page.wait_for_timeout(300)  # an error state arrives with the event's end
    assert page.evaluate(ERRORS) == 0, page.locator('[data-testid="status-tracker"] .error').all_inner_texts()


def warned(page, text: str) -> None:
    """The warning toast with `text` shows; then it is closed, so the next one is seen alone."""
    toast = page.locator(".toast-body").filter(has_text=text)
    toast.first.wait_for(timeout=60_000)
    for close in page.locator(".toast-close").all():
        try:
            close.click(timeout=1_000)
        except Exception:  # noqa: BLE001 (gone on its own meanwhile)
            pass
    no_errors(page)


@pytest.fixture(params=["en", "zh"])
def fresh_page(request, browser):  # noqa: F811
    context = browser.new_context(locale="zh-CN" if request.param == "zh" else "en-US",
                                  viewport={"width": 1400, "height": 1200})
    page = context.new_page()
    page.lang = request.param
    yield page
    context.close()


TEXTS = {  # what each refusal says, by language
    "en": dict(page="No document loaded yet.", no_document="No document is loaded yet", empty="The question is empty",
               stop="Nothing to stop", part="Load a document first", kind="kvqa cannot read",
               pdf="is named .pdf but is not a PDF",
               long="30,000 characters", language="switch the language when it is done",
               size="the limit is 50.0 MB", stopped="stopped"),
    "zh": dict(page="还没有加载文档。", no_document="还没有加载文档", empty="问题是空的", stop="没有可停止的",
               part="请先加载文档",
               kind="kvqa 无法读取", pdf="名为 .pdf，却不是 PDF", long="30,000", language="写完后再切换语言",
               size="上限是 50.0 MB", stopped="已停止"),
}


def clear(page) -> None:
    """Empty the upload box (its clear button, labelled in the page's language), so the file input is back."""
    page.locator("#upload button[aria-label]").last.click()
    page.locator("#upload input[type=file]").wait_for(state="attached")


def ask(page, question: str) -> None:
    page.locator("#question textarea").fill(question)
    page.locator("#ask").click()


def test_every_refusal_before_a_document_keeps_the_page(server, fresh_page, tmp_path):
    page, said = fresh_page, TEXTS[fresh_page.lang]
    page.goto(server)
    page.locator("#doc-status").get_by_text(said["page"]).wait_for()  # the page in its language
    expect(page.locator("#language").get_by_label(NAMES[page.lang])).to_be_checked(timeout=60_000)  # and the switch
    ask(page, "What is this about?")
    warned(page, said["no_document"])
    assert page.locator("#question textarea").input_value() == "What is this about?"  # kept in its box
    ask(page, "   ")
    warned(page, said["empty"])
    page.locator("#stop").click()
    warned(page, said["stop"])
    page.locator("#part textarea").fill("3-1")
    page.locator("#read-part").click()
    warned(page, said["part"])
    odd = tmp_path / "notes.xyz"
    odd.write_text("not a kind of file kvqa reads")
    page.locator("#upload input[type=file]").set_input_files(str(odd))
    warned(page, said["kind"])
    clear(page)
    bad = tmp_path / "scan.pdf"
    bad.write_bytes(b"this is not a PDF")
    page.locator("#upload input[type=file]").set_input_files(str(bad))
    warned(page, said["pdf"])
    clear(page)
    big = tmp_path / "big.txt"
    big.write_bytes(b"word " * (51 * 2**20 // 5))  # over the app's 50 MB limit
    page.locator("#upload input[type=file]").set_input_files(str(big))
    warned(page, said["size"])
    assert page.locator('[data-testid="bot"]').count() == 0


class EndlessEngine(FakeEngine):
    """The fake engine whose answers are written until they are stopped (a word every 50 ms, two minutes at most):
    a test that acts while an answer streams cannot lose the race to the answer's end."""

    def answer_turn(self, doc, question, *, should_stop=None):
        if len(question.text) > MAX_QUESTION_CHARS:  # refused before a word, as the real engines refuse it
            raise QuestionError("question.too_many_chars", chars=len(question.text), limit=MAX_QUESTION_CHARS)

        def pieces():
            words, deadline = 0, time.monotonic() + 120
            while not (should_stop is not None and should_stop()) and time.monotonic() < deadline:
                words += 1
                yield "word "
                time.sleep(0.05)
            yield Answer(question=question.text, text="word " * words, token_ids=tuple(range(words)),
                         timings=Timings(question_tokens=len(question.text.split()), new_tokens=words, ttft_s=0.05,
                                         answer_s=0.05 * words),
                         stop_reason="stopped", used_cache=True)
        return AnswerStream(pieces())


@pytest.fixture(scope="module")
def endless_server():
    """The app served with the endless fake engine (no model: the answer, not the model, is under test)."""
    from app import KvqaApp

    kvqa_app = KvqaApp(Config(), EndlessEngine())
    with served(kvqa_app.demo, kvqa_app) as url:
        yield url


def test_refusals_with_a_document_and_while_an_answer_streams(endless_server, fresh_page):
    page, said = fresh_page, TEXTS[fresh_page.lang]
    page.goto(endless_server)
    expect(page.locator("#language").get_by_label(NAMES[page.lang])).to_be_checked(timeout=60_000)
    page.locator("#sample").click()
    page.locator("#doc-status").get_by_text("declaration-of-independence.md").wait_for(timeout=120_000)
    no_errors(page)
    ask(page, "x" * 30_000)
    warned(page, said["long"])
    ask(page, "Describe the whole document in detail, paragraph by paragraph.")
    page.locator('[data-testid="bot"]').first.get_by_text("word word").wait_for(timeout=60_000)  # being written
    other = "zh" if page.lang == "en" else "en"
    page.locator("#language").get_by_label(NAMES[other]).click()  # not check(): the page puts the choice back at once
    warned(page, said["language"])
    expect(page.locator("#language").get_by_label(NAMES[page.lang])).to_be_checked()  # put back as it was
    page.locator("#stop").click()
    page.locator('[data-testid="bot"]').first.get_by_text(said["stopped"]).wait_for(timeout=60_000)
    assert page.locator('[data-testid="bot"]').count() == 1
    no_errors(page)


def long_text() -> str:
    """A document no other test reads (nothing cached for it), long enough that its read takes seconds (about 2,150
    tokens: five chunks of the prefill)."""
    facts = [f"Record {i}: the {colour} lighthouse on island {i} was painted in {1800 + i} by keeper {name}."
             for i, (colour, name) in enumerate(zip(["red", "white", "green", "blue"] * 20,
                                                    ["Ada", "Bo", "Cy", "Dee", "Eve"] * 16, strict=False))]
    return f"Lighthouse log {uuid.uuid4().hex}.\n\n" + "\n".join(facts)


@pytest.fixture
def reading_page(server, browser):  # noqa: F811
    """An English page whose pasted document (nothing cached for it) is being read."""
    context = browser.new_context(locale="en-US", viewport={"width": 1400, "height": 1200})
    page = context.new_page()
    page.goto(server)
    page.locator("#paste textarea").fill(long_text())
    page.locator("#read").click()
    yield page
    context.close()


def test_questions_asked_while_the_document_is_read_are_answered_in_turn(reading_page):
    page = reading_page
    ask(page, "Who painted the lighthouse on island 3?")
    bot = page.locator('[data-testid="bot"]')
    bot.first.get_by_text("Your question will be answered when the document is ready").wait_for(timeout=30_000)
    page.locator("#question textarea").fill("In which year was the lighthouse on island 7 painted?")
    page.locator("#question textarea").press("Enter")  # a second question, queued behind the first
    page.locator('[data-testid="user"]').nth(1).wait_for(timeout=30_000)
    no_errors(page)
    page.wait_for_function(  # both answered, in the order asked, each with its figures
        "Array.from(document.querySelectorAll('[data-testid=\"bot\"]')).filter("
        "b => b.innerText.includes('first token')).length == 2", timeout=240_000)
    users = page.locator('[data-testid="user"]').all_inner_texts()
    assert "island 3" in users[0] and "island 7" in users[1]
    no_errors(page)


def test_stop_withdraws_a_question_waiting_for_the_read(reading_page):
    page = reading_page
    ask(page, "Who painted the lighthouse on island 4?")
    page.locator('[data-testid="bot"]').first.get_by_text("will be answered").wait_for(timeout=30_000)
    page.locator("#stop").click()
    warned(page, "1 waiting question(s) withdrawn")
    page.wait_for_function("document.querySelectorAll('[data-testid=\"user\"]').length == 0", timeout=30_000)
    page.locator("#doc-status").get_by_text("ready").wait_for(timeout=240_000)
    assert page.locator('[data-testid="user"]').count() == 0  # not answered after the read either
    no_errors(page)


STAGES = {"en": "first use here only: converting", "zh": "仅首次使用：把 GGUF 转换为"}  # a model's first load says
HOLD_S = 1.5  # seconds each later stage of a model's load stays on screen in the test below (3 UI ticks)


@pytest.mark.model
@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_models_first_load_shows_its_stages_and_a_question_asked_meanwhile_is_answered(browser, tmp_path,  # noqa: F811
                                                                                         lang):
    """On a fresh model cache folder the model is converted from its package with the first document: the question
    asked meanwhile shows each stage and how far the load is (the figure moves), then is answered."""
    from app import KvqaApp
    from conftest import served
    from kvqa.config import config_from_env
    from kvqa.engines import make_engine

    config = config_from_env(os.environ, cache_dir=tmp_path / "models")  # nothing converted there yet
    engine, said = make_engine(config), []
    load = engine.load

    def load_telling(*, progress=None):  # each stage the load says, in order (a short one may come and go unseen)
        def telling(fraction, stage):
            said.append((stage.key, fraction))
            if progress is not None:
                progress(fraction, stage)
            if len(said) > 1 and said[-2][0] != stage.key:  # a later stage held on screen, as a slower machine
                time.sleep(HOLD_S)  # would: on 2 busy cores those after the conversion passed unseen once in CI
        return load(progress=telling)

    engine.load = load_telling
    kvqa_app = KvqaApp(config, engine)
    with served(kvqa_app.demo, kvqa_app) as server, page_at(browser, server, lang) as page:
        page.locator("#promise").get_by_text("SmolLM2-135M-Instruct").wait_for(timeout=60_000)  # not loaded yet
        page.locator("#paste textarea").fill(long_text())
        page.locator("#read").click()
        page.get_by_text(STAGES[lang]).first.wait_for(timeout=60_000)  # the read's own progress
        ask(page, "Who painted the lighthouse on island 2?")
        bot, notes = page.locator('[data-testid="bot"]').first, []
        deadline = time.monotonic() + 400
        while time.monotonic() < deadline:
            text = bot.inner_text() if bot.count() else ""
            if "first token" in text or "首 token" in text:
                break
            if text and (not notes or notes[-1] != text):
                notes.append(text)
            page.wait_for_timeout(250)
        else:
            pytest.fail(f"no answer; the notes shown: {notes}")
        keys = [key for key, _ in said]
        assert [k for k in ("load.convert", "load.write", "load.weights", "load.prepare") if k in keys] == [
            "load.convert", "load.write", "load.weights", "load.prepare"], said
        assert [f for _, f in said] == sorted(f for _, f in said), said
        waiting = [n for n in notes if "%" in n]
        assert any(STAGES[lang] in n for n in waiting), notes  # the conversion (a minute), said to happen once
        for stage in (True, False):  # the load's stages, then the read: each figure moves, forward
            percents = [float(re.search(r"(\d+)%", n).group(1)) for n in waiting
                        if ("SmolLM2-135M-Instruct" in n) is stage]
            assert len(set(percents)) >= 2 and percents == sorted(percents), notes
        no_errors(page)
