"""Gemma 3 270M, the offline model that reads Chinese, against an outside reference: the model as transformers loads it
alone (float32, its stock attention and its own sliding-window cache, nothing of kvqa's), answering with
`generate(do_sample=False)` on the completion layout written out here as text (the document read once by the stock
model, its stock cache copied for each call: tests/stock.py). kvqa's cached answers (the document read once in chunks,
each question's turn on top, drafting on, rolled back after) must be the same token ids, on a document longer than
four of its 512-position windows: three questions (one in Chinese) and a four-turn conversation."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import kvqa
from kvqa.generation.rerank import passage_order
from kvqa.model.offline import GEMMA3, model_dir
from kvqa.model.vocabulary import line_end_tokens, number_tokens
from kvqa.results import QuestionTurn
from kvqa.session.ask import ask
from ranked import candidates, quotes
from stock import StockGenerate

ROOT = Path(__file__).resolve().parent.parent
DOCUMENT = ((ROOT / "assets" / "declaration-of-independence.md").read_text() + "\n\n"
            + (ROOT / "tests" / "data" / "eval" / "qingshi-tea-coop-zh.md").read_text())
INSTRUCTIONS = "Answer each question below from the document above, briefly, in the language of the question."
NEW_TOKENS = 32
QUESTIONS = ["What rights are unalienable?", "Who is the history of repeated injuries about?", "合作社在哪里？"]
CONVERSATION = ["What do governments derive their powers from?", "What may the people do when a government becomes "
                "destructive of these ends?", "Who wrote the declaration?", "What did he refuse his assent to?"]


def asked(question: str) -> QuestionTurn:
    """The question as an engine gets it: with BM25's best five passages of DOCUMENT."""
    return QuestionTurn(question, passages=tuple(candidates(DOCUMENT, question, limit=5)))


def completion_text(document: str, turns: list[tuple[str, str]], question: str, passage: str) -> str:
    """The layout kvqa promises for a model without a chat template (docs/how-it-works.md), written out by hand."""
    zh = any("\u4e00" <= c <= "\u9fff" for c in question)
    passage_label, question_label, answer_label = ("段落：", "问题：", "回答：") if zh else (
        "Passage: ", "Question: ", "Answer:")
    text = f"{document.strip()}\n\n{INSTRUCTIONS}\n\n"
    text += "".join(f"Question: {q}\nAnswer: {a}\n\n" for q, a in turns)
    return text + f"{passage_label}{' '.join(passage.split())}\n{question_label}{question}\n{answer_label}"


@pytest.fixture(scope="module")
def stock(gemma_lm):
    from transformers import AutoModelForCausalLM

    folder = model_dir(GEMMA3, kvqa.Config().cache_dir)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32).eval()
    prefix = gemma_lm.tokenizer(f"{DOCUMENT.strip()}\n\n{INSTRUCTIONS}", return_tensors="pt")["input_ids"]
    return StockGenerate(model, prefix)  # the document read once by the stock model, its stock cache copied per call


@pytest.fixture(scope="module")
def engine_and_doc(gemma_lm):
    engine = kvqa.LocalEngine(kvqa.Config.of(model="gemma-3-270m", max_new_tokens=NEW_TOKENS, repeat_stop=0,
                                          quote_passages=1), lm=gemma_lm)
    assert engine.config.decoding.draft_tokens > 0  # drafted tokens are checked against the reference too
    doc = engine.prefill(kvqa.document_from_text(DOCUMENT))
    assert doc.tokens >= 4 * 512  # four sliding windows and more
    return engine, doc


def reference(stock, lm, text: str) -> tuple[int, ...]:
    """generate(do_sample=False) on the text's ids; a line end or EOS ends the answer and cannot come first."""
    ids = lm.tokenizer(text, return_tensors="pt")["input_ids"]  # with <bos>, as the model was trained
    ends = sorted(lm.eos_ids | line_end_tokens(lm.tokenizer))
    new = stock(ids, max_new_tokens=NEW_TOKENS, eos_token_id=ends, begin_suppress_tokens=ends, pad_token_id=0)
    return tuple(new[:next((i for i, t in enumerate(new) if t in ends), len(new))])


def best_passage(engine, question: str) -> str:
    return quotes(DOCUMENT, question, 1, passage_order(engine.lm, asked(question), 0),
                  chars=engine.config.decoding.quote_chars)[0]


@pytest.mark.parametrize("question", QUESTIONS)
def test_cached_answers_equal_transformers_generate(stock, engine_and_doc, question):
    engine, doc = engine_and_doc
    answer = ask(engine, doc, question).answer
    expected = reference(stock, engine.lm, completion_text(DOCUMENT, [], question, best_passage(engine, question)))
    assert len(expected) >= 3
    assert answer.token_ids == expected, (answer.text, engine.lm.tokenizer.decode(expected))
    assert answer.text.strip() and "\n" not in answer.text and answer.text == answer.text.lstrip()
    assert doc.cache.length == doc.tokens


def test_a_four_turn_conversation_equals_transformers_generate(stock, engine_and_doc):
    engine, doc = engine_and_doc
    history: list[tuple[str, str]] = []
    for question in CONVERSATION:
        answer = ask(engine, doc, question, history=history).answer
        text = completion_text(DOCUMENT, history, question, best_passage(engine, question))
        assert answer.token_ids == reference(stock, engine.lm, text), (question, answer.text)
        history.append((question, answer.text))
    assert len(history) == 4 and all(a for _, a in history) and doc.cache.length == doc.tokens


def test_a_document_past_the_window_is_read_with_it(engine_and_doc):
    """The cache holds every position in every layer (rollback stays free) and hands a sliding-window layer only its
    window: 511 earlier positions and the new token."""
    engine, doc = engine_and_doc
    kinds = {layer.window for layer in doc.cache.layers}
    assert kinds == {512, None}
    sliding = next(layer for layer in doc.cache.layers if layer.window)
    assert sliding.get_mask_sizes(1) == (512, doc.tokens - 511)
    assert all(layer.length == doc.tokens for layer in doc.cache.layers)


def test_the_vocabularys_number_tokens_are_every_token_that_decodes_to_digits(gemma_lm):
    """SentencePiece's spelling (the scan decodes 17.5k of the 262k tokens): the same set as decoding every token."""
    tok = gemma_lm.tokenizer
    every = {i for token, i in tok.get_vocab().items() if tok.convert_tokens_to_string([token]).strip().isdigit()}
    assert number_tokens(tok) == every and len(every) > 100
