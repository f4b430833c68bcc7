"""A better model reading behind a faster one (kvqa.session.takeover): on a CPU, a document whose read by the best
installed model would keep the reader waiting is read first by a faster model that answers at once, each answer
labelled with it; the best model reads behind, in its own session, and takes over once read (the chat carried over,
the page saying so, the timer then stopped); a failed read behind leaves the faster model answering. On a GPU, or for
a short read, the best model reads at once. Fake engines at the seam; the rule's models marked installed."""

from __future__ import annotations

import threading
import time
from types import SimpleNamespace

import pytest

import app
import kvqa
from fakes import FakeEngine
from kvqa.errors import ModelError
from kvqa.messages import Message
from kvqa.model import offline
from kvqa.session.takeover import STAND_IN_S, stand_in_for

BEST, FAST = offline.QWEN_15B.name, offline.QWEN_05B.name
# about 2,000 estimated tokens: 25 s for the 1.5B at its measured 80 tokens/s, 8 s for the 0.5B at 250
LONG = ("The Harwick ferry was built in 1887 by the Orlan shipyard and carried 340 passengers a day between the two "
        "banks of the Tessel until the bridge opened in 1961. ") * 55
SHORT = "The Harwick ferry was built in 1887 by the Orlan shipyard. " * 5


@pytest.fixture
def offered(monkeypatch, tmp_path):
    """An app on the default model offering both Qwen models (fake engines, marked installed); the best one's read
    held at its first chunk until the test lets it go (`release`), or failing (`fail`)."""
    monkeypatch.delenv("KVQA_OFFLINE_MODELS", raising=False)
    monkeypatch.setattr(offline, "installed", lambda model, cache_dir: True)
    release, reached, fail = threading.Event(), threading.Event(), []

    def held(document, chunk):
        reached.set()
        assert release.wait(10), "the test never let the read behind go"
        if fail:
            raise ModelError("model.copy_incomplete", missing="lm_head.rows")  # a damaged copy, say

    config = kvqa.Config.of(cache_dir=tmp_path, device="cpu", model_reason=Message("reason.default"))
    default = FakeEngine(model="SmolLM2-135M-Instruct")
    fast = FakeEngine(32768, model=FAST, replies={"Who built the ferry?": "Orlan built it"})
    best = FakeEngine(32768, model=BEST, chunks=4, on_chunk=held, replies={"Who built the ferry?": "the Orlan yard"})
    ui = app.KvqaApp(config, default, models=[BEST, FAST])
    ui.service._engines.update({BEST: best, FAST: fast})
    return SimpleNamespace(ui=ui, default=default, fast=fast, best=best, release=release, reached=reached, fail=fail)


def ask(ui, question: str, session):
    """A question through the page's two handlers (taken, then answered); the last outputs."""
    tab = SimpleNamespace(session_hash="tab-1", headers={}, client=None)  # the browser tab of both handlers
    ui.questions.on_question(question, session, request=tab)
    outputs = None
    for outputs in ui.questions.on_answer(session, request=tab):
        pass
    return outputs


def test_a_faster_model_answers_while_the_best_one_reads_behind_and_then_it_takes_over(offered):
    ui, page = offered.ui, offered.ui.page
    shown = ui.reads.on_paste(LONG, None)
    stand_in = shown[page.state]
    take = ui.service.notes(stand_in).take_over
    try:
        assert stand_in.engine is offered.fast and offered.fast.prefills == 1
        assert take is not None and take.model == BEST and take.stand_in == FAST and take.estimate > STAND_IN_S
        assert offered.reached.wait(10)  # the best model is reading behind
        assert f"**{BEST}** answers best and is reading the document in the background" in shown[page.status]
        assert shown[page.ahead_timer].active
        assert "answers meanwhile" in ui.status.status_markdown(stand_in, "en")
        assert "在此期间由" in ui.status.status_markdown(stand_in, "zh")
        outputs = ask(ui, "Who built the ferry?", stand_in)  # while it reads: the stand-in answers at once
        assert outputs[page.state] is stand_in and [q.text for q in offered.fast.asked] == ["Who built the ferry?"]
        assert f"answered by {FAST} while {BEST} reads the document" in outputs[page.chat][-1]["content"]
        ticked = ui.status.on_tick(stand_in)  # still reading: nothing changes, the timer goes on
        assert ticked[page.state] is stand_in and ticked[page.ahead_timer].active
        offered.release.set()
        assert take.done.wait(10) and take.ready
        ticked = ui.status.on_tick(stand_in)  # read: it takes over, the page says so, the timer stops
        session = ticked[page.state]
        assert session is take.session and session.engine is offered.best and stand_in.closed
        assert f"**{BEST}** has read the document and answers from now on" in ticked[page.status]
        assert not ticked[page.ahead_timer].active
        assert [t.question for t in session.turns] == ["Who built the ferry?"]  # the chat carried over, labelled
        assert ui.status.on_tick(stand_in)[page.state] is session  # every caller is told the same session
        outputs = ask(ui, "Who built the ferry?", session)
        assert [q.text for q in offered.best.asked] == ["Who built the ferry?"]
        chat = outputs[page.chat]
        assert f"answered by {FAST} while {BEST}" in chat[1]["content"] and "the Orlan yard" in chat[3]["content"]
        assert "answered by" not in chat[3]["content"]  # the model now answering needs no label
    finally:
        offered.release.set()
        take.done.wait(10)
        for s in (stand_in, take.session):
            if s is not None:
                s.close()


def test_a_question_asked_before_the_read_behind_ends_goes_to_the_best_model_once_it_has(offered):
    ui = offered.ui
    stand_in = ui.reads.on_paste(LONG, None)[ui.page.state]
    take = ui.service.notes(stand_in).take_over
    offered.release.set()
    assert take.done.wait(10)
    outputs = ask(ui, "Who built the ferry?", stand_in)  # no tick came first: the question itself switches
    try:
        assert outputs[ui.page.state] is take.session and offered.fast.asked == []
        assert [q.text for q in offered.best.asked] == ["Who built the ferry?"]
    finally:
        take.session.close()


def test_a_failed_read_behind_leaves_the_faster_model_answering_and_says_why(offered):
    ui, page = offered.ui, offered.ui.page
    offered.fail.append(True)
    stand_in = ui.reads.on_paste(LONG, None)[page.state]
    take = ui.service.notes(stand_in).take_over
    offered.release.set()
    try:
        assert take.done.wait(10) and take.error is not None and not take.ready
        ticked = ui.status.on_tick(stand_in)
        assert ticked[page.state] is stand_in and not stand_in.closed and not ticked[page.ahead_timer].active
        assert f"{BEST} could not read the document" in ticked[page.status]
        outputs = ask(ui, "Who built the ferry?", stand_in)
        assert outputs[page.state] is stand_in and "Orlan built it" in outputs[page.chat][-1]["content"]
    finally:
        stand_in.close()


def test_a_short_read_goes_to_the_best_model_at_once(offered):
    offered.release.set()
    session = offered.ui.reads.on_paste(SHORT, None)[offered.ui.page.state]
    try:
        assert session.engine is offered.best and offered.fast.prefills == 0
        assert offered.ui.service.notes(session).take_over is None and session.behind is None
    finally:
        session.close()


def test_a_stand_in_only_on_a_cpu_and_only_when_one_reads_the_languages_much_faster(offered, tmp_path):
    offered_models = [BEST, FAST, "SmolLM2-135M-Instruct"]

    def rate(model, tokens):
        return tokens / model.cpu_rate

    assert stand_in_for(BEST, LONG, cache_dir=tmp_path, offered=offered_models, seconds=rate) == FAST
    assert stand_in_for(BEST, LONG, cache_dir=tmp_path, offered=offered_models, seconds=rate, cuda=True) is None
    assert stand_in_for(BEST, SHORT, cache_dir=tmp_path, offered=offered_models, seconds=rate) is None
    assert stand_in_for(BEST, LONG, cache_dir=tmp_path, offered=[BEST], seconds=rate) is None  # none offered
    chinese = "青石茶叶合作社成立于二〇〇八年，位于青石镇老粮站。" * 200  # SmolLM2 reads no Chinese
    assert stand_in_for(BEST, chinese, cache_dir=tmp_path, offered=[BEST, "SmolLM2-135M-Instruct"],
                        seconds=rate) is None
    mixed = LONG + "青石茶叶合作社成立于二〇〇八年，位于青石镇老粮站。" * 120  # English holding Chinese passages
    assert stand_in_for(BEST, mixed, cache_dir=tmp_path, offered=[BEST, "SmolLM2-135M-Instruct"], seconds=rate) == (
        "SmolLM2-135M-Instruct")  # read from the English page: an English model may stand in
    assert stand_in_for(BEST, mixed, cache_dir=tmp_path, offered=[BEST, "SmolLM2-135M-Instruct"], seconds=rate,
                        page_lang="zh") is None  # from the Chinese page its reader asks in Chinese: not SmolLM2
    # measured here: a model whose read came out as fast as the best one's stands in for nobody
    assert stand_in_for(BEST, LONG, cache_dir=tmp_path, offered=offered_models,
                        seconds=lambda model, tokens: tokens / 50) is None


def test_the_read_behind_waits_between_its_chunks_while_the_stand_in_answers(offered):
    ui = offered.ui
    stand_in = ui.reads.on_paste(LONG, None)[ui.page.state]
    take = ui.service.notes(stand_in).take_over
    try:
        assert offered.reached.wait(10)
        stand_in.answering = True  # a question on the stand-in: two reads on two cores would slow both
        offered.release.set()
        time.sleep(0.5)
        assert take.fraction == 0.25 and not take.done.is_set()  # its first chunk read, then it waits
        stand_in.answering = False
        assert take.done.wait(10) and take.ready and take.fraction == 1.0
    finally:
        stand_in.answering = False
        offered.release.set()
        take.done.wait(10)
        for s in (stand_in, take.session):
            if s is not None:
                s.close()
