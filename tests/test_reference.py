"""Exactness against an outside reference: the default model loaded by transformers alone, in float32 with its stock
attention (nothing of kvqa's `prepare`: no custom attention, no written-out step, no KVCache), answering with
`generate(do_sample=False)` on the chat template's own ids (the system turn, the document, read once by the stock model
and its stock cache copied for each call: tests/stock.py). kvqa's cached answers must be the same token ids: the
document read once, each question answered from that cache (with the passage kvqa quotes in the question's turn),
and a follow-up three turns deep."""

from __future__ import annotations

import pytest
import torch

import kvqa
from kvqa.generation.rerank import passage_order
from kvqa.model.loading import default_model_dir
from kvqa.prompt import question_turn, system_text
from kvqa.results import QuestionTurn
from kvqa.session.ask import ask
from ranked import candidates, quotes
from stock import StockGenerate

NEW_TOKENS = 32
DOCUMENT = "\n\n".join([
    "# The Lumaro CP-40 coffee press: owner's notes",
    "The CP-40 was first sold in 2019 by Lumaro, a small company in Porto. Its glass jug holds 1.2 litres, enough "
    "for eight cups, and its steel frame is guaranteed for 24 months from the date of purchase.",
    "## Brewing",
    "Use 60 grams of coarse ground coffee per litre of water. Pour water at 93 degrees, stir once, and wait four "
    "minutes before pressing the plunger down slowly. A finer grind clogs the mesh filter and makes pressing hard.",
    "## Cleaning",
    "Take the plunger apart after each use: the mesh filter, the spiral plate and the cross plate unscrew from the "
    "rod. Wash them in warm soapy water. The jug is dishwasher safe; the frame is not. Descale the jug once a month "
    "with one part white vinegar to two parts water.",
    "## Spare parts",
    "Replacement mesh filters come in packs of three (part number CP-F3). A replacement jug is part CP-J12. Order "
    "spare parts from the Lumaro shop in Porto or by post; delivery in Portugal takes two to four working days.",
    "## Safety",
    "Never use the press on a stove. Do not press with force: if the plunger will not go down, lift it a little and "
    "press again slowly. Keep hot coffee away from children.",
] + [f"Note {i}: the press was tested with {i * 5 + 20} brews in a row without wear on the seal." for i in range(40)])
QUESTIONS = ["How much does the jug hold?", "How long should the coffee steep?", "What is the part number of the jug?"]
FOLLOW_UPS = ["How do I clean the filter?", "Is the frame dishwasher safe?", "And how often should I descale?"]


def asked(question: str) -> QuestionTurn:
    """The question as an engine gets it: with BM25's best five passages of DOCUMENT."""
    return QuestionTurn(question, passages=tuple(candidates(DOCUMENT, question, limit=5)))


@pytest.fixture(scope="module")
def stock():
    """The default model as transformers loads it, with nothing of kvqa's applied: float32, stock SDPA attention."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    folder = default_model_dir(kvqa.Config().cache_dir)
    model = AutoModelForCausalLM.from_pretrained(folder, dtype=torch.float32, attn_implementation="sdpa").eval()
    assert model.config._attn_implementation == "sdpa"
    tokenizer = AutoTokenizer.from_pretrained(folder)
    system = tokenizer.apply_chat_template([{"role": "system", "content": system_text(DOCUMENT)}], tokenize=False)
    prefix = tokenizer(system, add_special_tokens=False, return_tensors="pt")["input_ids"]
    return StockGenerate(model, prefix), tokenizer  # the system turn (the document) read once by the stock model


def reference(stock, messages: list[dict]) -> tuple[int, ...]:
    """generate(do_sample=False) on the chat template's ids, cut at the first end-of-turn token."""
    generate, tokenizer = stock
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = tokenizer(text, add_special_tokens=False, return_tensors="pt")["input_ids"]
    new = generate(ids, max_new_tokens=NEW_TOKENS)
    ends = {tokenizer.convert_tokens_to_ids(t) for t in ("<|im_end|>", tokenizer.eos_token)}
    return tuple(new[:next((i for i, t in enumerate(new) if t in ends), len(new))])


def kvqa_quotes(engine, question: str) -> list[str]:
    """What kvqa's engine quotes for the question: the passage it ranks first (its model reorders BM25's best), cut
    as its settings say (quote_chars)."""
    order = passage_order(engine.lm, asked(question), engine.config.decoding.rerank_passages)
    return quotes(DOCUMENT, question, 1, order, chars=engine.config.decoding.quote_chars)


@pytest.fixture(scope="module")
def engine_and_doc(default_lm):
    config = kvqa.Config.of(max_new_tokens=NEW_TOKENS, repeat_stop=0, quote_passages=1)
    engine = kvqa.LocalEngine(config, lm=default_lm)
    document = kvqa.document_from_text(DOCUMENT)
    doc = engine.prefill(document)
    assert 1000 <= doc.tokens <= 2000
    return engine, doc


@pytest.mark.parametrize("question", QUESTIONS)
def test_cached_answers_equal_transformers_generate_with_stock_attention(stock, engine_and_doc, question):
    engine, doc = engine_and_doc
    answer = ask(engine, doc, question).answer
    turn = question_turn(question, kvqa_quotes(engine, question))
    expected = reference(stock, [{"role": "system", "content": system_text(DOCUMENT)},
                                 {"role": "user", "content": turn}])
    assert len(expected) >= 4
    assert answer.token_ids == expected, (answer.text, stock[1].decode(expected))
    assert doc.cache.length == doc.tokens


def test_a_three_turn_follow_up_equals_transformers_generate(stock, engine_and_doc):
    engine, doc = engine_and_doc
    history: list[tuple[str, str]] = []
    messages = [{"role": "system", "content": system_text(DOCUMENT)}]
    for question in FOLLOW_UPS:
        answer = ask(engine, doc, question, history=history).answer
        turn = question_turn(question, kvqa_quotes(engine, question))
        assert answer.token_ids == reference(stock, [*messages, {"role": "user", "content": turn}]), question
        messages += [{"role": "user", "content": question}, {"role": "assistant", "content": answer.text}]
        history.append((question, answer.text))
    assert len(history) == 3 and doc.cache.length == doc.tokens


def room(stock, messages: list[dict]) -> int:
    """The tokens after the system turn in the chat template's rendering of `messages` (the question's room holds
    them), counted with the stock tokenizer on the template's own text, cut after the system turn's end token."""
    tokenizer = stock[1]
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    cut = text.index("<|im_end|>") + len("<|im_end|>")
    return len(tokenizer(text[cut:], add_special_tokens=False)["input_ids"])


def test_a_six_turn_follow_up_drops_the_oldest_turns_and_equals_transformers_generate(stock, default_lm):
    """Six follow-ups in a question room of 160 tokens: each answer is generate's on the template's ids of the turns
    kvqa kept, and those are the most recent turns that fit (one more would not). Guards the mutations: history
    dropped from the prompt (fails at the second question), a turn too many kept or one too few."""
    limit = 160
    config = kvqa.Config.of(max_new_tokens=NEW_TOKENS, max_question_tokens=limit, repeat_stop=0, quote_passages=0)
    session = kvqa.Session(kvqa.LocalEngine(config, lm=default_lm))
    session.load(kvqa.document_from_text(DOCUMENT))
    system = {"role": "system", "content": system_text(DOCUMENT)}
    questions = [*FOLLOW_UPS, "What temperature should the water be?", "Where can I order spare parts?",
                 "How long does delivery take in Portugal?"]
    for question in questions:
        answer = session.ask(kvqa.Ask(question, remember=True)).answer
        kept = session.turns[-1].follows
        earlier = [(t.question, t.answer) for t in session.turns[:-1]]

        def conversation(k: int) -> list[dict]:
            turns = earlier[len(earlier) - k:] if k else []
            return [system, *({"role": role, "content": text} for pair in turns
                              for role, text in zip(("user", "assistant"), pair)),
                    {"role": "user", "content": question}]

        assert answer.token_ids == reference(stock, conversation(kept)), (question, kept)
        assert room(stock, conversation(kept)) <= limit
        if kept < len(earlier):
            assert room(stock, conversation(kept + 1)) > limit, (question, kept)
    follows = [t.follows for t in session.turns]
    assert max(follows) >= 2 and follows[-1] < len(questions) - 1, follows  # turns were kept, and some dropped
