"""scripts/evaluate.py's metrics (the looping detector, the fact matcher) and the evaluation set's labels: every
question's facts are stated in its document, and a PDF question's fact on the page it names. No model is loaded."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pypdf
import pytest

from scripts import evaluate

ROOT = Path(__file__).parent.parent
EVAL = ROOT / "tests" / "data" / "eval"
QUESTIONS = evaluate.load_questions(EVAL / "questions.jsonl")


# --- looping ---

@pytest.mark.parametrize("ids", [
    [1, 2, 3, 4] * 3,  # the smallest loop: a 4-token span three times
    [9, 8] + [1, 2, 3, 4, 5] * 3 + [7],  # a 5-token span three times, inside other tokens
    [7] * 12,  # one token twelve times: "7 7 7 7" three times
    [1, 2] * 6,  # two tokens six times
    [5, 6, 7, 8, 9, 10, 11, 12, 13, 14] * 4,  # a long sentence, four times
])
def test_looping(ids):
    assert evaluate.is_looping(ids)


@pytest.mark.parametrize("ids", [
    [],
    list(range(40)),  # no repetition
    [1, 2, 3, 4] * 2 + [1, 2, 3],  # two copies and most of a third
    [7] * 11,  # one token eleven times: short of 12
    [1, 2, 3] * 5,  # a 3-token span five times: 15 tokens, but the period-3 spans of 4+ tokens (6) fit only twice
    [1, 2, 3, 4, 0, 1, 2, 3, 4, 0, 1, 2, 3, 9],  # three copies of 1 2 3 4, but not back to back
])
def test_not_looping(ids):
    assert not evaluate.is_looping(ids)


def test_looping_settings():
    assert evaluate.is_looping([1, 2, 3, 4] * 2, copies=2)
    assert not evaluate.is_looping([1, 2, 3, 4] * 3, min_span=5)


# --- facts ---

@pytest.mark.parametrize("text, fact", [
    ("It was founded in 1994.", "1994"),
    ("Founded by RUTH   CALLOWAY\nand Tomas Brandt", "Ruth Calloway"),  # case and whitespace
    ("The town had 11870 inhabitants.", "11,870"),  # thousands separator in the fact only
    ("The town had 11,870 inhabitants.", "11870"),  # ... in the answer only
    ("It cost 2,340 pounds.", "2,340"),
    ("Core hours end at 15:30.", "15:30"),
    ("The meeting was on 12 March.", "12"),  # digits may be followed by other characters
    ("合作社成立于2009年。", "2009"),  # Chinese around the digits
    ("开茶节在每年3月28日举行。", "3月28日"),
    ("创始人是林秀英。", "林秀英"),
    ("The power is 48 W.", "48 w"),
    ("Ｆｕｌｌｗｉｄｔｈ ２００９", "2009"),  # NFKC: full-width digits
])
def test_fact_found(text, fact):
    assert evaluate.fact_in(text, fact)


@pytest.mark.parametrize("text, fact", [
    ("It was founded in 1995.", "1994"),
    ("In 2012 it grew.", "12"),  # part of a longer number
    ("It costs 120 pounds.", "12"),
    ("It ends at 13:30.", "3:30"),
    ("The capacity is 14.5 litres.", "4.5"),
    ("It has 1,2,3 parts.", "123"),  # commas that are not thousands separators stay
    ("Anything", ""),
    ("合作社成立于2019年。", "2009"),
])
def test_fact_not_found(text, fact):
    assert not evaluate.fact_in(text, fact)


def test_has_fact_accepts_any_variant():
    assert evaluate.has_fact("twenty-seven days", ["27", "twenty-seven"])
    assert not evaluate.has_fact("28 days", ["27", "twenty-seven"])


def test_language():
    assert evaluate.language("合作社是哪一年成立的？") == "zh"
    assert evaluate.language("Who founded it?") == "en"


def test_summary_shares_and_times():
    rows = [{"doc": "a", "lang": "en", "correct": True, "looping": False, "looped_to_limit": False, "seconds": 1.0,
             "new_tokens": 10, "stop_reason": "eos", "source_correct": None},
            {"doc": "a", "lang": "en", "correct": False, "looping": True, "looped_to_limit": True, "seconds": 3.0,
             "new_tokens": 30, "stop_reason": "length", "source_correct": None},
            {"doc": "b", "lang": "zh", "correct": True, "looping": False, "looped_to_limit": False, "seconds": 8.0,
             "new_tokens": 20, "stop_reason": "eos", "source_correct": None}]
    public = [dict(gold_in_answer=True, f1=1.0, gold_in_source=True, answer_lang="en", ttft_s=0.2, unsupported=[]),
              dict(gold_in_answer=False, f1=0.0, gold_in_source=True, answer_lang="zh", ttft_s=0.4,
                   unsupported=["1802"]),
              dict(gold_in_answer=False, f1=0.5, gold_in_source=False, answer_lang="zh", ttft_s=0.3,
                   unsupported=["12"])]
    rows = [{**row, **extra} for row, extra in zip(rows, public)]
    result = evaluate.summary(rows)
    assert result["all"]["gold_in_answer"] == pytest.approx(1 / 3) and result["all"]["f1"] == pytest.approx(0.5)
    assert result["all"]["gold_in_source"] == pytest.approx(2 / 3) and result["all"]["median_ttft_s"] == 0.3
    assert result["all"]["answer_in_question_lang"] == pytest.approx(2 / 3)  # the English row answered in Chinese
    assert result["all"]["marked"] == 2 and result["all"]["marked_wrong"] == 2 and result["all"]["unmarked_right"] == 1
    assert result["all"]["correct"] == pytest.approx(2 / 3) and result["all"]["looping"] == pytest.approx(1 / 3)
    assert result["all"]["looped_to_limit"] == pytest.approx(1 / 3)
    assert result["all"]["median_s"] == 3.0 and result["all"]["mean_new_tokens"] == 20.0
    assert result["all"]["source_correct"] is None and result["all"]["stop_reasons"] == {"eos": 2, "length": 1}
    assert result["by_language"]["zh"]["questions"] == 1 and result["by_document"]["a"]["correct"] == 0.5


def fake_answer(sources):
    """An object shaped like kvqa's Answer, with `sources` when given."""
    answer = SimpleNamespace(text="It was founded in 1994.", token_ids=(1, 2, 3), stop_reason="eos",
                             timings=SimpleNamespace(answer_s=0.5, new_tokens=3, decode_tokens_per_s=4.0,
                                                     drafted_per_step=0.0, ttft_s=0.1, question_tokens=40))
    if sources is not None:
        answer.sources = sources
    return answer


@pytest.mark.parametrize("sources, expected", [
    (None, None),  # no `sources` attribute: reported as n/a
    ([], False),
    ([{"text": "founded in 1994 by", "page": 2}, {"text": "other", "page": 3}], True),  # dicts
    # only the first counts
    ([SimpleNamespace(text="in 1995", page=1), SimpleNamespace(text="in 1994", page=2)], False),
])
def test_answer_question_and_sources(monkeypatch, sources, expected):
    import kvqa

    monkeypatch.setattr(kvqa, "ask", lambda engine, doc, question, **options: SimpleNamespace(
        answer=fake_answer(sources)))  # the question's one way, faked: it calls the model
    reply = evaluate.answer_question(None, None, "When?", max_new_tokens=8)
    row = evaluate.score(evaluate.Question(doc="d.md", question="When?", facts=["1994"], page=None), reply)
    assert row["correct"] and not row["looping"] and row["new_tokens"] == 3 and row["seconds"] == 0.5
    assert row["question_tokens"] == 40
    assert row["source_correct"] is expected


# --- the evaluation set ---

def document_pages(name: str) -> list[str]:
    """The document's text, one string per PDF page (a text file is one page)."""
    path = EVAL / name
    if path.suffix == ".pdf":
        return [page.extract_text() or "" for page in pypdf.PdfReader(path).pages]
    return [path.read_text(encoding="utf-8")]


def test_the_set_has_enough_questions_documents_and_chinese():
    docs = {q.doc for q in QUESTIONS}
    assert len(QUESTIONS) >= 24 and 4 <= len(docs) <= 6
    assert sum(evaluate.language(q.question) == "zh" for q in QUESTIONS) >= 5
    assert any(d.endswith(".pdf") for d in docs) and len(document_pages("lumaro-cp40-manual.pdf")) >= 3


@pytest.mark.parametrize("q", QUESTIONS, ids=lambda q: f"{q.doc}:{q.question[:30]}")
def test_each_question_is_answered_in_its_document(q):
    pages = document_pages(q.doc)
    assert q.facts and all(isinstance(f, str) and f.strip() for f in q.facts)
    if q.page is None:
        assert len(pages) == 1, "a PDF question names its page"
        assert evaluate.has_fact(pages[0], q.facts)
    else:
        on_page = [f for f in q.facts if evaluate.fact_in(pages[q.page - 1], f)]
        assert on_page, f"no fact on page {q.page}"
        elsewhere = [n for n, text in enumerate(pages, start=1) if n != q.page and evaluate.has_fact(text, on_page)]
        assert not elsewhere, f"the fact is also on page(s) {elsewhere}"


# --- public sets ---

@pytest.mark.parametrize("text, golds, inside, f1, exact", [
    ("It was founded in 1994 by Ruth.", ["1994"], True, 0.25, False),  # precision 1/7, recall 1
    ("The Answer: the Seven Arches!", ["seven arches"], True, 0.8, False),  # case, punctuation, articles do not count
    ("The Seven Arches.", ["seven arches", "arches"], True, 1.0, True),
    ("It was founded in 1995.", ["1994"], False, 0.0, False),
    ("合作社成立于2009年。", ["2009年"], True, 0.625, False),  # by character: precision 5/11, recall 1
    ("2009 年。", ["2009年"], True, 1.0, True),  # Chinese without spaces and CJK punctuation
    ("", ["1994"], False, 0.0, False),
])
def test_gold_f1_and_exact_match_as_squad_scores_them(text, golds, inside, f1, exact):
    assert evaluate.gold_in(text, golds) is inside
    assert evaluate.token_f1(text, golds) == pytest.approx(f1)
    assert evaluate.exact_match(text, golds) is exact


def test_public_sets_make_documents_of_the_asked_size_with_questions_spread(tmp_path):
    import json
    articles = [{"title": f"T{i}", "paragraphs": [
        {"context": f"Paragraph {i}.{j} says the value is {i * 10 + j}. " * 8,
         "qas": [{"question": f"What is value {i}.{j}?", "id": f"{i}-{j}",
                  "answers": [{"text": str(i * 10 + j), "answer_start": 0}]}]} for j in range(4)]} for i in range(6)]
    path = tmp_path / "set.json"
    path.write_text(json.dumps({"data": articles}))
    texts, questions = evaluate.load_squad(path, lang="en", min_chars=2000, max_chars=4000, per_doc=3)
    assert texts and all(2000 <= len(t) <= 4000 for t in texts.values())
    for name, text in texts.items():
        asked = [q for q in questions if q.doc == name]
        assert len(asked) == 3 and all(q.facts[0] in text for q in asked)
        starts = [q.start for q in asked]
        assert starts == sorted(starts) and starts[-1] > len(text) / 2  # spread to the end, not bunched at the start
        assert text.startswith("## T")  # short articles are joined under their titles
