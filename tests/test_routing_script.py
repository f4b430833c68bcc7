"""scripts/routing.py builds long documents from a file in SQuAD's layout with each gold answer's true position."""

from __future__ import annotations

import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "scripts"))

import routing  # noqa: E402


def test_long_documents_keep_each_gold_answer_at_its_offset(tmp_path):
    articles = [{"title": f"Article {n}", "paragraphs": [
        {"context": f"Paragraph {n}.{p}: the answer here is gold{n}{p}.", "qas": [
            {"question": f"What is in {n}.{p}?", "answers": [{"text": f"gold{n}{p}", "answer_start": 0}]},
            {"question": "Unanswerable?", "answers": []}]} for p in range(3)]} for n in range(7)]
    path = tmp_path / "set.json"
    path.write_text(json.dumps({"data": articles}))
    docs = routing.long_documents(path, lambda text: len(text.split()), min_tokens=60, max_docs=2)
    assert len(docs) == 2
    for text, asked in docs:
        assert len(text.split()) >= 60 and asked and all(q != "Unanswerable?" for q, _, _ in asked)
        assert all(text[at: at + len(gold)] == gold for _, at, gold in asked)
        assert text.startswith("## Article")
