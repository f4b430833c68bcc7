"""The shortest phrase that answers (kvqa.evidence.short): cut from the answer where its source says it, in both
languages; the question's own words and the frame ("The document states that") left out; figures kept whole with
their counters; nothing when the answer only says the question again; found and marked in the source, shown first in
the chat and the terminal, and given in the JSON."""

from __future__ import annotations

import pytest

from kvqa.evidence.short import mark_short, short_answer
from kvqa.evidence.sources import source_dict
from kvqa.export import answer_notes
from kvqa.results import Answer
from kvqa.timing import Timings
from ranked import find_sources

STUDY = ("We enrolled 212 adults at three clinics. The average age of a study participant was 46 years, and 58% were "
         "women. Participants were followed for two years.")
BRIDGE = ("The new stone bridge, known ever since as the Seven Arches Bridge, was completed in 1791. It was designed "
          "by the engineer Hester Pryce, one of the few women working as a bridge engineer then.")
COLLEGE = "学院现有教职工1200人，截至2015年，该院具有高级职称的教师有836人，图书馆藏书81.6万册。"


def short(text: str, answer: str, question: str) -> tuple[str, list]:
    found = find_sources(text, answer, question)
    phrase = short_answer(answer, question, found)
    return phrase, list(mark_short(found, phrase))


@pytest.mark.parametrize("text, answer, question, phrase", [
    (STUDY, "The document states that the average age of a study participant was 46 years.",
     "What was the average age of a study participant?", "46 years"),  # the frame and the question's words left out
    (BRIDGE, "The document says that the bridge was designed by the engineer Hester Pryce.",
     "Who designed the Seven Arches Bridge?", "engineer Hester Pryce"),
    (COLLEGE, "该院具有高级职称的教师有836人。", "截至2015年，该院具有高级职称的教师有多少人？", "836人"),  # 人 stays
    (COLLEGE, "学院有教职工1200人，图书馆藏书81.6万册。", "图书馆藏书量是多少？", "81.6万册"),  # the clause it asks
])
def test_the_phrase_is_the_answers_own_part_that_the_source_says(text, answer, question, phrase):
    said, sources = short(text, answer, question)
    assert said == phrase
    first = sources[0]
    assert first.short is not None and text[first.short[0]:first.short[1]] == phrase  # where the passage says it
    assert source_dict(first)["short_start"] == first.short[0] and source_dict(first)["short_end"] == first.short[1]
    assert first.bold == first.short


def test_a_figure_asked_for_picks_the_clause_with_one():
    text = "When the library opened she was already famous; she was 34. She had trained in Leeds."
    answer = "When the library opened she was already famous; she was 34."
    question = "How old was she when the library opened?"
    assert short_answer(answer, question, find_sources(text, answer, question)) == "34"  # not the clause it echoes
    assert short_answer(answer, "Was she well known by the time the library opened?",
                        find_sources(text, answer, question)) == "already famous"  # no figure asked: the echoed one


@pytest.mark.parametrize("text, answer, question, phrase", [
    ("The council opposes the new road as harmful to the marsh. It met twice.",
     "The council opposes the new road as harmful to the marsh.",
     "What does the council oppose as harmful to the marsh?", "new road"),  # "opposes" is the question's "oppose"
    ("Roughly 7 to 10 percent of the valley's farms grow rice there.", "7 to 10 percent of the farms grow rice.",
     "How many of the valley's farms grow rice?", "7 to 10 percent"),  # the figure and its unit, not the clause
    ("The old dam cost 3 million dollars over nine years.", "The dam cost 3 million dollars over nine years.",
     "How much did the dam cost?", "3 million dollars"),  # a multiplier is part of the figure
    ("The treaty was signed on June 4, 1802, in Lyon by both envoys.", "It was signed on June 4, 1802, in Lyon.",
     "When was the treaty signed?", "June 4, 1802"),  # the month's name with its day
    ("The mill was built in the mid-19th century within the old walls.",
     "The mill was built in the mid-19th century within the old walls.", "When was the mill built?",
     "mid-19th century"),
    ("Ice began to retreat about 12,000 years ago onward, slowly.", "It began about 12,000 years ago onward.",
     "When did the ice begin to retreat?", "12,000 years ago"),  # two words after the figure at most
    ("The government's agency checked the old ledgers in May.", "The government's agency checked the old ledgers.",
     "What did the governments agency check?", "old ledgers"),  # a possessive's "s" is no word of the answer's
    ("新站为地下两层岛式车站，于2009年启用。", "两层", "新站共有几层？", "两层"),  # the counter the question says
    ("该卫星由东方空间技术研究院制造，2003年发射。", "该卫星是由东方空间技术研究院制造的。", "该卫星是由谁制造的？",
     "东方空间技术研究院"),  # the question's verb after the answer's own, before 的, left out
    ("这座大桥最初在2003年方案中出现，2008年动工。", "这座大桥最初在2003年方案中出现。",
     "这座大桥的想法最初是在什么时候出现的？", "2003年"),  # the year, not the clause
    ("项目工程投资总额约为28亿元，由省里出资。", "项目工程投资总额约为28亿元。", "项目工程投资总额约为多少？",
     "28亿元"),
])
def test_the_phrase_drops_the_questions_words_and_keeps_a_figure_whole(text, answer, question, phrase):
    said, sources = short(text, answer, question)
    assert said == phrase
    assert sources[0].short is not None and text[slice(*sources[0].short)] == phrase


@pytest.mark.parametrize("text, answer, question", [
    (BRIDGE, "The Seven Arches Bridge was designed.", "Who designed the Seven Arches Bridge?"),  # only the question
    (BRIDGE, "It was designed by Josiah Farrar.", "Who designed the Seven Arches Bridge?"),  # not in the passage
    (COLLEGE, "该院具有高级职称的教师有多少人？", "该院具有高级职称的教师有多少人？"),  # the question said again
])
def test_no_phrase_when_the_answer_has_nothing_of_its_own_in_the_source(text, answer, question):
    said, sources = short(text, answer, question)
    assert said == "" and all(s.short is None for s in sources)
    assert all(s.bold == s.answer for s in sources)  # the answer's own words stay bold where they are found


def test_the_phrase_is_shown_first_and_marked_in_the_chat_and_the_terminal():
    from kvqa.ui.answers import short_line, sources_block

    answer = "The document states that the average age of a study participant was 46 years."
    phrase, sources = short(STUDY, answer, "What was the average age of a study participant?")
    block = sources_block(sources, "en")
    assert "<strong class='kvqa-answer kvqa-short'>46 years</strong>" in block
    assert short_line(phrase, "en") == "<p class='kvqa-short'>In short: <b>46 years</b></p>\n\n"
    assert "简答：<b>46 years</b>" in short_line(phrase, "zh") and short_line("", "en") == ""
    done = Answer(question="q", text=answer, token_ids=(1,), stop_reason="eos", used_cache=True,
                  timings=Timings(question_tokens=5, new_tokens=9, ttft_s=0.1, answer_s=0.2),
                  sources=tuple(sources), short=phrase)
    assert "   In short: 46 years" in answer_notes(done).splitlines()


def test_every_answer_through_ask_carries_its_phrase_and_the_sources_mark_it():
    from fakes import FakeEngine
    from kvqa.documents.reading import document_from_text
    from kvqa.session.ask import ask

    question = "What was the average age of a study participant?"
    engine = FakeEngine(replies={question: "The document states that the average age of a study participant was "
                                           "46 years."})
    prefilled = engine.prefill(document_from_text(STUDY, name="study.txt"))
    answer = ask(engine, prefilled, question).answer
    assert answer.short == "46 years"
    assert STUDY[slice(*answer.sources[0].short)] == "46 years"
