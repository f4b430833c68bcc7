"""The second repeat stop: a sentence or clause said again with small changes ends the answer before it
(kvqa.generation.repeats), as a scanned page's answer showed, "The function is defined as asn1_create_element, which is
a
function that is used to create a new element ..." three times over to the token limit. Text-level rules first, then
the decode loop on the tiny random Llama with its choices scripted."""

from __future__ import annotations

import pytest

import kvqa
import kvqa.generation.decode as decode
from kvqa.generation.repeats import SentenceRepeats, ngrams, sentence_cut

ASN1 = ("The function is defined as asn1_create_element, which is a function that is used to create a new element. "
        "The function is defined as asn1_create_element, which is the function used to create a new element. "
        "The function is asn1_create_element, which is used to create")
FIRST = ASN1[:ASN1.index(". ") + 1]


def cut(text: str) -> str | None:
    """Where the stop ends `text` read a character at a time as it grows (then ended): the text kept, None when it
    does not stop. Characters, not tokens: the rules read text."""
    repeats = SentenceRepeats()
    for i in range(1, len(text) + 1):
        if repeats.add(text[:i]):
            return text[:repeats.end]
    return text[:repeats.end] if repeats.finish(text) else None


def test_a_sentence_said_again_with_small_changes_ends_the_answer_after_its_first_time():
    assert cut(ASN1) == FIRST
    assert cut(ASN1[:ASN1.index("The function is asn1")]) == FIRST  # the second time alone is enough


def test_a_chinese_clause_said_again_with_one_word_changed_ends_the_answer():
    text = "新冠病毒主要通过呼吸道飞沫和密切接触传播。新冠病毒主要是通过呼吸道飞沫和密切接触传播。"
    assert cut(text) == "新冠病毒主要通过呼吸道飞沫和密切接触传播。"
    clauses = "该药物可以显著降低重症患者的死亡率，该药物能够显著降低重症患者的死亡率，"  # ， ends a clause
    assert cut(clauses) == "该药物可以显著降低重症患者的死亡率，"


@pytest.mark.parametrize("text", [
    # a list whose items share a template: each item says something new
    "The first step is to open the box. The second step is to close the lid. The third step is to wash your hands.",
    "第一步是打开盒子，第二步是关上盖子，第三步是洗手。",
    # two sentences sharing a few words, or most of a short one
    "The virus can spread through droplets. The virus can spread through contact.",
    "病毒可以通过飞沫传播，病毒可以通过接触传播。",
    "The virus spreads through the air in droplets. It also spreads through the air on surfaces people touch.",
    # short sentences are too short to tell a loop from an answer ("Yes. Yes." is left to the whole-span stop,
    # which ends a run of them past 12 tokens)
    "Yes. Yes.",
    "Yes. Yes. Yes. Yes.",
    # a sentence that repeats an earlier one but adds more than it repeats
    "The incubation period is 5 days. The incubation period is 5 days on average, with a range of 2 to 14 days.",
    # a decimal point is no sentence end
    "The dose was 2.5 mg per kg, e.g. for adults, and 1.5 mg per kg for children under twelve years old.",
])
def test_answers_that_say_new_things_are_not_cut(text):
    assert cut(text) is None


def test_the_replay_after_the_fact_cuts_where_the_decode_loop_would():
    """sentence_cut (scripts/sentence_repeats.py's replay of answers already made) on characters as tokens."""
    def say(ids):
        return "".join(map(chr, ids))

    assert sentence_cut([ord(c) for c in ASN1], say, stop_reason="length") == (len(FIRST), len(FIRST))
    assert sentence_cut([ord(c) for c in FIRST], say, stop_reason="eos") is None
    unended = ASN1[:ASN1.index(" used to create a new element. The function is asn1")]  # the second time cut
    #                                                                                      short by the limit
    assert sentence_cut([ord(c) for c in unended], say, stop_reason="length") == (len(FIRST), len(FIRST))
    assert sentence_cut([ord(c) for c in unended], say, stop_reason="stopped") is None  # Stop shows what was said


def test_trigrams_of_words_and_of_chinese_characters():
    assert ngrams("The function, asn1_create_element") == {("the", "function", "asn1_create_element")}
    assert ngrams("病毒传播 via air") == {("病", "毒", "传"), ("毒", "传", "播"), ("传", "播", "via"),
                                          ("播", "via", "air")}
    assert ngrams("Yes.") == frozenset()


def test_a_sentence_that_looks_like_a_repeat_waits_and_one_that_says_something_new_is_shown():
    repeats = SentenceRepeats()
    first = "The function is defined as asn1_create_element in the library of the standard. "
    assert not repeats.add(first[:-2]) and repeats.said == len(first) - 2  # the first sentence is never held
    assert not repeats.add(first) and repeats.said == len(first.rstrip())  # the next one's first words wait
    assert not repeats.add(first + "The function is defined") and repeats.said == len(first.rstrip())  # a repeat?
    new = first + "It says that the standard names it so"
    assert not repeats.add(new) and repeats.said == len(new)  # five new trigrams and none shared: shown
    again = SentenceRepeats()
    again.add(first)
    changed = first + "The function also is defined"
    assert not again.add(changed) and again.said == len(first.rstrip())  # could still prove a repeat: waits
    assert again.add(changed + " as asn1_create_element in the library of the standard. ")
    assert again.end == len(first.rstrip())  # and the answer ends before it
    late = SentenceRepeats()
    late.add(first)
    shown = first + "Also, as the standard says, the function is"
    assert not late.add(shown) and late.said == len(shown)
    assert late.add(shown + " defined as asn1_create_element in the library of the standard. ")
    assert late.end == len(shown + " defined as asn1_create_element in the library of the standard.")
    # a repeat after all, but begun as something new and shown: the answer ends after it


def script(lm, text: str) -> list[int]:
    return lm.tokenizer.encode(text, add_special_tokens=False)


def test_the_decode_loop_stops_repeating_before_the_sentence_said_again_on_both_paths(tiny_lm, monkeypatch):
    """Cached and recomputed answers stop alike, at the end of the first time; the stream never shows the repeat
    and its pieces add up to the answer; the whole-span stop's switch (repeat_stop 0) turns this one off too."""
    ids = script(tiny_lm, ASN1)
    choices = iter(ids)
    monkeypatch.setattr(decode, "choose", lambda logits, temperature, generator: next(choices))
    document = kvqa.document_from_text("A short document about nothing in particular.")
    config = kvqa.Config.of(max_new_tokens=len(ids))
    doc = kvqa.prefill(tiny_lm, document, config=config)
    stream = kvqa.stream(tiny_lm, doc, "What is asn1_create_element?", repeat_stop=12, draft_tokens=0,
                         quote_passages=0)
    pieces = list(stream)
    cached = stream.answer
    assert cached.stop_reason == "repeating" and cached.text == FIRST and "".join(pieces) == FIRST
    assert list(cached.token_ids) == script(tiny_lm, FIRST)  # the ids kept are those of the first time
    assert cached.timings.new_tokens > len(cached.token_ids)  # the held-back ids were made, and are counted
    assert doc.cache.length == doc.tokens
    choices = iter(ids)
    whole = kvqa.answer_without_cache(tiny_lm, document, "What is asn1_create_element?", config=config,
                                      prompt=doc.prompt, repeat_stop=12, draft_tokens=0, quote_passages=0)
    assert (whole.stop_reason, whole.text, whole.token_ids) == (cached.stop_reason, cached.text, cached.token_ids)
    choices = iter(ids)
    off = kvqa.answer(tiny_lm, doc, "What is asn1_create_element?", repeat_stop=0, draft_tokens=0, quote_passages=0)
    assert off.stop_reason == "length" and off.text == ASN1


def test_a_repeat_cut_by_the_token_limit_is_dropped_at_the_end(tiny_lm, monkeypatch):
    """The limit falls inside the second time, before its sentence ends: the answer still ends after the first."""
    ids = script(tiny_lm, ASN1)
    limit = len(script(tiny_lm, FIRST + " The function is defined as asn1_create_element, which is"))
    choices = iter(ids)
    monkeypatch.setattr(decode, "choose", lambda logits, temperature, generator: next(choices))
    config = kvqa.Config.of(max_new_tokens=limit)
    doc = kvqa.prefill(tiny_lm, kvqa.document_from_text("A short document."), config=config)
    answer = kvqa.answer(tiny_lm, doc, "What is it?", repeat_stop=12, draft_tokens=0, quote_passages=0)
    assert answer.stop_reason == "repeating" and answer.text == FIRST and answer.timings.new_tokens == limit
