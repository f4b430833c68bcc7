"""People's own documents in a real browser (Debian's chromium), in English and Chinese: a long Word file without page
breaks and a long web page (tests/data/public) are each read in parts cut inside their one page, the part named by its
page and opening words; a Chinese question on a page holding Chinese and English is answered by the model that reads
Chinese, the switch and its reason shown; a question on a document in parts shows which part each source of its
answer lies in; a long page goes to the offered model whose context holds it whole, saying why; no output ever in
Gradio's error state. Fake engines at the seam (the page,
not the models, is under test; tests/test_public_documents.py reads the same files with the real ones)."""

from __future__ import annotations

import re
import threading
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from conftest import served
from fakes import FakeEngine
from kvqa.config import Config
from test_browser import browser, page_at  # noqa: F401 (the module's browser fixture)
from test_browser_refusals import NAMES, ask, clear, no_errors

pytestmark = [pytest.mark.browser]

PUBLIC = Path(__file__).resolve().parent / "data" / "public"
QUESTION = "本书重点介绍哪三种虚拟化解决方案？"
REPLY = "本书重点介绍 Xen、LXC 和 KVM 三种方案。"
SAID = {  # what the page says, by its language
    "en": dict(parts="is cut into", page="(page 1, from “", switch="the question is in Chinese",
               load_reason=None),
    "zh": dict(parts="已分成", page="第 1 页，从“", switch=None, load_reason="页面是中文且文档含有中文"),
}


class SlowFake(FakeEngine):
    """A fake whose reads take a second (ten chunks): the question waiting for one can be seen waiting."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, chunks=10, on_chunk=lambda document, chunk: time.sleep(0.1), **kwargs)


def two_models_app(cache, default_context: int, gemma_context: int, **gemma):
    """The app with the English-only default and Gemma offered (its converted copy 'lies' in the cache folder, so it
    counts as installed; offered, loaded), each a SlowFake of the context given."""
    from app import KvqaApp

    (cache / "gemma-3-270m-f32").mkdir()
    (cache / "gemma-3-270m-f32" / "model.safetensors").write_bytes(b"")
    default = SlowFake(default_context, model="SmolLM2-135M-Instruct")
    other = SlowFake(gemma_context, model="gemma-3-270m", **gemma)
    kvqa_app = KvqaApp(Config.of(cache_dir=cache), default, models=["gemma-3-270m"])
    kvqa_app.service._engines["gemma-3-270m"] = other
    return kvqa_app, default, other


@pytest.fixture
def two_models(tmp_path_factory):
    """The default (a 2,000-token context) and Gemma (8,192: it holds the long pages no more than the default does):
    the default reads English, Gemma what needs Chinese."""
    kvqa_app, _, gemma = two_models_app(tmp_path_factory.mktemp("models"), 2000, 8192, replies={QUESTION: REPLY})
    with served(kvqa_app.demo, kvqa_app) as url:
        yield url, gemma


def upload(page, path: Path, *, first: bool = False) -> None:
    """The file alone in the upload box (the box keeps what it holds: a second file would be read with it)."""
    if not first:
        clear(page)
    page.locator("#upload input[type=file]").set_input_files(str(path))


def status(page, *texts: str, timeout: float = 120) -> None:
    """The document's panel comes to hold every text (its details folded or not)."""
    deadline, shown = time.monotonic() + timeout, ""
    while time.monotonic() < deadline:
        shown = page.locator("#doc-status").text_content() or ""
        if all(t in shown for t in texts):
            return
        page.wait_for_timeout(250)
    raise AssertionError(f"{texts} not all in the document's panel: {shown!r}")


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_long_word_and_web_pages_are_read_in_parts_and_a_chinese_question_gets_the_model_that_reads_it(
        two_models, browser, lang):  # noqa: F811
    url, gemma = two_models
    said = SAID[lang]
    context = browser.new_context(locale="zh-CN" if lang == "zh" else "en-US", viewport={"width": 1400, "height": 1200})
    page = context.new_page()
    try:
        page.goto(url)
        expect(page.locator("#language").get_by_label(NAMES[lang])).to_be_checked(timeout=60_000)
        for name in ("en-long.docx", "en-long.html"):  # one page each, far longer than the context
            upload(page, PUBLIC / name, first=name.endswith("docx"))
            status(page, name, said["parts"], said["page"], "SmolLM2-135M-Instruct")
            no_errors(page)
        assert gemma.prefills == 0
        upload(page, PUBLIC / "zh-mixed.html")  # Chinese with English passages left in
        status(page, "zh-mixed.html")
        if said["load_reason"]:  # the Chinese page: its reader will ask in Chinese, so Gemma reads it at once
            status(page, "gemma-3-270m", said["load_reason"])
        else:
            status(page, "SmolLM2-135M-Instruct")
        no_errors(page)
        ask(page, QUESTION)
        bot = page.locator('[data-testid="bot"]')
        if said["switch"]:  # the English page: the question waits while Gemma reads the document, saying why
            bot.first.get_by_text(said["switch"]).wait_for(timeout=60_000)
        bot.first.get_by_text(REPLY).wait_for(timeout=120_000)
        status(page, "gemma-3-270m")
        if said["switch"]:
            status(page, said["switch"])
        assert gemma.prefills == 1  # the document read once by the model that reads the question
        expect(page.locator("#model select, #model input").first).to_have_value("gemma-3-270m")
        no_errors(page)
    finally:
        context.close()


def test_the_sources_of_an_answer_on_a_document_in_parts_say_which_part_each_lies_in(two_models, browser):  # noqa: F811
    url, _ = two_models
    context = browser.new_context(locale="en-US", viewport={"width": 1400, "height": 1200})
    page = context.new_page()
    try:
        page.goto(url)
        upload(page, PUBLIC / "en-long.html", first=True)
        status(page, "en-long.html", SAID["en"]["parts"])
        ask(page, "What is the default logging level?")
        bot = page.locator('[data-testid="bot"]').last
        bot.locator("blockquote.evidence").get_by_text(re.compile(r"\(part \d+\):")).wait_for(timeout=120_000)
        bot.locator("details.sources summary").click()
        places = bot.locator("details.sources li b").all_text_contents()
        place = re.compile(r"part \d+ · (page \d+|characters [\d,]+-[\d,]+)")
        assert places and all(place.fullmatch(p) for p in places), places
        no_errors(page)
    finally:
        context.close()


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_long_page_is_read_whole_by_the_model_that_holds_it_and_the_status_says_why(tmp_path, browser, lang):  # noqa: F811
    kvqa_app, default, gemma = two_models_app(tmp_path, 8192, 32768)  # Gemma's context holds the page whole
    with served(kvqa_app.demo, kvqa_app) as url, page_at(browser, url, lang) as page:
        upload(page, PUBLIC / "en-long.html", first=True)
        why = "一次能读" if lang == "zh" else "reads it whole"
        status(page, "en-long.html", "gemma-3-270m", why)
        assert SAID[lang]["parts"] not in (page.locator("#doc-status").text_content() or "")
        assert gemma.prefills == 1 and default.prefills == 0
        expect(page.locator("#model select, #model input").first).to_have_value("gemma-3-270m")
        no_errors(page)


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_reads_progress_shows_on_the_documents_panel_alone(tmp_path, browser, lang):  # noqa: F811
    """One progress bar for a read, on the document's panel, not one over every panel the read updates."""
    from app import KvqaApp

    release = threading.Event()  # the read is held half-way until the page has been looked at: no race with its end
    slow = FakeEngine(model="SmolLM2-135M-Instruct", chunks=10,
                      on_chunk=lambda document, chunk: chunk >= 5 and release.wait(120))
    kvqa_app = KvqaApp(Config.of(cache_dir=tmp_path), slow)
    try:
        with served(kvqa_app.demo, kvqa_app) as url, page_at(browser, url, lang) as page:
            shown = page.locator(".progress-text:visible")
            expect(shown).to_have_count(0, timeout=60_000)  # the page's own start settled
            upload(page, PUBLIC / "en-long.html", first=True)
            page.locator("#doc-status").get_by_text("50.0%").wait_for(timeout=60_000)  # held there
            assert slow.prefills == 0
            where = shown.evaluate_all("els => els.map(e => (e.closest('[id]') || {}).id)")
            assert where == ["doc-status"], where
            release.set()
            status(page, "en-long.html")
            no_errors(page)
    finally:
        release.set()
