"""Public reading-comprehension sets in SQuAD's JSON layout (SQuAD, XQuAD, CMRC 2018, DRCD, COVID-QA) and SQuAD's
answer metrics, for the measurements outside the app: scripts/evaluate.py (documents of a few thousand characters and
their questions: load_squad; the answers scored: gold_in, exact_match, token_f1), scripts/routing.py (long documents
with each gold answer's true position: long_documents), scripts/sentence_repeats.py and the experiments in
experiments/ that read the same sets the same way. No model and none of kvqa's other modules: text in, text out.
"""

from __future__ import annotations

import json
import string
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kvqa.languages import CJK


@dataclass(frozen=True)
class Question:
    """One question with its gold: its document's name, the question, the accepted answers (facts) and the PDF page
    (the labelled set's, tests/data/eval; None in a public set)."""

    doc: str
    question: str
    facts: list[str]
    page: int | None
    start: int | None = None  # where the first gold answer starts in its document (public sets)


def squad_normalise(text: str) -> str:
    """SQuAD's answer normalisation (lower case, no punctuation, no a/an/the, single spaces); for CJK text, also no
    spaces and CJK punctuation removed, as CMRC 2018's evaluation does."""
    text = unicodedata.normalize("NFKC", text).lower()
    text = "".join(" " if c in string.punctuation or unicodedata.category(c).startswith("P") else c for c in text)
    text = " ".join(w for w in text.split() if w not in ("a", "an", "the"))
    return text.replace(" ", "") if language(text) == "zh" else text


def gold_in(text: str, golds: Sequence[str]) -> bool:
    """True when a normalised gold answer occurs in the normalised text (the answer "contains the gold")."""
    answer = squad_normalise(text)
    return any(g and g in answer for g in map(squad_normalise, golds))


def exact_match(text: str, golds: Sequence[str]) -> bool:
    """SQuAD's exact match: the normalised answer equals a normalised gold answer."""
    answer = squad_normalise(text)
    return any(answer == squad_normalise(g) for g in golds)


def _f1_units(text: str) -> list[str]:
    """Words for English, characters for CJK (CMRC 2018 scores Chinese by character)."""
    normal = squad_normalise(text)
    return list(normal) if language(text) == "zh" else normal.split()


def token_f1(text: str, golds: Sequence[str]) -> float:
    """SQuAD's token F1 against the best-matching gold answer."""
    best = 0.0
    predicted = _f1_units(text)
    for gold in golds:
        truth = _f1_units(gold)
        common = sum((Counter(predicted) & Counter(truth)).values())
        if common:
            precision, recall = common / len(predicted), common / len(truth)
            best = max(best, 2 * precision * recall / (precision + recall))
    return best


def language(text: str) -> str:
    """"zh" when the text has a CJK ideograph, else "en"."""
    return "zh" if CJK.search(text) else "en"


def load_squad(path: Path, *, lang: str, min_chars: int, max_chars: int, per_doc: int,
               max_gold_words: int | None = None) -> tuple[dict[str, str], list[Question]]:
    """Documents and questions from a file in SQuAD's layout: each article whose paragraphs together have min..max
    characters is a document; shorter articles are joined, each under its title, until the next would pass max.
    Per document, up to per_doc questions, spread evenly over where their answers lie. max_gold_words: keep only
    questions whose first gold answer has at most this many words (CJK: characters / 2)."""
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    texts: dict[str, str] = {}
    questions: list[Question] = []
    group: list[dict] = []

    def words(text: str) -> float:
        return len(text) / 2 if language(text) == "zh" else len(text.split())

    def emit(articles: list[dict]) -> None:
        name = f"{path.stem}-{len(texts) + 1:03d}"
        parts, asked = [], []
        offset = 0
        for article in articles:
            head = f"## {article.get('title', '')}\n\n" if len(articles) > 1 else ""
            offset += len(head)
            for para in article["paragraphs"]:
                context = para["context"].strip("\n")
                for qa in para["qas"]:
                    golds = [a["text"] for a in qa.get("answers", []) if a["text"].strip()]
                    if not golds or qa.get("is_impossible") or not qa["question"].strip():
                        continue
                    if max_gold_words is not None and words(golds[0]) > max_gold_words:
                        continue
                    at = context.find(golds[0])
                    asked.append(Question(doc=name, question=qa["question"].strip(), facts=golds, page=None,
                                          start=offset + max(at, 0)))
                parts.append(head + context)
                offset += len(context) + 2
                head = ""
        text = "\n\n".join(parts)
        texts[name] = text
        asked.sort(key=lambda q: q.start)
        if len(asked) > per_doc:  # evenly spread: the i-th of per_doc quantiles
            picks = dict.fromkeys(round(i * (len(asked) - 1) / max(per_doc - 1, 1)) for i in range(per_doc))
            asked = [asked[i] for i in picks]
        questions.extend(asked)

    def size(articles: list[dict]) -> int:
        return sum(len(p["context"]) + 2 for a in articles for p in a["paragraphs"]) + 16 * len(articles)

    for article in data:
        if min_chars <= size([article]) <= max_chars:
            emit([article])
        elif size([article]) < min_chars:
            if group and size(group + [article]) > max_chars:
                if size(group) >= min_chars:
                    emit(group)
                group = []
            group.append(article)
            if size(group) >= min_chars:
                emit(group)
                group = []
    for q in questions:
        assert language(q.question) == lang or lang == "any", f"{q.question!r} is not {lang}"
    return texts, questions


def gold_offset(context: str, gold: str, labelled: int) -> int:
    """Where the gold answer lies: its occurrence nearest the labelled start (sets' starts are often off by a
    character or two; the first occurrence may be another mention of the same words), or -1."""
    found, at = [], context.find(gold)
    while at >= 0:
        found.append(at)
        at = context.find(gold, at + 1)
    return min(found, key=lambda a: abs(a - labelled), default=-1)


def long_documents(path: Path, count, min_tokens: int, max_docs: int, *,
                   single: bool = False) -> list[tuple[str, list[tuple[str, int, str]]]]:
    """(text, [(question, gold offset, gold), ...]) for documents of consecutive articles of at least min_tokens;
    single: each article alone, the ones of at least min_tokens (one long paper, not several)."""
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    docs, parts, asked, offset, tokens = [], [], [], 0, 0
    for article in data:
        head = f"## {article.get('title', '')}\n\n"
        offset += len(head)
        body = []
        for para in article["paragraphs"]:
            context = para["context"].strip("\n")
            lead = len(para["context"]) - len(para["context"].lstrip("\n"))
            for qa in para["qas"]:
                answers = [a for a in qa.get("answers", []) if a["text"].strip()]
                if answers and qa["question"].strip():
                    at = gold_offset(context, answers[0]["text"], answers[0].get("answer_start", 0) - lead)
                    if at >= 0:
                        asked.append((qa["question"].strip(), offset + at, answers[0]["text"]))
            body.append(context)
            offset += len(context) + 2
        text = head + "\n\n".join(body)
        parts.append(text)
        tokens += count(text)
        offset = sum(len(p) + 2 for p in parts)
        if tokens >= min_tokens:
            docs.append(("\n\n".join(parts), asked))
            if len(docs) == max_docs:
                break
        if tokens >= min_tokens or single:
            parts, asked, offset, tokens = [], [], 0, 0
    return docs
