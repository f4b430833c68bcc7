"""A real browser (Debian's chromium, driven by playwright) uploads a file, asks two questions, sees answers and
their latency (the README's screenshot is the real model's: scripts/screenshot.py); a browser in Chinese gets the page
in Chinese, asks about a Chinese document and takes assets/ui-zh.png (written into assets/ only with
KVQA_SCREENSHOTS=1)."""

from __future__ import annotations

import contextlib
import dataclasses
import os
import shutil
from pathlib import Path

import pytest

from conftest import served

ASSETS = Path(__file__).parent.parent / "assets"
SAVE_SCREENSHOTS = os.environ.get("KVQA_SCREENSHOTS") == "1"  # retake languages.md's screenshot (else a temp dir)


def screenshot(page, name: str, tmp_path: Path, *, keep: bool = True) -> None:
    """The whole page as a PNG: into assets/ with KVQA_SCREENSHOTS=1 where `keep`, else a temp folder (the tree stays
    clean)."""
    path = (ASSETS if SAVE_SCREENSHOTS and keep else tmp_path) / name
    page.screenshot(path=str(path), full_page=True)
    assert path.stat().st_size > 10_000
CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
pytestmark = [pytest.mark.browser, pytest.mark.steps]  # one page goes through the first tests in turn: kept in the
#                                                        file's order when the suite runs shuffled (conftest.py)


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        reason = "chromium is not installed: `apt-get install chromium` to run the browser tests (.ci/run does this)"
        if os.environ.get("CI", "").lower() in ("1", "true", "yes"):
            pytest.fail(reason)  # CI must run them
        pytest.skip(reason)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, headless=True, args=[
            "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
            "--disable-component-update", "--disable-sync"])
        yield browser
        browser.close()


NAMES = {"en": "English", "zh": "中文"}  # the language switch's labels


@contextlib.contextmanager
def page_at(browser, url: str, lang: str = "en", *, height: int = 1200):
    """A fresh page in a browser set to the language's locale, opened at url, once the page has chosen that language
    (before anything is read); its context closed after."""
    from playwright.sync_api import expect

    context = browser.new_context(locale="zh-CN" if lang == "zh" else "en-US",
                                  viewport={"width": 1400, "height": height})
    page = context.new_page()
    try:
        page.goto(url)
        expect(page.locator("#language").get_by_label(NAMES[lang])).to_be_checked(timeout=60_000)
        yield page
    finally:
        context.close()


@pytest.fixture(scope="module")
def page(browser):
    context = browser.new_context(locale="en-US", viewport={"width": 1400, "height": 1200})
    yield context.new_page()
    context.close()


def details(page) -> None:
    """Open the document panel's details (model, tokens, cache, memory), folded under its first lines."""
    page.locator("#doc-status details summary").click()
    page.locator("#doc-status details[open]").wait_for()


def ask(page, question: str, answers_before: int, *, done: str = "first token") -> str:
    page.locator("#question textarea").fill(question)
    page.locator("#ask").click()
    bot = page.locator('[data-testid="bot"]')
    bot.nth(answers_before).wait_for(timeout=120_000)
    page.wait_for_function(  # the latency line is added when the answer is complete
        "([n, done]) => document.querySelectorAll('[data-testid=\"bot\"]').length > n && "
        "document.querySelectorAll('[data-testid=\"bot\"]')[n].innerText.includes(done)",
        arg=[answers_before, done], timeout=120_000)
    return bot.nth(answers_before).inner_text()


def test_upload_ask_twice_and_see_latency(server, page, tmp_path):
    page.goto(server)
    page.locator("#upload input[type=file]").set_input_files(str(ASSETS / "declaration-of-independence.md"))
    status = page.locator("#doc-status")
    status.get_by_text("ready").wait_for(timeout=120_000)  # at a glance: the document, ready, what to do next
    assert "Ask a question below" in status.inner_text() and "document tokens" not in status.inner_text()
    details(page)  # the figures, one click away
    shown = status.inner_text()  # read now, or (after another test read the sample) its cache restored or shared
    assert "read now:" in shown and "tokens/s" in shown or any(
        f"{origin}:" in shown for origin in ("restored from disk", "shared with another session")), shown
    page.locator("#doc-status details summary").click()  # folded again: the screenshot shows the panel at a glance

    first = ask(page, "What rights are unalienable?", 0)
    second = ask(page, "What do the signers pledge to each other?", 1)
    for answer in (first, second):
        assert "first token" in answer and "tokens/s" in answer
        assert len(answer.split("first token")[0].strip()) > 0
        assert "Sources in the document" in answer  # where each answer came from, folded under it
    page.locator('[data-testid="bot"]').nth(1).locator("details.sources summary").click()
    assert page.locator('[data-testid="bot"]').nth(1).locator("details.sources li").count() >= 1
    evidence = page.locator('[data-testid="bot"]').nth(1).locator("blockquote.evidence")  # shown, not folded
    assert evidence.is_visible() and evidence.inner_text().startswith("From the document:")
    assert evidence.locator("mark").count() == 1 and evidence.locator("mark").inner_text().strip()
    said = evidence.locator("strong.kvqa-answer")  # the answer's own words, bold where the passage says them
    assert said.count() >= 1 and said.first.inner_text().strip() in evidence.inner_text()
    page.wait_for_function(
        "document.querySelector('#latency-table') && document.querySelector('#latency-table').innerText.includes('2')")
    assert "Median time to first token over 2" in page.locator("#latency-summary").inner_text()
    page.locator("#latency-plot").scroll_into_view_if_needed()
    page.wait_for_timeout(500)
    screenshot(page, "upload-ask.png", tmp_path, keep=False)  # the README's is the real model's: scripts/screenshot.py


def test_a_bad_upload_shows_a_warning_and_keeps_the_document(server, page, tmp_path):
    """Runs after the test above, in the same page: the sample is loaded and two answers are shown."""
    bad = tmp_path / "scan.pdf"
    bad.write_bytes(b"this is not a PDF")
    page.locator("#upload").get_by_label("Clear").click()  # the previous upload, so the file input is back
    page.locator("#upload input[type=file]").set_input_files(str(bad))
    page.get_by_text("scan.pdf is named .pdf but is not a PDF").wait_for(timeout=60_000)
    assert "declaration-of-independence.md" in page.locator("#doc-status").inner_text()
    assert page.locator('[data-testid="bot"]').count() == 2


def test_choose_a_part_and_follow_up(server, page):
    """Read a chosen part of the document, then ask a follow-up with the conversation
    remembered."""
    page.locator("#part textarea").fill("1-2000")
    page.locator("#read-part").click()
    page.locator("#doc-status").get_by_text("as chosen").wait_for(timeout=120_000)
    assert "Read characters 1-2,000 of" in page.locator("#doc-status").inner_text()
    page.locator("#remember input").check()
    ask(page, "Who holds these truths?", 0)
    follow_up = ask(page, "And what do they say about governments?", 1)
    assert "read after 1 earlier turn" in follow_up
    page.locator("#new-conversation").click()
    page.wait_for_function("document.querySelectorAll('[data-testid=\"bot\"]').length == 0")


DOC_ZH = "秘密词是鹈鹕。博物馆在工作日上午九点开门。"


def test_the_page_in_chinese(server, browser, tmp_path):
    """A browser whose language is Chinese gets every label, the panels, the answer's figures,
    the latency panel and the toasts in Chinese; a Chinese document is read and quoted back; the switch turns the
    page to English. Saves assets/ui-zh.png."""
    context = browser.new_context(locale="zh-CN", viewport={"width": 1400, "height": 1200})
    page = context.new_page()
    try:
        page.goto(server)
        page.locator("#ask").get_by_text("提问").wait_for(timeout=60_000)  # gr.I18n, in the browser's language
        page.wait_for_function("document.querySelector('#language input[value=zh]').checked", timeout=60_000)
        assert "还没有加载文档" in page.locator("#doc-status").inner_text()
        assert page.locator("#chat").get_by_text("问与答").count() == 1
        assert "首 token 时间（秒）" in page.locator("#latency-table").inner_text()

        page.locator("#paste textarea").fill(DOC_ZH)
        page.locator("#read").click()
        status = page.locator("#doc-status")
        status.get_by_text("已就绪").wait_for(timeout=120_000)
        assert "请在下方提问" in status.inner_text() and "pasted text" in status.inner_text()
        details(page)
        assert "刚刚读取" in status.inner_text() and "文档 token 数" in status.inner_text()
        page.locator("#doc-status details summary").click()

        answer = ask(page, "秘密词是什么？", 0, done="首 token")
        assert "token/秒" in answer and "文档中的出处" in answer
        assert page.locator('[data-testid="user"]').first.inner_text().strip() == "秘密词是什么？"
        page.locator('[data-testid="bot"]').first.locator("details.sources summary").click()
        assert DOC_ZH in page.locator('[data-testid="bot"]').first.locator("details.sources li").first.inner_text()
        evidence = page.locator('[data-testid="bot"]').first.locator("blockquote.evidence")
        assert evidence.is_visible() and evidence.inner_text().startswith("文档原文：")
        assert "鹈鹕" in evidence.locator("strong.kvqa-answer").first.inner_text()  # the answer's words, in bold
        page.wait_for_function(
            "document.querySelector('#latency-summary').innerText.includes('首 token 时间中位数')")

        page.locator("#ask").click()  # an empty question: the library's error, in Chinese, as a toast
        page.get_by_text("问题是空的：请输入一个关于文档的问题。").wait_for(timeout=30_000)
        page.locator("#latency-plot").scroll_into_view_if_needed()
        page.wait_for_timeout(500)
        screenshot(page, "ui-zh.png", tmp_path)

        page.locator("#language").get_by_text("English").click()  # the switch: the same page, in English
        page.locator("#ask").get_by_text("Ask").wait_for(timeout=30_000)
        page.locator("#doc-status").get_by_text("ready").wait_for(timeout=30_000)
        assert "first token" in page.locator('[data-testid="bot"]').first.inner_text()
        assert "Median time to first token over 1" in page.locator("#latency-summary").inner_text()
    finally:
        context.close()


PDF_PAGES = {
    "en": ["The orchard grows apples and pears in long rows.",
           "The harbour ferry leaves at nine every morning. Tickets cost ten euros and are sold on board.",
           "The lighthouse keeper's code word is pelican."],
    "zh": ["果园里种着苹果树和梨树。", "渡轮每天早上九点从港口出发，票价十元，船上可以买票。",
           "灯塔看守人的暗号是鹈鹕。"],
}
CJK_FONT = Path("/usr/share/fonts/truetype/wqy/wqy-microhei.ttc")


@pytest.mark.parametrize("lang, question, done", [("en", "When does the harbour ferry leave?", "first token"),
                                                  ("zh", "渡轮几点出发？", "首 token")])
def test_the_source_on_its_page_and_the_conversation_downloaded(server, browser, tmp_path, lang, question, done):
    """A PDF's answer shows its first source on the PDF page, highlighted, beside the chat; the conversation
    downloads as Markdown and JSON, and the JSON parses with the question, answer and source page in it."""
    import json

    from fpdf import FPDF

    if lang == "zh" and not CJK_FONT.exists():
        pytest.skip("needs fonts-wqy-microhei (installed by .ci/run) to write a Chinese PDF")
    pdf = FPDF()
    if lang == "zh":
        pdf.add_font("cjk", "", str(CJK_FONT))
        pdf.set_font("cjk", size=12)
    else:
        pdf.set_font("helvetica", size=12)
    for text in PDF_PAGES[lang]:
        pdf.add_page()
        pdf.multi_cell(0, 8, text)
    path = tmp_path / ("guide.pdf" if lang == "en" else "指南.pdf")
    path.write_bytes(bytes(pdf.output()))
    context = browser.new_context(locale="en-US" if lang == "en" else "zh-CN",
                                  viewport={"width": 1400, "height": 1400}, accept_downloads=True)
    page = context.new_page()
    try:
        page.goto(server)
        page.locator("#upload input[type=file]").set_input_files(str(path))
        page.locator("#doc-status").get_by_text(path.name).wait_for(timeout=120_000)
        ask(page, question, 0, done=done)
        image = page.locator("#evidence-page img")
        image.wait_for(timeout=60_000)
        page.wait_for_function("document.querySelector('#evidence-page img').naturalWidth > 500", timeout=30_000)
        note = page.locator("#evidence-text").inner_text()
        assert ("Page 2, the passage highlighted" if lang == "en" else "第 2 页，已高亮该段落") in note

        page.locator("#export").click()
        links = page.locator("#exported a[download]")
        links.first.wait_for(timeout=60_000)
        hrefs = [links.nth(i).get_attribute("href") for i in range(links.count())]
        exported = {Path(h.split("?")[0]).suffix: page.request.get(h).text() for h in hrefs}
        conversation = json.loads(exported[".json"])
        (answered,) = conversation["answers"]
        assert answered["question"] == question and answered["sources"][0]["page"] == 2
        assert conversation["document"]["name"] == path.name and conversation["document"]["pages"] == 3
        assert f"## 1. {question}" in exported[".md"]
    finally:
        context.close()


def harbours_pdf(tmp_path: Path) -> Path:
    """A 16-page PDF of about 4.5k tokens: each page names its section's harbour master (Captain{n}x), then 1,200
    characters of the Declaration of Independence."""
    from fpdf import FPDF

    sample = (ASSETS / "declaration-of-independence.md").read_text().replace("\u2014", "-")
    pdf = FPDF()
    pdf.set_font("helvetica", size=10)
    for n in range(1, 17):
        start = (n * 1200) % (len(sample) - 1200)
        pdf.add_page()
        pdf.multi_cell(0, 5, f"Notes for section {n}. The harbour master of section {n} is called Captain{n}x.\n\n"
                             + sample[start: start + 1200])
    path = tmp_path / "harbours.pdf"
    path.write_bytes(bytes(pdf.output()))
    return path


def test_a_pdf_longer_than_the_model_reads_answers_from_the_right_part(default_lm, browser, tmp_path):
    """A 16-page PDF of about 4.5k tokens, served by an app whose model reads 4,096 tokens (the default model's
    weights, its context declared shorter: the app plans parts from it, and reading a part takes a quarter of the time
    of the 8,192 it reads) is cut into parts of whole pages; a question about page 15 is answered from the part that
    holds it, the page says so, and the answer's first source is shown on page 15 of the whole document."""
    from app import KvqaApp
    from kvqa.config import config_from_env
    from kvqa.engines import LocalEngine

    path = harbours_pdf(tmp_path)
    config = config_from_env(os.environ)
    kvqa_app = KvqaApp(config, LocalEngine(config, lm=dataclasses.replace(default_lm, context_length=4096)),
                       models=[config.model])  # the default alone: no model that reads the PDF whole is offered
    context = browser.new_context(locale="en-US", viewport={"width": 1400, "height": 1400})
    page = context.new_page()
    try:
        with served(kvqa_app.demo, kvqa_app) as server:
            page.goto(server)
            page.locator("#upload input[type=file]").set_input_files(str(path))
            status = page.locator("#doc-status")
            status.get_by_text("cut into").wait_for(timeout=240_000)
            details(page)
            assert "read now: pages 1-" in status.inner_text()
            answer = ask(page, "Who is the harbour master of section 15?", 0)
            assert "From pages" in answer
            page.locator("#doc-status").get_by_text("Answering from part").wait_for(timeout=60_000)
            note = page.locator("#evidence-text .kvqa-evidence-note")
            note.get_by_text("Page 15").wait_for(timeout=60_000)  # of all 16
            assert "Captain15x" in page.locator("#evidence-text").inner_text()
            summary = page.locator("#latency-summary").inner_text()
            assert "Parts read, of" in summary and summary.count("(read now:") == 2
            assert not page.locator("#ask-also").is_visible()  # no other part matched that question
            # a question about sections in both parts: answered from the first, and the page offers the other
            answer = ask(page, "Who are the harbour masters of section 3 and section 15?", 1)
            assert "From pages 1-" in answer
            also = page.locator("#ask-also")
            also.wait_for(state="visible", timeout=60_000)
            offered = also.inner_text()
            assert offered.startswith("Ask again from part 2 (pages ")
            also.click()
            page.wait_for_function(
                "() => document.querySelectorAll('[data-testid=\"bot\"]').length > 2 && "
                "document.querySelectorAll('[data-testid=\"bot\"]')[2].innerText.includes('first token')",
                timeout=240_000)
            again = page.locator('[data-testid="bot"]').nth(2).inner_text()
            assert "From " + offered.removeprefix("Ask again from part 2 (").split(" of ")[0] in again
            also.wait_for(state="hidden", timeout=60_000)  # asked there: nothing more to offer
    finally:
        context.close()


def test_a_question_needing_two_parts_is_answered_from_both_composed_and_says_so(default_lm, browser, tmp_path):
    """The same kind of PDF served with a store, so the other part is read ahead: a question about sections in both
    parts is then answered from one cache composed of both parts' passages, and the answer says it is composed and
    approximate (the page shows no error)."""
    from app import KvqaApp
    from kvqa.cache.store import KVStore
    from kvqa.config import config_from_env
    from kvqa.engines.stored import StoredLocalEngine

    path = harbours_pdf(tmp_path)
    config = config_from_env(os.environ).replaced(gather_tokens=4096)  # composing on (off by default)
    engine = StoredLocalEngine(config, lm=dataclasses.replace(default_lm, context_length=4096),
                               store=KVStore(tmp_path / "store", 2**30))
    kvqa_app = KvqaApp(config, engine, models=[config.model])
    context = browser.new_context(locale="en-US", viewport={"width": 1400, "height": 1400})
    page = context.new_page()
    try:
        with served(kvqa_app.demo, kvqa_app) as server:
            page.goto(server)
            page.locator("#upload input[type=file]").set_input_files(str(path))
            page.locator("#doc-status").get_by_text("parts ready: all").wait_for(state="attached", timeout=300_000)
            answer = ask(page, "Who are the harbour masters of section 3 and section 15?", 0)
            assert "Composed: the passages of parts 1, 2" in answer and "Approximate" in answer
            assert "From pages" not in answer  # not one part's answer
            assert not page.locator(".toast-wrap .error, .error-message").count()  # no error on the page
    finally:
        context.close()
