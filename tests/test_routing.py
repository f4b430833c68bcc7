"""Documents longer than the model reads are cut into parts, and each question is answered from the part that holds
its best-matching passages (the fake engine reads at most `context_tokens` words; no model is loaded)."""

from __future__ import annotations

import json
import re

import gradio as gr
import pytest

import app as app_module
from fakes import FakeEngine
from kvqa.cache.budget import CacheBudget
from kvqa.config import Config
from kvqa.documents.parts import part_of, plan
from kvqa.documents.reading import Document, document_from_text
from kvqa.errors import QuestionError
from kvqa.evidence.evidence import Evidence
from kvqa.evidence.routing import also_matching
from kvqa.export import session_dict, to_markdown
from kvqa.messages import render
from kvqa.session.session import Ask, Session
from kvqa.ui.answers import chat_messages
from kvqa.ui.latency import latency_summary
from kvqa.ui.panels import also_button

TOPICS = ["lighthouse keeper pelican", "ferry timetable harbour", "orchard apples pears", "railway viaduct granite",
          "museum tapestry weavers", "glacier meltwater valley", "bakery sourdough ovens",
          "observatory telescope comet"]


def paragraph(n: int) -> str:
    return f"Section {n} is about the {TOPICS[n]}. " + " ".join(f"filler{n}w{i}" for i in range(40))


TEXT = "\n\n".join(paragraph(n) for n in range(len(TOPICS)))  # 8 paragraphs of about 48 words


def loaded(context_tokens: int = 120, text: str = TEXT) -> tuple[FakeEngine, Session]:
    engine = FakeEngine(context_tokens=context_tokens)
    session = Session(engine)
    session.load(document_from_text(text, name="long.txt"))
    return engine, session


def test_a_long_document_is_cut_into_overlapping_parts_that_each_fit():
    engine, session = loaded()
    parts = session.parts
    assert len(parts) > 2 and parts[0][0] == 1 and parts[-1][1] == len(TEXT)
    assert (parts[0][0], parts[0][1]) == (session.document.part.first, session.document.part.last)  # read first
    for (a1, b1, t1), (a2, b2, t2) in zip(parts, parts[1:]):
        assert a1 < a2 <= b1 < b2  # consecutive, each starting inside the one before: one paragraph shared
        assert TEXT[a2 - 1: b1].count("Section") == 1  # exactly that paragraph
    assert all(tokens <= engine.context_tokens for _, _, tokens in parts)
    assert "cut into" in str(session.notice) and "read now: characters 1-" in str(session.notice)


def test_each_question_is_answered_from_the_part_that_holds_it():
    engine, session = loaded()
    for n in [6, 1, 7, 3]:
        session.ask(f"What is said about the {TOPICS[n].split()[1]}?").answer  # noqa: B018 - runs the answer
        turn = session.turns[-1]
        assert turn.part is not None and f"Section {n} is about" in session.document.text
        assert (turn.part.first, turn.part.last) == (session.document.part.first, session.document.part.last)
        assert engine.read[-1].text == session.document.text  # the part read is the one the answer came from
    assert "Answering from part" in str(session.notice)
    reads = len(engine.read)
    session.ask(f"And the {TOPICS[3].split()[2]}?").answer  # noqa: B018 - the part read already holds it
    assert len(engine.read) == reads


def test_a_pinned_part_and_a_document_that_fits_are_never_routed():
    engine, session = loaded()
    session.load(session.whole, part=part_of(session.whole, 1, 200))
    session.ask(f"What about the {TOPICS[7].split()[1]}?").answer  # noqa: B018
    assert session.document.part.last == 200 and session.turns[-1].part is not None
    engine, session = loaded(context_tokens=10_000)
    assert len(session.parts) == 1 and session.notice is None
    session.ask("What about the comet?").answer  # noqa: B018
    assert session.turns[-1].part is None and len(engine.read) == 1


def test_pages_are_routed_in_chinese_too():
    pages = ["第一页讲的是灯塔和鹈鹕。" + "填充" * 40, "第二页讲的是渡轮时刻表。" + "填充" * 40,
             "第三页讲的是果园里的苹果和梨。" + "填充" * 40, "第四页讲的是火车高架桥。" + "填充" * 40]
    text, starts = "", []
    for n, page in enumerate(pages, start=1):
        starts.append(len(text))
        text += f"[Page {n}]\n{page}\n\n"
    source = Document(name="长文.pdf", text=text, pages=len(pages), page_starts=tuple(starts))
    engine = FakeEngine(context_tokens=15)  # 4 pages of 2 "tokens" and 10 of prompt do not fit; 2 pages a part do
    engine.count_tokens = lambda t: 2 * t.count("[Page")
    session = Session(engine)
    session.load(source)
    assert session.parts == [(1, 2, 14), (2, 3, 14), (3, 4, 14)]
    session.ask("果园里有什么水果？").answer  # noqa: B018
    part = session.turns[-1].part
    assert "苹果" in session.document.text and (part.unit, part.first, part.last) == ("pages", 2, 3)
    session.ask("火车高架桥在哪里？").answer  # noqa: B018
    assert session.document.part.last == 4 and "第 3-4 页" in render(session.notice, "zh")


def test_plan_and_route_on_their_own():
    spans = [(1, 1), (2, 2), (3, 3), (4, 4), (5, 5)]
    assert plan(spans, [5, 5, 5, 5, 5], 10) == [(1, 2, 10), (2, 3, 10), (3, 4, 10), (4, 5, 10)]
    assert plan(spans, [20, 5, 5, 5, 5], 10) == [(1, 1, 20), (2, 3, 10), (3, 4, 10), (4, 5, 10)]  # one alone
    assert plan(spans, [5] * 5, 100) == [(1, 5, 25)]
    assert plan(spans, [5] * 5, 100, first_take=2)[0] == (1, 2, 10)
    document = document_from_text(TEXT)
    parts = [(1, 400, 0), (300, len(TEXT), 0)]
    assert Evidence.of(document, "Which comet did the telescope see?", parts).route().target == 1
    assert Evidence.of(document, "Tell me about the lighthouse keeper.", parts).route().target == 0
    assert Evidence.of(document, "nothing matches zzz", parts).route(current=1).target == 1


@pytest.mark.parametrize("lang", ["en", "zh"])
def test_the_app_says_which_part_an_answer_came_from(lang):
    kvqa_app = app_module.KvqaApp(Config(), FakeEngine(context_tokens=120), budget=CacheBudget(2**30))
    session, _ = kvqa_app.service.read(document_from_text(TEXT, name="long.txt"), None, None, lambda *a, **k: None)
    session.ask("What about the comet and the telescope?").answer  # noqa: B018
    last = chat_messages(session, lang)[-1]["content"]
    part = session.turns[-1].part
    assert (f"From characters {part.first:,}-{part.last:,}" if lang == "en" else f"出自第 {part.first:,}-") in last


def test_the_latency_panel_lists_each_part_read_once():
    kvqa_app = app_module.KvqaApp(Config(), FakeEngine(context_tokens=120), budget=CacheBudget(2**30))
    session, _ = kvqa_app.service.read(document_from_text(TEXT, name="long.txt"), None, None, lambda *a, **k: None)
    first = session.document.part
    assert f"Parts read, of {len(session.parts)}: characters 1-{first.last:,} of {len(TEXT):,} (read now:" in (
        latency_summary(session))
    for question in ["What about the comet and the telescope?", "And the lighthouse keeper?",
                     "The comet again?"]:
        session.ask(question).answer  # noqa: B018
    summary = latency_summary(session)
    listed = summary.split("Parts read")[1]
    assert listed.count("characters 1-") == 1 and listed.count("(read now:") + listed.count("(still in memory:") == 2
    assert session.origin in ("prefill", "kept")  # read again, or its cache was still alive
    assert "shared with another session" not in summary  # no other session is involved
    assert "已读取的部分" in latency_summary(session, "zh")


def test_before_reading_a_long_document_says_how_many_parts_it_makes():
    config = Config.of(max_question_tokens=10, max_new_tokens=10)
    kvqa_app = app_module.KvqaApp(config, FakeEngine(context_tokens=400), budget=CacheBudget(2**30))
    said = []
    kvqa_app.service.read(document_from_text(TEXT, name="long.txt"), None, None,
                          lambda fraction, desc=None: said.append(desc))
    planned = int(re.search(r"it makes about (\d+) parts for this model, the first read now", said[-1]).group(1))
    assert planned >= 2  # an estimate before reading: the prompt's own tokens are guessed, not counted
    session = kvqa_app.service.read(document_from_text(TEXT, name="long.txt"), None, None, lambda *a, **k: None)[0]
    short = document_from_text("A short note about the ferry.")
    kvqa_app.service.read(short, session, None, lambda fraction, desc=None: said.append(desc))
    assert "parts" not in said[-1]


def test_many_near_duplicates_do_not_outvote_the_best_passage():
    """Sections that repeat one sentence with one word changed: the section the question names wins, though four
    others match it almost as well in the first part."""
    text = "\n\n".join(f"## Section {n}\n\nThe harbour master of section {n} is called Captain{n}x. "
                       + " ".join(f"Filler{n}w{i} goes on." for i in range(300)) for n in range(1, 9))
    document = document_from_text(text)
    half = text.index("## Section 6")
    parts = [(1, half, 0), (half - 20, len(text), 0)]
    assert Evidence.of(document, "Who is the harbour master of section 8?", parts).route().target == 1
    assert Evidence.of(document, "Who is the harbour master of section 2?", parts).route().target == 0


def test_another_part_that_matches_as_well_is_named():
    # (points, share of the passage in each of three parts)
    assert also_matching([(10.0, [1, 0, 0]), (6.0, [0, 1, 0])], 0) == 1 and also_matching([(6.0, [1, 0, 0]),
                                                                                  (10.0, [0, 1, 0])], 1) == 0
    assert also_matching([(10.0, [1, 0, 0]), (4.0, [0, 0, 1])], 0) is None  # too weak
    assert also_matching([(10.0, [1, 1, 0])], 0) is None  # the same passage, in the paragraph two parts share
    assert also_matching([], 0) is None
    engine, session = loaded()
    session.ask("Where are the pelican and the comet?").answer  # noqa: B018 - one word in the first, one in the last
    said, chosen = session.notice, session.part_index
    assert said.key == "notice.routed_also" and session.also_index is not None and session.also_index != chosen
    first, last, _ = session.parts[session.also_index]
    other = TEXT[first - 1: last]
    assert ("comet" in other) != ("comet" in session.document.text)  # the word the chosen part lacks
    assert f"Part {session.also_index + 1} (characters {first:,}-{last:,}" in render(said, "en")
    assert f"第 {session.also_index + 1} 部分" in render(said, "zh")
    session.ask(Ask("Where are the pelican and the comet?", part=session.turns[-1].also)).answer  # noqa: B018 - ask it there
    assert (session.turns[-1].part.first, session.turns[-1].part.last) == (first, last)
    assert engine.read[-1].text == other and session.notice.key == "notice.routed_asked" and session.also_index is None
    session.ask("What is said about the sourdough?").answer  # noqa: B018 - routed again; one part alone holds it
    assert session.notice.key == "notice.routed" and session.also_index is None
    assert "sourdough" in session.document.text


def test_asking_from_a_part_that_does_not_exist_changes_nothing():
    _, session = loaded()
    before = (session.document, len(session.turns))
    with pytest.raises(QuestionError, match=f"1-2 is not one of this document's parts \\({session.parts.listed()}\\)"):
        session.ask(Ask("Where is the comet?", part=part_of(session.whole, 1, 2)))  # refused before it streams
    assert (session.document, len(session.turns)) == before


def test_the_app_offers_to_ask_again_from_the_other_part(monkeypatch):
    kvqa_app = app_module.KvqaApp(Config(), FakeEngine(context_tokens=120), budget=CacheBudget(2**30))
    session, _ = kvqa_app.service.read(document_from_text(TEXT, name="long.txt"), None, None, lambda *a, **k: None)
    assert also_button(session)["visible"] is False  # nothing asked yet
    shown = list(kvqa_app.questions.on_ask(Ask("Where are the pelican and the comet?"), session))[-1]
    button = shown[kvqa_app.page.also_btn]
    first, last, _ = session.parts[session.also_index]
    assert button["visible"] and button["value"] == f"Ask again from part {session.also_index + 1} (characters " \
        f"{first:,}-{last:,} of {len(TEXT):,})"
    assert "从第" in also_button(session, "zh")["value"]
    shown = list(kvqa_app.questions.on_ask_also(session, False))[-1]
    assert session.turns[-1].question == session.turns[-2].question and session.turns[-1].part.first == first
    assert shown[kvqa_app.page.also_btn]["visible"] is False  # asked there: nothing more to offer
    warned = []
    monkeypatch.setattr(app_module.gr, "Warning", warned.append)
    assert list(kvqa_app.questions.on_ask_also(session, False)) == [gr.skip()] and "No other part matched" in warned[0]
    list(kvqa_app.questions.on_ask(Ask("Where are the pelican and the comet?"), session))
    assert session.also_index is not None
    # a new conversation
    assert kvqa_app.questions.on_new_conversation(session)[kvqa_app.page.also_btn]["visible"] is False
    assert session.also_index is None and session.turns  # the turns are kept; the offer was the last conversation's


def test_the_cli_names_another_part_that_matches_as_well(tmp_path, capsys, monkeypatch):
    import kvqa.engines
    from kvqa.cli import main

    monkeypatch.setattr(kvqa.engines, "make_engine", lambda *a, **k: FakeEngine(context_tokens=120))
    path = tmp_path / "long.txt"
    path.write_text(TEXT)
    questions = ["-q", "Where are the pelican and the comet?", "-q", "What is said about the sourdough?",
                 "-q", "Where is the lighthouse keeper?"]  # routed after a switch of parts, too
    assert main(["ask", str(path), "--no-store", *questions]) == 0
    lines = [line for line in capsys.readouterr().err.splitlines() if "matches this question too" in line]
    assert len(lines) == 1 and re.search(r"ask again with --chars \d+-\d+\.$", lines[0]), lines
    assert main(["ask", str(path), "--no-store", "--json", *questions]) == 0
    both, one, _ = json.loads(capsys.readouterr().out)["answers"]
    first, last = (int(n) for n in re.search(r"--chars (\d+)-(\d+)", lines[0]).groups())
    assert both["also"] == {"unit": "characters", "first": first, "last": last} and one["also"] is None
    assert both["part"] != both["also"]


def test_the_conversation_keeps_the_other_part_that_matched():
    _, session = loaded()
    session.ask("Where are the pelican and the comet?").answer  # noqa: B018
    session.ask("What is said about the sourdough?").answer  # noqa: B018
    both, one = session_dict(session)["answers"]
    also = session.turns[0].also
    assert also is not None and both["also"] == {"unit": "characters", "first": also.first, "last": also.last}
    assert one["also"] is None
    assert f"characters {also.first:,}-{also.last:,} matched the question too" in to_markdown(session_dict(session))


def test_the_api_prefill_line_lists_the_parts():
    kvqa_app = app_module.KvqaApp(Config(), FakeEngine(context_tokens=120), budget=CacheBudget(2**30))
    shown = kvqa_app.api.api_prefill(text=TEXT)
    session = shown[kvqa_app.page.state]
    listed = ", ".join(f"{a}-{b}" for a, b, _ in session.parts)
    assert len(session.parts) > 2 and shown[kvqa_app.api.api_status].endswith(f"Parts (characters): {listed}.")
    assert "Parts" not in kvqa_app.api.api_prefill(text="A short note.", session=session)[kvqa_app.api.api_status]


def test_the_api_asks_in_a_part_it_names():
    kvqa_app = app_module.KvqaApp(Config(), FakeEngine(context_tokens=120), budget=CacheBudget(2**30))
    session = kvqa_app.api.api_prefill(text=TEXT)[kvqa_app.page.state]
    last = session.parts[-1]
    list(kvqa_app.api.api_ask("Where is the pelican?", part=f"{last[0]}-{last[1]}", session=session))
    assert (session.turns[-1].part.first, session.turns[-1].part.last) == last[:2]  # there, though it matches part 1
    list(kvqa_app.api.api_ask("Where is the pelican?", session=session))
    assert session.turns[-1].part.first == 1  # routed as before
    with pytest.raises(app_module.gr.Error, match=r"1-5 is not one of this document's parts \(1-"):
        list(kvqa_app.api.api_ask("Where is the pelican?", part="1-5", session=session))
    with pytest.raises(app_module.gr.Error, match="like 14-27"):
        list(kvqa_app.api.api_ask("Where is the pelican?", part="the last one", session=session))
    assert len(session.turns) == 2  # the refused questions changed nothing
