"""The decode loop's bookkeeping on the tiny random Llama: why an answer ended (length, EOS, a line end, Stop), the
counts and times it reports, and sampling without a seed. Written for mutmut's survivors in
kvqa.generation.decode.decode_n_tokens (docs/testing.md); each test names the mutations it guards."""

from __future__ import annotations

import copy
import time
from dataclasses import replace

import pytest
import torch

import kvqa
import kvqa.generation.decode
from conftest import tiny_llama
from kvqa.config import PLAIN
from kvqa.generation.decode import DecodePlan, decode_n_tokens
from kvqa.generation.generate import run_chunks

TEXT = "The ferry to Aland leaves at nine from the west pier. The museum opens at ten and closes at six. " * 4
QUESTION = "When does the museum open?"
NEW = 10
REAL_CHOOSE = kvqa.generation.decode.choose


@pytest.fixture(scope="module")
def doc(tiny_lm):
    return kvqa.prefill(tiny_lm, kvqa.document_from_text(TEXT), config=kvqa.Config.of(max_new_tokens=NEW))


@pytest.fixture(scope="module")
def plain(tiny_lm, doc) -> kvqa.Answer:
    answer = kvqa.answer(tiny_lm, doc, QUESTION)
    assert answer.stop_reason == "length" and len(answer.token_ids) == NEW  # the random model never says EOS here
    return answer


def streamed(lm, doc, options=PLAIN, **kw) -> tuple[list[str], kvqa.Answer]:
    """decode_n_tokens called directly on the question's turn (no quote), the cache rolled back after: the pieces
    it streamed, and the Answer."""
    ids = doc.prompt.question_ids(QUESTION, limit=doc.max_question_tokens, history=(), quotes=[])
    try:
        logits = run_chunks(lm, ids, doc.cache, chunk_size=len(ids))
        asked = DecodePlan(question=QUESTION, question_tokens=len(ids), max_new_tokens=kw.pop("max_new_tokens", NEW),
                      started=time.perf_counter(), used_cache=True, **kw)
        *pieces, answer = decode_n_tokens(lm, logits, doc.cache, options, asked)
    finally:
        doc.cache.rollback(doc.tokens)
    assert "".join(pieces) == answer.text and all(pieces)  # the pieces add up to the answer, none of them empty
    return pieces, answer


def decode(lm, doc, options=PLAIN, **kw) -> kvqa.Answer:
    """streamed()'s Answer."""
    return streamed(lm, doc, options, **kw)[1]


def scripted_choices(monkeypatch, script: dict[int, int]) -> None:
    """kvqa.generation.decode.choose returns script[n] at its n-th call (from 1), else the model's choice."""
    calls = []

    def choose(logits, temperature, generator):
        calls.append(1)
        return script[len(calls)] if len(calls) in script else REAL_CHOOSE(logits, temperature, generator)

    monkeypatch.setattr(kvqa.generation.decode, "choose", choose)


def test_a_plain_answer_counts_its_steps_and_times_them(tiny_lm, doc, plain, monkeypatch):
    """One forward per token after the first, none drafted or rejected; the first token before the last; the mean
    one-token step no shorter than each step and no longer than the decoding took. Guards decode_n_tokens' counters
    started at 1 (steps, rejected, singles) or 1.0 s (their time), `now - started` made `+`, and the loop's bound."""
    slept = 0.02

    def slow_step(lm, token, cache, real=kvqa.generation.decode.decode_one_token):
        time.sleep(slept)  # each step takes at least this long: the mean step cannot be shorter
        return real(lm, token, cache)

    monkeypatch.setattr(kvqa.generation.decode, "decode_one_token", slow_step)
    started = time.perf_counter()
    answer = decode(tiny_lm, doc)
    wall = time.perf_counter() - started
    t = answer.timings
    assert t.answer_s <= wall  # timed from the question's start: no longer than the call took
    assert answer.token_ids == plain.token_ids and answer.stop_reason == "length"
    assert t.new_tokens == NEW and t.decode_steps == NEW - 1 and t.drafted_tokens == 0 and t.rejected_tokens == 0
    assert 0 < t.ttft_s <= t.answer_s - t.decode_steps * slept  # the first token comes before every step
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
    scripted_choices(monkeypatch, {2: special})
    answer = decode(tiny_lm, doc)  # asserts the pieces add up to the text
    assert answer.token_ids[1] == special and "<|im_start|>" not in answer.text and answer.text


def rigged_drafter(monkeypatch, plain, contexts: list):
    """Drafting whose guesses are the plain answer's next tokens (the random model never copies from the document,
    so real guesses are never kept); records each Drafter's context."""
    real_init = kvqa.generation.decode.Drafter.__init__

    def init(self, context, **options):
        contexts.append(list(context))
        real_init(self, context, **options)
        self.start = len(self.seq)

    def propose(self, k):
        said = len(self.seq) - self.start
        return list(plain.token_ids[said: said + k])

    monkeypatch.setattr(kvqa.generation.decode.Drafter, "__init__", init)
    monkeypatch.setattr(kvqa.generation.decode.Drafter, "propose", propose)


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
    assert t.new_tokens == 1 + t.decode_steps + t.drafted_tokens  # no guess counted beyond the answer's limit
    assert t.decode_steps == -(-(NEW - 1) // 2)  # two tokens a step while two fit, then one
    four = kvqa.answer(tiny_lm, doc, QUESTION, draft_tokens=4).timings  # guesses up to the room left, no fewer
    assert four.new_tokens == NEW == 1 + four.decode_steps + four.drafted_tokens and four.decode_steps == 2
    assert four.single_step_s == 0.0 and four.draft_speedup is None  # no one-token step to time: none said
    assert len(contexts) == 2 and contexts[0][:doc.tokens] == list(doc.ids) and len(contexts[0]) > doc.tokens
    ends = replace(tiny_lm, eos_ids=frozenset({plain.token_ids[3]}))  # an end among the guesses the model agrees with
    ended = kvqa.answer(ends, doc, QUESTION, draft_tokens=4)
    assert ended.stop_reason == "eos" and ended.token_ids == plain.token_ids[:3]  # nothing taken after the end
    sampled = kvqa.answer(tiny_lm, doc, QUESTION, draft_tokens=4, temperature=1.0, seed=5)
    again = kvqa.answer(tiny_lm, doc, QUESTION, temperature=1.0, seed=5)
    assert sampled.timings.drafted_tokens == 0 and sampled.token_ids == again.token_ids
    assert len(contexts) == 3  # no drafter made for sampling


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


def test_leading_whitespace_is_not_said_and_a_line_end_waits_for_words(tiny_lm, doc, monkeypatch):
    """A line-ended answer that begins with a space: the space is not said, and the stop ids stay ruled out until a
    word is (mutmut: `lstrip` made `rstrip` or None, `blank` not updated, the later steps' `unsaid` dropped)."""
    space = tiny_lm.tokenizer.convert_tokens_to_ids("\u0120")  # byte-level BPE's space
    scripted_choices(monkeypatch, {1: space})
    free = decode(tiny_lm, doc)
    after_space = free.token_ids[1]
    scripted_choices(monkeypatch, {1: space})
    answer = decode(tiny_lm, doc, stop_ids=frozenset({after_space}))
    assert answer.token_ids[0] == space and answer.token_ids[1] != after_space  # ruled out: nothing said yet
    assert answer.text and not answer.text[0].isspace()
    assert answer.text == tiny_lm.tokenizer.decode(answer.token_ids, skip_special_tokens=True).lstrip()


def test_half_a_character_is_held_back_until_its_other_half(tiny_lm, doc, monkeypatch):
    """A Chinese character whose bytes span two tokens is streamed whole, never as a replacement character
    (mutmut: the hold-back's test changed)."""
    char = next(c for c in "\u9f98\u9b31\U0001f642" if len(tiny_lm.tokenizer.encode(c, add_special_tokens=False)) == 2)
    halves = tiny_lm.tokenizer.encode(char, add_special_tokens=False)
    assert "\ufffd" in tiny_lm.tokenizer.decode(halves[:1])
    scripted_choices(monkeypatch, {1: halves[0], 2: halves[1], 4: halves[0], 5: halves[1]})
    pieces, answer = streamed(tiny_lm, doc, max_new_tokens=6)  # (asserts the pieces add up to the text)
    assert answer.text.startswith(char) and answer.text.count(char) == 2
    assert not any("\ufffd" in piece for piece in pieces)
    ends = replace(tiny_lm, eos_ids=frozenset({halves[1]}))  # the model ends after half a character: said as is
    scripted_choices(monkeypatch, {1: halves[0], 2: halves[1]})
    ended = decode(ends, doc)  # (asserts the pieces add up to the text)
    assert ended.stop_reason == "eos" and ended.text == tiny_lm.tokenizer.decode(halves[:1]) and ended.text
    scripted_choices(monkeypatch, {1: halves[0]})
    cut = decode(tiny_lm, doc, max_new_tokens=1)  # the limit cuts after half a character: not said
    assert cut.stop_reason == "length" and cut.token_ids == tuple(halves[:1]) and cut.text == ""
    scripted_choices(monkeypatch, {1: tiny_lm.tokenizer.convert_tokens_to_ids("X")})
    assert decode(tiny_lm, doc, max_new_tokens=1).text == "X"  # only half characters are cut, nothing else


def test_the_repetition_penalty_reaches_every_choice(tiny_lm, doc, plain, monkeypatch):
    """With a penalty, every choice is made on logits penalised by all the answer said before it, in plain steps and
    in drafting's checks alike (the random model never repeats itself, so answers alone cannot show it; mutmut: the
    said tokens left out of `penalise`)."""
    logits = torch.tensor([[2.0, -1.0, 0.5, 3.0]])
    assert kvqa.generation.decode.penalise(logits, [0, 1, 0], 2.0).tolist() == [[1.0, -2.0, 0.5, 3.0]]
    real_penalise = kvqa.generation.decode.penalise
    for draft in (0, 1):
        said: list[tuple[int, ...]] = []

        def penalise(logits, tokens, penalty):
            said.append(tuple(tokens))
            return real_penalise(logits, tokens, penalty)

        monkeypatch.setattr(kvqa.generation.decode, "penalise", penalise)
        if draft:
            rigged_drafter(monkeypatch, plain, [])
        answer = kvqa.answer(tiny_lm, doc, QUESTION, repetition_penalty=2.0, draft_tokens=draft)
        assert answer.token_ids == plain.token_ids
        assert said[0] == ()  # the first choice: nothing said yet
        assert all(s and plain.token_ids[:len(s)] == s for s in said[1:]), said  # all said before, in order
        assert {len(s) for s in said[1:]} == set(range(1, NEW)), draft  # every choice after the first


def test_a_completion_prompts_answer_ends_at_its_line_end(default_tokenizer, monkeypatch):
    """A model without a chat template (a pretrained one: Gemma 3 270M's layout) answers on one line: a line end
    after some words ends the answer as EOS does, on the cached path (mutmut: _answer_on_cache's `stop_ids` left out
    or asked of no model)."""
    tokenizer = copy.deepcopy(default_tokenizer)
    tokenizer.chat_template = None
    lm = tiny_llama(tokenizer, seed=2)
    doc = kvqa.prefill(lm, kvqa.document_from_text(TEXT), config=kvqa.Config.of(max_new_tokens=NEW))
    assert doc.prompt.stops_at_line_end
    free = kvqa.answer(lm, doc, QUESTION)
    line_end = tokenizer.convert_tokens_to_ids("\u010a")  # byte-level BPE's "\n"
    scripted_choices(monkeypatch, {3: line_end})
    answer = kvqa.answer(lm, doc, QUESTION)
    assert answer.stop_reason == "eos" and answer.token_ids == free.token_ids[:2] and "\n" not in answer.text


def test_a_list_that_counts_up_is_caught_repeating(tiny_lm, doc, monkeypatch):
    """A run that repeats but for its numbers ("1 a b 2 a b 3 a b") ends as repeating: the number tokens count as
    one (mutmut: decode_n_tokens' number tokens not passed to is_looping)."""
    vocab = tiny_lm.tokenizer
    a, b = vocab.convert_tokens_to_ids("\u0120ferry"), vocab.convert_tokens_to_ids("\u0120pier")
    run = [t for n in "1234" for t in (vocab.convert_tokens_to_ids(n), a, b)]
    scripted_choices(monkeypatch, dict(enumerate(run, start=1)))
    answer = decode(tiny_lm, doc, replace(PLAIN, repeat_stop=6), max_new_tokens=len(run))
    assert answer.stop_reason == "repeating" and len(answer.token_ids) < len(run)
    assert list(answer.token_ids) == run[:len(answer.token_ids)]
    scripted_choices(monkeypatch, dict(enumerate(run, start=1)))
    shortest = decode(tiny_lm, doc, replace(PLAIN, repeat_stop=1), max_new_tokens=len(run))
    assert shortest.stop_reason == "repeating" and len(shortest.token_ids) == 6  # "1 a b 2 a b": once is enough


def test_copying_favours_what_follows_in_the_quote_and_any_quote_token_elsewhere():
    """Copy-biased decoding's rule on its own: after a token of the quote, the tokens that follow it there; after any
    other token (or at the start), every token of the quote; the bias added to those logits only."""
    copying = kvqa.generation.decode.Copying([5, 6, 7, 5, 8], 2.0)
    assert copying.favoured([]) == [5, 6, 7, 8]
    assert copying.favoured([1, 5]) == [6, 8]  # 5 is followed by 6 and by 8 in the quote
    assert copying.favoured([7]) == [5] and copying.favoured([8]) == [5, 6, 7, 8]  # 8 ends the quote: start again
    ending = kvqa.generation.decode.Copying([5, 6, 7, 5, 8], 2.0, ends=frozenset({9}))
    assert ending.favoured([]) == [5, 6, 7, 8]  # an answer that says nothing yet does not end
    assert ending.favoured([5]) == [6, 8, 9] and ending.favoured([1]) == [5, 6, 7, 8, 9]  # then stopping competes
    logits = torch.zeros(1, 10)
    assert copying(logits, [5]).tolist() == [[0, 0, 0, 0, 0, 0, 2.0, 0, 2.0, 0]]
    assert logits.abs().sum() == 0  # the caller's logits are not changed
    assert kvqa.generation.decode.Copying([5, 6], 0.0)(logits, []) is logits  # off
    assert kvqa.generation.decode.Copying([], 3.0)(logits, []) is logits  # nothing quoted


def test_a_strong_copy_bias_makes_the_answer_copy_the_quote(tiny_lm, doc, plain):
    """With a bias stronger than any logit gap every token the random model chooses copies the quote (or ends the
    answer): its first token is one of the quote's and each next one follows its previous token somewhere in the quote
    (or starts a copy again after the quote's last token); without a quote, the bias changes nothing."""
    quote = doc.prompt.text_ids("The museum opens at ten and closes at six.")
    copied = decode(tiny_lm, doc, replace(PLAIN, copy_bias=1000.0), quote_ids=tuple(quote))
    assert copied.token_ids and copied.token_ids != plain.token_ids[:len(copied.token_ids)]
    assert copied.stop_reason in ("length", "eos")  # the end token is favoured too, once the answer says something
    follows = {(a, b) for a, b in zip(quote, quote[1:])}
    for before, token in zip((None, *copied.token_ids), copied.token_ids):
        assert token in quote
        assert before is None or (before, token) in follows or before == quote[-1] and before not in quote[:-1]
    assert decode(tiny_lm, doc, replace(PLAIN, copy_bias=1000.0)).token_ids == plain.token_ids
