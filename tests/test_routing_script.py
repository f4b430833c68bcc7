"""scripts/routing.py's long documents (kvqa.bench.squad.long_documents), built from a file in SQuAD's layout with
each gold answer's true position."""

from __future__ import annotations

import json

from kvqa.bench import squad


def test_long_documents_keep_each_gold_answer_at_its_offset(tmp_path):
    articles = [{"title": f"Article {n}", "paragraphs": [
        {"context": f"Paragraph {n}.{p}: the answer here is gold{n}{p}.", "qas": [
            {"question": f"What is in {n}.{p}?", "answers": [{"text": f"gold{n}{p}", "answer_start": 0}]},
            {"question": "Unanswerable?", "answers": []}]} for p in range(3)]} for n in range(7)]
    path = tmp_path / "set.json"
    path.write_text(json.dumps({"data": articles}))
    docs = squad.long_documents(path, lambda text: len(text.split()), min_tokens=60, max_docs=2)
    assert len(docs) == 2
    for text, asked in docs:
        assert len(text.split()) >= 60 and asked and all(q != "Unanswerable?" for q, _, _ in asked)
        assert all(text[at: at + len(gold)] == gold for _, at, gold in asked)
        assert text.startswith("## Article")


def test_the_gold_answer_is_the_mention_nearest_its_labelled_start():
    context = "In 2019 the trial began. It ended in 2019 after 40 weeks, with 2019 patients."
    labelled = context.index("2019 after") - 1  # sets' starts are often a character off
    assert squad.gold_offset(context, "2019", labelled) == context.index("2019 after")
    assert squad.gold_offset(context, "2019", 0) == context.index("2019")
    assert squad.gold_offset(context, "absent", 5) == -1


def test_single_articles_are_documents_of_their_own(tmp_path):
    long = " ".join(f"word{i}" for i in range(80))
    articles = [{"title": title, "paragraphs": [{"context": context + " gold.", "qas": [
        {"question": "Where is gold?", "answers": [{"text": "gold", "answer_start": len(context) + 1}]}]}]}
        for title, context in (("Short", "a few words"), ("Long", long), ("Short again", "few"))]
    path = tmp_path / "set.json"
    path.write_text(json.dumps({"data": articles}))
    docs = squad.long_documents(path, lambda text: len(text.split()), min_tokens=60, max_docs=5, single=True)
    assert len(docs) == 1
    text, asked = docs[0]
    assert text.startswith("## Long") and "Short" not in text
    assert [text[at: at + 4] for _, at, _ in asked] == ["gold"]
