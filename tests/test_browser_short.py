"""In a real browser (Debian's chromium): an answer's shortest phrase is shown above it and marked, in bold, inside
the source passage quoted under it, in English and in Chinese (a fake engine gives the answers: this tests the page,
not the model)."""

from __future__ import annotations

import pytest

from fakes import FakeEngine
from test_browser import browser, page_at  # noqa: F401 (the module's browser fixture)

pytestmark = [pytest.mark.browser]

CASES = {
    "en": dict(document=("We enrolled 212 adults at three clinics. The average age of a study participant was 46 "
                         "years, and 58% were women. Participants were followed for two years."),
               question="What was the average age of a study participant?",
               answer="The document states that the average age of a study participant was 46 years.",
               phrase="46 years", said="In short:", ready="ready", done="first token"),
    "zh": dict(document="学院现有教职工1200人，截至2015年，该院具有高级职称的教师有836人，图书馆藏书81.6万册。",
               question="截至2015年，该院具有高级职称的教师有多少人？", answer="该院具有高级职称的教师有836人。",
               phrase="836人", said="简答：", ready="已就绪", done="首 token"),
}


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_shortest_phrase_is_shown_first_and_marked_in_its_source(browser, lang):  # noqa: F811
    from app import KvqaApp
    from conftest import served
    from kvqa.cache.budget import CacheBudget
    from kvqa.config import Config

    case = CASES[lang]
    kvqa_app = KvqaApp(Config(), FakeEngine(replies={case["question"]: case["answer"]}), budget=CacheBudget(2**30))
    with served(kvqa_app.demo, kvqa_app) as server, page_at(browser, server, lang, height=1000) as page:
        # the page in the browser's language (set once it loaded) before anything is read
        page.locator("#paste textarea").fill(case["document"])
        page.locator("#read").click()
        page.locator("#doc-status").get_by_text(case["ready"]).wait_for(timeout=60_000)
        page.locator("#question textarea").fill(case["question"])
        page.locator("#ask").click()
        bot = page.locator('[data-testid="bot"]').first
        bot.get_by_text(case["done"]).wait_for(timeout=60_000)  # the latency line: the answer is complete
        shown = bot.locator("p.kvqa-short")
        assert shown.inner_text().strip() == f"{case['said']}{' ' if lang == 'en' else ''}{case['phrase']}"
        marked = bot.locator("blockquote.evidence strong.kvqa-short")  # in the passage, where it says it
        assert marked.count() == 1 and marked.inner_text() == case["phrase"]
        assert bot.inner_text().index(case["phrase"]) < bot.inner_text().index(case["answer"][:8])  # first
