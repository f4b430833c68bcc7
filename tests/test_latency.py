"""What the latency panel says: the first-token speedup is estimated from what reading the document took when its
cache was made, not from what restoring the cache took (the fake engine stands in for the model)."""

from __future__ import annotations

from dataclasses import replace

import app as app_module
from fakes import FakeEngine
from kvqa.cache.budget import CacheBudget
from kvqa.config import Config
from kvqa.documents.reading import document_from_text
from kvqa.session.session import Session
from kvqa.timing import ReadCost
from kvqa.ui.latency import latency_summary, latency_table, speedup

DOC = document_from_text("A short document about ferries, bridges and the harbour's opening hours.")


class RestoringEngine(FakeEngine):
    """Gives back a cache "restored from disk" in 0.05 s that took `read_s` to read when it was made."""

    def __init__(self, read_s: float | None):
        super().__init__()
        self.read_s = read_s

    def prefill(self, document, **kwargs):
        doc = super().prefill(document, **kwargs)
        return replace(doc, origin="disk", prefill_s=0.05, read_s=self.read_s)


def asked(engine: FakeEngine) -> Session:
    session = Session(engine)
    session.load(DOC)
    session.ask("When does the ferry leave?").answer  # noqa: B018 - runs the answer
    return session


def test_the_first_read_time_is_the_prefill_or_the_stored_one():
    read_now = FakeEngine().prefill(DOC)
    assert read_now.origin == "prefill" and read_now.first_read_s == read_now.prefill_s
    assert RestoringEngine(12.5).prefill(DOC).first_read_s == 12.5
    assert RestoringEngine(None).prefill(DOC).first_read_s is None  # a file that did not record it


def test_a_restored_cache_estimates_from_its_first_read_not_its_restore():
    session = asked(RestoringEngine(read_s=20.0))
    turn = session.turns[0]
    ttft = turn.timings.ttft_s
    factor, measured = speedup(turn, session.prefilled.first_read_s)
    assert not measured and abs(factor - (20.0 + ttft) / ttft) < 1e-9
    restore_based = (0.05 + ttft) / ttft
    summary = latency_summary(session)
    assert f"{factor:.1f}x" in summary and f"{restore_based:.1f}x" not in summary
    assert "restored from disk: 0.05 s" in summary  # the restore's own time, said separately
    assert latency_table(session)["data"][0][-1] == f"{factor:.1f}x (estimated)"


def test_an_unknown_first_read_is_not_estimated():
    session = asked(RestoringEngine(read_s=None))
    assert speedup(session.turns[0], None) == (0.0, False)
    assert "not estimated" in latency_summary(session)
    assert "不用缓存" in latency_summary(session, "zh")
    assert latency_table(session)["data"][0][-1] == ""


def test_reading_says_the_size_first_then_an_estimate_from_the_last_read():
    kvqa_app = app_module.KvqaApp(Config(), FakeEngine(), budget=CacheBudget(2**30))
    said: list[str] = []

    def progress(fraction, desc=None):
        said.append(desc)

    first = document_from_text("word " * 600)  # the fake engine counts words: 600 tokens
    session, _ = kvqa_app.service.read(first, None, None, progress)
    assert "3,000 characters, 600 tokens" in said[-1] and "about" not in said[-1]
    assert "estimated" not in kvqa_app.status.status_markdown(session)  # nothing was estimated before the first read
    cost = kvqa_app.service.read_costs["fake"]  # one progress point: the rate of the whole read
    assert cost.per_token > 0 and cost.per_pair == 0

    second = document_from_text("other " * 1200)
    session, _ = kvqa_app.service.read(second, session, None, progress)
    assert f"1,200 tokens: about {cost.seconds(1200):.1f} s (from this model's last read here)" in said[-1]
    assert f"(estimated {cost.seconds(1200):.1f} s before reading)" in kvqa_app.status.status_markdown(session)
    assert f"(estimated {cost.seconds(1200):.1f} s before reading)" in latency_summary(
        session, estimate=kvqa_app.service.notes(session).estimate)
    assert f"读取前估计 {cost.seconds(1200):.1f} 秒" in kvqa_app.status.status_markdown(session, "zh")


def test_a_short_read_does_not_set_the_rate():
    kvqa_app = app_module.KvqaApp(Config(), FakeEngine(), budget=CacheBudget(2**30))
    kvqa_app.service.read(document_from_text("a few words only"), None, None, lambda *a, **k: None)
    assert kvqa_app.service.read_costs == {}


def test_a_read_cost_fits_how_reads_slow_down_with_length():
    """Reads whose seconds grow as 1e-3 n + 1e-7 n^2 (attention to what was read before): fitted from one read's
    progress, it predicts a read four times as long within 1%, where the first read's rate would be 30% short."""
    truth = ReadCost(1e-3, 1e-7)
    ticks = [(n, truth.seconds(n)) for n in range(512, 2049, 512)]  # a 2,048-token read in 512-token chunks
    cost = ReadCost.fit(ticks)
    assert abs(cost.seconds(8192) - truth.seconds(8192)) < 0.01 * truth.seconds(8192)
    rate_only = ReadCost.fit(ticks[-1:])
    assert rate_only.seconds(8192) < 0.7 * truth.seconds(8192)
    assert ReadCost.fit([]) is None and ReadCost.fit([(0, 1.0)]) is None
    noisy = ReadCost.fit([(512, 1.0), (1024, 1.1), (1536, 1.2)])  # a fit with a negative term: the last rate
    assert noisy == ReadCost(1.2 / 1536)
