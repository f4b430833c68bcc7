"""Answers a user can trust. Looping answers end early (the same rule on both paths), and each answer
carries the passages of the document it relies on, with their PDF page."""

from __future__ import annotations

import itertools

import pytest

import kvqa
import kvqa.generation.decode as decode
from kvqa.evidence.sources import passages, terms
from ranked import find_sources
from test_documents import make_pdf


def test_repeated_tail_finds_the_period_and_the_run():
    assert decode.repeated_tail([1, 2, 3, 1, 2, 3, 1, 2]) == (3, 5)
    assert decode.repeated_tail([1, 2, 3, 4]) == (0, 0)
    assert decode.repeated_tail([7] * 6) == (1, 5)


@pytest.mark.parametrize("tokens,looping", [
    ([9] * 13, True),  # "ton ton ton ..." past 12 repeated tokens
    ([9] * 12, False),
    ([1, 2, 3, 4] * 4, True),  # a 4-token span said four times: 12 repeated tokens
    ([1, 2, 3, 4] * 3 + [1, 2, 3], False),
    (list(range(20)) * 2, True),  # a 20-token clause said twice, whole
    (list(range(20)) + list(range(15)), False),  # said one and a half times: not yet
    (list(range(60)), False),
])
def test_what_counts_as_looping(tokens, looping):
    assert decode.is_looping(tokens, 12) is looping
    assert decode.is_looping(tokens, 0) is False  # 0 turns the rule off


def test_a_looping_answer_stops_as_repeating_on_both_paths(tiny_lm, monkeypatch):
    cycle = itertools.cycle([11, 12, 13, 14, 15])
    monkeypatch.setattr(decode, "choose", lambda logits, temperature, generator: next(cycle))
    document = kvqa.document_from_text("A short document about nothing in particular.")
    config = kvqa.Config.of(max_new_tokens=64)
    doc = kvqa.prefill(tiny_lm, document, config=config)
    cached = kvqa.answer(tiny_lm, doc, "Anything?", repeat_stop=12)
    cycle = itertools.cycle([11, 12, 13, 14, 15])
    whole = kvqa.answer_without_cache(tiny_lm, document, "Anything?", config=config, prompt=doc.prompt, repeat_stop=12)
    assert cached.stop_reason == whole.stop_reason == "repeating"
    assert cached.token_ids == whole.token_ids and len(cached.token_ids) == 5 + 12  # stopped 12 tokens in
    assert doc.cache.length == doc.tokens
    cycle = itertools.cycle([11, 12, 13, 14, 15])
    assert kvqa.answer(tiny_lm, doc, "Anything?", repeat_stop=0).stop_reason == "length"


def test_sources_are_the_passages_the_answer_comes_from():
    text = ("The museum opens at 9 am on weekdays. " * 3 + "\n\n"
            + "The bridge over the Lune is 120 metres long and was finished in 1887. " + "\n\n"
            + "Lunch is served in the garden cafe from noon. " * 4)
    found = find_sources(text, "The bridge is 120 metres long.", "How long is the bridge?")
    assert found and "120 metres" in found[0].text and found[0].page is None
    assert text[found[0].start: found[0].end] == found[0].text
    assert find_sources(text, "Zebra quantum.", "?") == []  # nothing in common: no source rather than a guess


def test_sources_carry_the_pdf_page(tmp_path, default_lm):
    pdf = tmp_path / "manual.pdf"
    pdf.write_bytes(make_pdf(["Chapter one is about cleaning the filter every week.",
                              "Warranty: the purifier is guaranteed for 24 months after purchase.",
                              "Chapter three lists the error codes of the display."]))
    document = kvqa.load_document(pdf)
    found = find_sources(document.text, "It is guaranteed for 24 months.", "How long is the warranty?", pages=True)
    assert found[0].page == 2 and "24 months" in found[0].text


def test_cjk_sources():
    text = ("青石镇茶叶合作社成立于二〇〇八年。\n合作社的茶园面积为三百二十亩，主要种植白茶。\n"
            "游客中心每天上午八点开门。")
    assert "茶园" in terms("茶园面积")
    found = find_sources(text, "茶园面积为三百二十亩。", "茶园有多大？")
    assert found and "三百二十亩" in found[0].text
    assert all(text[a:b].strip() for a, b in passages(text))


def test_sources_change_neither_the_answer_nor_the_cache(tiny_lm):
    document = kvqa.document_from_text("The secret word is pelican. " * 20)
    doc = kvqa.prefill(tiny_lm, document, config=kvqa.Config.of(max_new_tokens=12))
    before = [(k.clone(), v.clone()) for k, v in doc.cache.tensors()]
    first = kvqa.answer(tiny_lm, doc, "What is the secret word?")
    again = kvqa.answer(tiny_lm, doc, "What is the secret word?")
    assert first.token_ids == again.token_ids and first.sources == again.sources
    assert first.timings.sources_s >= 0 and doc.cache.length == doc.tokens
    for (k, v), (k0, v0) in zip(doc.cache.tensors(), before):
        assert (k == k0).all() and (v == v0).all()
