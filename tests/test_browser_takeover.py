"""In a real browser (Debian's chromium), in English and Chinese: a document whose read by the best model would keep
the reader waiting on a CPU is answered at once by a faster model, its answer labelled with that model's name, while
the page says the better one reads in the background; once it has read, the page says it took over and it answers
the next question. No output in an error state. Fake engines: this tests the page, not the models."""

from __future__ import annotations

import threading

import pytest
from playwright.sync_api import expect

from fakes import FakeEngine
from test_browser import browser, page_at  # noqa: F401 (the module's browser fixture)
from test_browser_refusals import no_errors
from test_takeover import BEST, FAST, LONG

pytestmark = [pytest.mark.browser]

SAID = {  # what the page says, by language
    "en": dict(behind="is reading the document in the background", label=f"answered by {FAST} while {BEST}",
               took_over="has read the document and answers from now on", done="first token"),
    "zh": dict(behind="正在后台读取文档", label=f"由 {FAST} 回答（{BEST} 正在读取文档）",
               took_over="已读完文档，此后由它回答", done="首 token"),
}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_a_faster_model_answers_during_the_best_ones_read_and_the_page_shows_the_switch(
        browser, lang, tmp_path, monkeypatch):  # noqa: F811
    from app import KvqaApp
    from conftest import served
    from kvqa.cache.budget import CacheBudget
    from kvqa.config import Config
    from kvqa.model import offline

    monkeypatch.delenv("KVQA_OFFLINE_MODELS", raising=False)
    monkeypatch.setattr(offline, "installed", lambda model, cache_dir: True)
    release = threading.Event()
    question = "Who built the ferry?"
    fast = FakeEngine(32768, model=FAST, replies={question: "Orlan built it"})
    best = FakeEngine(32768, model=BEST, chunks=4, on_chunk=lambda document, chunk: release.wait(60),
                      replies={question: "the Orlan yard"})
    kvqa_app = KvqaApp(Config(cache_dir=tmp_path, device="cpu"), FakeEngine(model="SmolLM2-135M-Instruct"),
                       budget=CacheBudget(2**30), models=[BEST, FAST])
    kvqa_app.service._engines.update({BEST: best, FAST: fast})
    said = SAID[lang]
    try:
        with served(kvqa_app.demo, kvqa_app) as server, page_at(browser, server, lang, height=1000) as page:
            page.locator("#paste textarea").fill(LONG)
            page.locator("#read").click()
            status = page.locator("#doc-status")
            status.get_by_text(said["behind"]).wait_for(timeout=60_000)
            page.locator("#question textarea").fill(question)
            page.locator("#ask").click()
            bot = page.locator('[data-testid="bot"]').last
            bot.get_by_text(said["done"]).wait_for(timeout=30_000)  # answered while the best model still reads
            assert "Orlan built it" in bot.inner_text() and said["label"] in bot.inner_text()
            assert best.prefills == 0  # still reading
            no_errors(page)
            release.set()
            status.get_by_text(said["took_over"]).wait_for(timeout=30_000)  # the timer's tick shows the switch
            page.locator("#question textarea").fill(question)
            page.locator("#ask").click()
            expect(page.locator('[data-testid="bot"]')).to_have_count(2, timeout=30_000)
            second = page.locator('[data-testid="bot"]').last
            second.get_by_text(said["done"]).wait_for(timeout=30_000)
            assert "the Orlan yard" in second.inner_text() and said["label"] not in second.inner_text()
            assert said["label"] in page.locator('[data-testid="bot"]').first.inner_text()  # the first keeps its label
            no_errors(page)
    finally:
        release.set()
