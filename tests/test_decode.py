"""The decode loop's bookkeeping on the tiny random Llama: why an answer ended (length, EOS, a line end, Stop), the
counts and times it reports, and sampling without a seed. Written for mutmut's survivors in
kvqa.generate.decode_n_tokens (docs/testing.md); each test names the mutations it guards."""

from __future__ import annotations

import time
from dataclasses import replace

import pytest

import kvqa
import kvqa.generate
from kvqa.config import PLAIN
from kvqa.generate import decode_n_tokens, run_chunks

TEXT = "The ferry to Aland leaves at nine from the west pier. The museum opens at ten and closes at six. " * 4
QUESTION = "When does the museum open?"
NEW = 10


@pytest.fixture(scope="module")
def doc(tiny_lm):
    return kvqa.prefill(tiny_lm, kvqa.document_from_text(TEXT), config=kvqa.Config(max_new_tokens=NEW))


@pytest.fixture(scope="module")
def plain(tiny_lm, doc) -> kvqa.Answer:
    answer = kvqa.answer(tiny_lm, doc, QUESTION)
    assert answer.stop_reason == "length" and len(answer.token_ids) == NEW  # the random model never says EOS here
    return answer


def decode(lm, doc, options=PLAIN, **kw) -> kvqa.Answer:
    """decode_n_tokens called directly on the question's turn (no quote), the cache rolled back after."""
    ids = doc.prompt.question_ids(QUESTION, limit=doc.max_question_tokens, history=(), quotes=[])
    try:
        logits = run_chunks(lm, ids, doc.cache, chunk_size=len(ids))
        events = list(decode_n_tokens(lm, logits, doc.cache, options, question=QUESTION, question_tokens=len(ids),
                                      max_new_tokens=kw.pop("max_new_tokens", NEW), started=time.perf_counter(),
                                      used_cache=True, **kw))
    finally:
        doc.cache.rollback(doc.tokens)
    *pieces, answer = events
    assert "".join(pieces) == answer.text
    return answer


def test_a_plain_answer_counts_its_steps_and_times_them(tiny_lm, doc, plain, monkeypatch):
    """One forward per token after the first, none drafted or rejected; the first token before the last; the mean
    one-token step no shorter than each step and no longer than the decoding took. Guards decode_n_tokens' counters
    started at 1 (steps, rejected, singles) or 1.0 s (their time), `now - started` made `+`, and the loop's bound."""
    slept = 0.02

    def slow_step(lm, token, cache, real=kvqa.generate.decode_one_token):
        time.sleep(slept)  # each step takes at least this long: the mean step cannot be shorter
        return real(lm, token, cache)

    monkeypatch.setattr(kvqa.generate, "decode_one_token", slow_step)
    answer = decode(tiny_lm, doc)
    t = answer.timings
    assert answer.token_ids == plain.token_ids and answer.stop_reason == "length"
    assert t.new_tokens == NEW and t.decode_steps == NEW - 1 and t.drafted_tokens == 0 and t.rejected_tokens == 0
    assert 0 < t.ttft_s < slept < t.answer_s  # the first token comes from the question's forward, before any step
    assert slept <= t.single_step_s <= (t.answer_s - t.ttft_s) / t.decode_steps
    assert answer.text == tiny_lm.tokenizer.decode(answer.token_ids, skip_special_tokens=True)
    one_step = decode(tiny_lm, doc, max_new_tokens=2).timings  # the mean of one step is that step (not halved)
    assert one_step.decode_steps == 1 and slept <= one_step.single_step_s <= one_step.answer_s - one_step.ttft_s


def test_the_models_end_token_ends_the_answer_as_eos(tiny_lm, doc, plain):
    """An id in the model's EOS ids ends the answer before it, stop_reason "eos" (mutmut: the reason's string
    changed or None, `eos_ids | stop_ids` made `&`)."""
    ends_third = replace(tiny_lm, eos_ids=frozenset({plain.token_ids[2]}))
    answer = kvqa.answer(ends_third, doc, QUESTION)
    assert answer.stop_reason == "eos" and answer.token_ids == plain.token_ids[:2]
    assert answer.timings.decode_steps == 2 and answer.timings.new_tokens == 2


def test_a_chat_answer_may_end_at_once(tiny_lm, doc, plain):
    """Without stop ids (a chat prompt) the model's EOS may be its first token: an empty answer, not one forced to
    say something (mutmut: the first token's EOS ruled out whatever the prompt)."""
    ends_first = replace(tiny_lm, eos_ids=frozenset({plain.token_ids[0]}))
    answer = kvqa.answer(ends_first, doc, QUESTION)
    assert answer.stop_reason == "eos" and answer.token_ids == () and answer.text == ""


def test_special_tokens_are_not_said_while_streaming(tiny_lm, doc, plain, monkeypatch):
    """A special token the model chooses (not an end) is left out of the streamed text as of the final one, so the
    pieces add up to the answer (mutmut: `skip_special_tokens` dropped from the streaming decode)."""
    special = tiny_lm.tokenizer.convert_tokens_to_ids("<|im_start|>")
    assert special not in tiny_lm.eos_ids
    real_choose, calls = kvqa.generate.choose, []

    def choose(logits, temperature, generator):
        calls.append(1)
        return special if len(calls) == 2 else real_choose(logits, temperature, generator)

    monkeypatch.setattr(kvqa.generate, "choose", choose)
    answer = decode(tiny_lm, doc)  # asserts the pieces add up to the text
    assert answer.token_ids[1] == special and "<|im_start|>" not in answer.text and answer.text


def rigged_drafter(monkeypatch, plain, contexts: list):
    """Drafting whose guesses are the plain answer's next tokens (the random model never copies from the document,
    so real guesses are never kept); records each Drafter's context."""
    real_init = kvqa.generate.Drafter.__init__

    def init(self, context, **options):
        contexts.append(list(context))
        real_init(self, context, **options)
        self.start = len(self.seq)

    def propose(self, k):
        said = len(self.seq) - self.start
        return list(plain.token_ids[said: said + k])

    monkeypatch.setattr(kvqa.generate.Drafter, "__init__", init)
    monkeypatch.setattr(kvqa.generate.Drafter, "propose", propose)


def test_drafting_counts_what_it_kept_and_reads_the_prompt_and_sampling_never_drafts(tiny_lm, doc, plain,
                                                                                      monkeypatch):
    """With right guesses every step gives two tokens when drafting one: the answer is the plain one, and its tokens
    are the first plus one per step plus the drafted ones; the drafter starts from the document and the question
    (mutmut: `draft > 1`, `context=` left out). Sampling never drafts, even with guesses at hand (mutmut: the
    drafter made when sampling)."""
    contexts: list[list[int]] = []
    rigged_drafter(monkeypatch, plain, contexts)
    one = kvqa.answer(tiny_lm, doc, QUESTION, draft_tokens=1)
    t = one.timings
    assert one.token_ids == plain.token_ids and t.drafted_tokens > 0 and t.rejected_tokens == 0
    assert t.new_tokens == 1 + t.decode_steps + t.drafted_tokens and t.decode_steps < NEW - 1
    assert len(contexts) == 1 and contexts[0][:doc.tokens] == list(doc.ids) and len(contexts[0]) > doc.tokens
    sampled = kvqa.answer(tiny_lm, doc, QUESTION, draft_tokens=4, temperature=1.0, seed=5)
    again = kvqa.answer(tiny_lm, doc, QUESTION, temperature=1.0, seed=5)
    assert sampled.timings.drafted_tokens == 0 and sampled.token_ids == again.token_ids
    assert len(contexts) == 1  # no drafter made for sampling


def test_a_line_end_cannot_be_the_first_token_but_ends_the_answer_later(tiny_lm, doc, plain):
    """A completion prompt's stop ids (line ends) end the answer, but only once it holds something: the first token
    is chosen with them ruled out (mutmut: `blank` forced or dropped, `unsaid` given other ids)."""
    first, third = plain.token_ids[0], plain.token_ids[2]
    answer = decode(tiny_lm, doc, stop_ids=frozenset({first, third}))
    assert answer.token_ids[0] != first  # the model's first choice was ruled out, so the answer says something
    assert answer.stop_reason in ("eos", "length") and answer.text.strip()
    said = decode(tiny_lm, doc, stop_ids=frozenset({third}))
    assert said.token_ids == plain.token_ids[:2] and said.stop_reason == "eos"  # a stop id once something was said


def test_stop_before_the_first_token_is_an_empty_stopped_answer(tiny_lm, doc):
    """should_stop() is asked before each token is taken, the first included (mutmut: the "stopped" reason's string
    changed or None)."""
    answer = decode(tiny_lm, doc, should_stop=lambda: True)
    assert answer.stop_reason == "stopped" and answer.token_ids == () and answer.text == ""


def test_sampling_without_a_seed_samples(tiny_lm, doc, plain):
    """A temperature without a seed samples from the global generator (mutmut: a generator made for `seed is None`,
    which manual_seed refuses)."""
    answers = {kvqa.answer(tiny_lm, doc, QUESTION, temperature=2.0).token_ids for _ in range(3)}
    assert all(len(a) == NEW for a in answers) and answers != {plain.token_ids}
