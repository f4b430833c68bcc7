"""Drafting from the document. Greedy answers with drafting are the tokens plain decoding gives (float32,
the default model and the tiny one); guesses the model rejects leave no trace in the cache; Stop still ends within
one step."""

from __future__ import annotations

import pytest
import torch

import kvqa
from kvqa.generation.decode import Drafter, penalise

DOC = ("Pellacott Instruments was founded in 1994 by Ruth Calloway and Tomas Brandt in the town of Wrenford. "
       "Full-time employees receive twenty-seven days of annual leave. The IT helpdesk is on extension 4417. "
       "The parental leave policy gives twenty weeks of paid leave to every new parent. ") * 3
QUESTIONS = ["Who founded Pellacott Instruments?", "How many days of annual leave do full-time employees get?",
             "What is the IT helpdesk extension?", "Summarise the document."]


def test_the_drafter_proposes_what_followed_the_longest_latest_match():
    d = Drafter([1, 2, 3, 4, 5, 9, 2, 3, 7, 8], min_ngram=1)
    d.add(2)
    d.add(3)
    assert d.propose(3) == [7, 8, 2]  # "2 3" last continued with 7 8 (and then the 2 just added)
    assert Drafter([5, 6], min_ngram=1).propose(2) == []
    assert Drafter([]).propose(4) == []
    strict = Drafter([1, 2, 3, 4, 5, 9, 2, 3])  # by default at least 3 tokens must match
    assert strict.propose(2) == []
    strict.add(4)
    assert strict.propose(2) == [5, 9]


@pytest.fixture(params=["tiny", "smollm2"])
def lm(request, tiny_lm, default_lm):
    return tiny_lm if request.param == "tiny" else default_lm


def test_drafted_answers_are_the_plain_answers(lm):
    doc = kvqa.prefill(lm, kvqa.document_from_text(DOC), config=kvqa.Config.of(max_new_tokens=40))
    before = [(k.clone(), v.clone()) for k, v in doc.cache.tensors()]
    steps = drafted = 0
    for question in QUESTIONS:
        plain = kvqa.answer(lm, doc, question)
        fast = kvqa.answer(lm, doc, question, draft_tokens=6)
        assert fast.token_ids == plain.token_ids and fast.stop_reason == plain.stop_reason, question
        assert plain.timings.drafted_tokens == 0 and fast.timings.decode_steps <= plain.timings.decode_steps
        steps, drafted = steps + fast.timings.decode_steps, drafted + fast.timings.drafted_tokens
        assert doc.cache.length == doc.tokens
    for (k, v), (k0, v0) in zip(doc.cache.tensors(), before):  # rejected guesses left no trace
        assert (k == k0).all() and (v == v0).all()
    if lm.name != "tiny-llama":  # the real model copies from the document: guesses are kept
        assert drafted > 0 and steps > 0


def test_guesses_half_right_keep_the_right_ones_and_leave_no_trace_of_the_rest(tiny_lm, monkeypatch):
    """Every step's guesses are the plain answer's next two tokens, then wrong ones: the answer is still the plain one
    (it fails when rejected guesses are kept, in the answer or in the cache), and both kinds of guess happened."""
    import kvqa.generation.decode as decode

    doc = kvqa.prefill(tiny_lm, kvqa.document_from_text(DOC), config=kvqa.Config.of(max_new_tokens=24))
    plain = kvqa.answer(tiny_lm, doc, QUESTIONS[0]).token_ids
    real_init = decode.Drafter.__init__

    def init(self, context, **options):
        real_init(self, context, **options)
        self.start = len(self.seq)  # where the answer begins

    def propose(self, k):
        said = len(self.seq) - self.start
        right = list(plain[said: said + 2])
        wrong = [(plain[said + 2] + 1) % tiny_lm.config.vocab_size] if said + 2 < len(plain) else [0]
        return (right + wrong * k)[:k]

    monkeypatch.setattr(decode.Drafter, "__init__", init)
    monkeypatch.setattr(decode.Drafter, "propose", propose)
    fast = kvqa.answer(tiny_lm, doc, QUESTIONS[0], draft_tokens=4)
    assert fast.token_ids == plain and doc.cache.length == doc.tokens
    assert fast.timings.drafted_tokens > 0 and fast.timings.rejected_tokens > 0
    assert fast.timings.decode_steps < len(plain) - 1  # two tokens a step where the guesses held


def test_the_repetition_penalty_lowers_what_was_said_and_drafting_keeps_to_it(default_lm):
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0]])
    assert penalise(logits, [0, 1, 0], 2.0).tolist() == [[1.0, -2.0, 0.5, 3.0]]  # said: 0 and 1; others unchanged
    assert penalise(logits, [0], 1.0) is logits and penalise(logits, [], 2.0) is logits
    doc = kvqa.prefill(default_lm, kvqa.document_from_text(DOC), config=kvqa.Config.of(max_new_tokens=40))
    changed = 0
    for question in QUESTIONS:
        plain = kvqa.answer(default_lm, doc, question)
        penalised = kvqa.answer(default_lm, doc, question, repetition_penalty=1.3)
        drafted = kvqa.answer(default_lm, doc, question, repetition_penalty=1.3, draft_tokens=6)
        assert drafted.token_ids == penalised.token_ids, question  # guesses are judged with the penalty too
        changed += penalised.token_ids != plain.token_ids
        assert doc.cache.length == doc.tokens
    assert changed > 0  # the penalty changes answers (this document repeats itself three times)


def test_sampling_does_not_draft(tiny_lm):
    doc = kvqa.prefill(tiny_lm, kvqa.document_from_text(DOC), config=kvqa.Config.of(max_new_tokens=16))
    a = kvqa.answer(tiny_lm, doc, "Anything?", temperature=1.0, seed=3, draft_tokens=6)
    b = kvqa.answer(tiny_lm, doc, "Anything?", temperature=1.0, seed=3)
    assert a.token_ids == b.token_ids and a.timings.drafted_tokens == 0


def test_stop_ends_a_drafted_answer_within_a_step(default_lm):
    doc = kvqa.prefill(default_lm, kvqa.document_from_text(DOC), config=kvqa.Config.of(max_new_tokens=64))
    stop = []
    pieces = kvqa.stream(default_lm, doc, "Repeat the first sentence of the document.", draft_tokens=6,
                         should_stop=lambda: bool(stop))
    first = next(pieces)
    taken = len(default_lm.tokenizer(first, add_special_tokens=False)["input_ids"])
    stop.append(True)
    answer = pieces.answer
    assert answer.stop_reason == "stopped" and len(answer.token_ids) <= taken + 7
    assert doc.cache.length == doc.tokens and not doc.lock.locked()


def test_a_guess_the_model_rejects_is_counted_and_leaves_no_trace(lm, monkeypatch):
    """A drafter that proposes the model's own next tokens and then a wrong one: the wrong guess is rejected (and
    counted), the answer is plain decoding's, and the cache is bit for bit what it was."""
    doc = kvqa.prefill(lm, kvqa.document_from_text(DOC), config=kvqa.Config.of(max_new_tokens=24))
    before = [(k.clone(), v.clone()) for k, v in doc.cache.tensors()]
    question = "Who founded Pellacott Instruments?"
    plain = kvqa.answer(lm, doc, question).token_ids
    assert len(plain) >= 8
    wrong = next(t for t in range(100, 200) if t not in plain)

    def propose(self, k):  # the next two tokens plain decoding chose, then a token it never chose
        done = len(self.seq) - self.context_length
        return (list(plain[done: done + 2]) + [wrong])[:k]

    monkeypatch.setattr(Drafter, "propose", propose)
    original = Drafter.__init__

    def init(self, context, **kwargs):
        original(self, context, **kwargs)
        self.context_length = len(context)

    monkeypatch.setattr(Drafter, "__init__", init)
    fast = kvqa.answer(lm, doc, question, draft_tokens=6)
    assert fast.token_ids == plain
    assert fast.timings.rejected_tokens >= 1 and fast.timings.drafted_tokens >= 2
    for (k, v), (k0, v0) in zip(doc.cache.tensors(), before):
        assert torch.equal(k, k0) and torch.equal(v, v0)
    assert doc.cache.length == doc.tokens
