"""The model reorders BM25's best passages for a question (kvqa.generation.rerank): the quote and the first source
follow its
order, a batch scores each passage as it would alone, the time it takes counts in the first token, and the cached
answer still equals a recompute."""

from __future__ import annotations

import time

import pytest
import torch

import kvqa
import kvqa.generation.rerank as rerank
from kvqa.documents.reading import document_from_text
from kvqa.results import QuestionTurn
from kvqa.session.ask import ask, ask_without_cache
from ranked import candidates, find_sources, quotes

HISTORY = ("The town of Wrenford lies on the River Ashe. It was first recorded in a charter in 1214.\n\n"
           "## The bridge\n\nThe new stone bridge, known ever since as the Seven Arches Bridge, was completed in 1791. "
           "It was designed by the engineer Hester Pryce, one of the few women working as a bridge engineer then.\n\n"
           "## The market\n\nThe market by the bridge has been held on Thursdays since 1302. Cheese and wool were sold "
           "there; today it sells mostly vegetables.")
QUESTION = "When was the bridge completed?"


def asked(question: str) -> QuestionTurn:
    """The question as an engine gets it: with BM25's best five passages of HISTORY."""
    return QuestionTurn(question, passages=tuple(candidates(HISTORY, question, limit=5)))


def test_the_quote_and_the_first_source_follow_the_given_order():
    found = candidates(HISTORY, QUESTION, limit=5)
    assert len(found) >= 2 and "1791" in found[0][1]  # BM25 alone: the bridge passage first
    order = [found[1][0], found[0][0]]  # a reranker that prefers the second
    assert quotes(HISTORY, QUESTION, 1, order) == [found[1][1]]
    assert quotes(HISTORY, QUESTION, 1) == [found[0][1]]
    assert find_sources(HISTORY, "", QUESTION, order=order)[0].text == found[1][1]
    assert find_sources(HISTORY, "", QUESTION)[0].text == found[0][1]


def test_the_model_and_bm25_are_added(monkeypatch):
    monkeypatch.setattr(rerank, "question_likelihood", lambda lm, passages, question: [-2.0, -1.9, -1.0])
    assert rerank.rerank(None, ["a", "b", "c"], [10.0, 5.0, 1.0], "q") == [2, 0, 1]  # -1.0+0.05 > -2+0.5 > -1.9+0.25
    monkeypatch.setattr(rerank, "question_likelihood", lambda lm, passages, question: [-1.0, -1.0])
    assert rerank.rerank(None, ["a", "b"], [1.0, 1.0], "q") == [0, 1]  # a tie keeps BM25's order


def test_off_or_nothing_to_reorder_gives_no_order(monkeypatch):
    monkeypatch.setattr(rerank, "question_likelihood", lambda *a: pytest.fail("the model must not be asked"))
    assert rerank.passage_order(None, asked(QUESTION), 0) is None
    assert rerank.passage_order(None, asked("zebra quantum?"), 5) is None  # no passage matches


def test_a_batch_scores_each_passage_as_it_would_alone(default_lm):
    texts = [t for _, t, _ in candidates(HISTORY, QUESTION, limit=5)]
    together = rerank.question_likelihood(default_lm, texts, QUESTION)
    alone = [rerank.question_likelihood(default_lm, [t], QUESTION)[0] for t in texts]
    assert together == pytest.approx(alone, abs=1e-4)  # the padding after shorter rows changes nothing
    head, tail = rerank._frame(QUESTION)  # and each is the mean log-probability of the question's tokens
    row = default_lm.tokenizer(head + texts[0] + tail, add_special_tokens=False).input_ids
    asked = default_lm.tokenizer(QUESTION, add_special_tokens=False).input_ids
    with torch.no_grad():
        logits = default_lm.model(input_ids=torch.tensor([row + asked])).logits[0, len(row) - 1: -1]
    expected = torch.log_softmax(logits.float(), -1)[torch.arange(len(asked)), asked].mean().item()
    assert together[0] == pytest.approx(expected, abs=1e-4)
    assert len(set(round(s, 3) for s in together)) == len(texts)  # and the passages are told apart
    zh = rerank.question_likelihood(default_lm, ["桥建于1791年。", "集市在星期四。"], "桥是哪一年建成的？")
    assert len(zh) == 2 and all(s < 0 for s in zh)


def test_the_ranking_counts_in_the_first_token_and_answers_equal_a_recompute(tiny_lm, monkeypatch):
    real = rerank.question_likelihood

    def slow(lm, passages, question):
        time.sleep(0.3)
        return real(lm, passages, question)

    monkeypatch.setattr(rerank, "question_likelihood", slow)
    document = document_from_text(HISTORY)
    engine = kvqa.LocalEngine(kvqa.Config.of(max_new_tokens=8, quote_passages=1, rerank_passages=5), lm=tiny_lm)
    doc = engine.prefill(document)
    cached = ask(engine, doc, QUESTION).answer
    assert cached.timings.ttft_s >= 0.3  # the reranking happened before the first token and is counted
    whole = ask_without_cache(engine, document, QUESTION, prompt=doc.prompt).answer
    assert whole.token_ids == cached.token_ids  # both paths quote the same reranked passage
    order = rerank.passage_order(tiny_lm, asked(QUESTION), 5)
    assert sorted(order) == sorted(i for i, _, _ in candidates(HISTORY, QUESTION, limit=5))
    turn = engine.options
    assert turn.rerank_passages == 5 and turn.quote_passages == 1


def test_running_out_of_memory_while_reranking_is_the_users_message(tiny_lm, monkeypatch):
    def out_of_memory(lm, passages, question):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")

    monkeypatch.setattr(rerank, "question_likelihood", out_of_memory)
    engine = kvqa.LocalEngine(kvqa.Config.of(max_new_tokens=4, rerank_passages=5), lm=tiny_lm)
    doc = engine.prefill(document_from_text(HISTORY))
    for asking in (lambda: ask(engine, doc, QUESTION), lambda: ask_without_cache(engine, doc.document, QUESTION)):
        stream = asking()  # nothing runs until the stream is read
        with pytest.raises(kvqa.KvqaError) as refused:
            stream.answer
        assert "memory" in str(refused.value) and "Tried to allocate" not in str(refused.value)
    monkeypatch.undo()  # memory is back: the same document answers, its cache as it was
    assert doc.cache.length == doc.tokens and ask(engine, doc, QUESTION).answer.timings.new_tokens > 0
