"""Composed caches (kvqa.generation.compose) on the tiny random Llama: a key moved by its rotation is the key the
model computes at the new position (float32, to rounding); one part composed is that part's cache (its tail read
again, to rounding); two parts composed hold the first part's cache unchanged, the second's values unchanged and its
keys moved, the template's tail read again on top; runs cut at paragraphs are those paragraphs' tokens; a question is
answered from the composed cache."""

from __future__ import annotations

import torch

from kvqa.config import Config
from kvqa.documents.reading import document_from_text
from kvqa.engines import LocalEngine
from kvqa.generation.compose import composable, compose, compose_reads, cut, edges, shift_keys, template
from kvqa.generation.generate import prefill
from kvqa.model.kv_cache import new_cache
from kvqa.session.ask import ask

FIRST = "The lighthouse on Gull Point was built in 1871 by the harbour board. Its lamp burned whale oil at first."
SECOND = "The keeper of the Gull Point light from 1902 was Ada Brennan, who kept it for thirty-one years."


def keys_at(lm, ids: list[int], start: int):
    """Each layer's (keys, values) of `ids` read at positions start..start+len(ids), from an empty cache."""
    cache = new_cache(lm.config, len(ids) + 1, lm.kv_dtype)
    with torch.no_grad():
        lm.model(input_ids=torch.tensor([ids]), position_ids=torch.arange(start, start + len(ids))[None],
                 cache=cache, use_cache=True)
    return cache.tensors()


def test_a_key_moved_by_its_rotation_is_the_key_at_the_new_position(tiny_lm):
    assert composable(tiny_lm)
    ids = tiny_lm.tokenizer(FIRST, add_special_tokens=False)["input_ids"]
    at_zero, at_later = keys_at(tiny_lm, ids, 0), keys_at(tiny_lm, ids, 300)
    for (k0, v0), (k1, v1) in zip(at_zero, at_later):
        torch.testing.assert_close(shift_keys(tiny_lm, k0, 300), k1, atol=2e-5, rtol=1e-4)
        torch.testing.assert_close(v0, v1, atol=2e-5, rtol=1e-4)  # attention is relative: the values do not move
        assert not torch.allclose(k0, k1, atol=1e-3)  # (the positions do change the keys)


def test_one_part_composed_is_that_part(tiny_lm):
    part = prefill(tiny_lm, document_from_text(FIRST, name="a.txt"))
    one = compose_reads(tiny_lm, [part], part.document)
    assert one.ids == part.ids and one.origin == "composed" and one.document.text == FIRST
    _, tail = edges(part.prompt)
    kept = slice(0, len(part.ids) - tail)  # head and text as read; the tail read again on top
    for (k0, v0), (k1, v1) in zip(part.cache.tensors(), one.cache.tensors()):
        assert torch.equal(k0[:, :, kept], k1[:, :, kept]) and torch.equal(v0[:, :, kept], v1[:, :, kept])
        torch.testing.assert_close(k1, k0, atol=1e-5, rtol=1e-4)
        torch.testing.assert_close(v1, v0, atol=1e-5, rtol=1e-4)


def test_two_parts_composed_keep_the_first_move_the_second_and_answer(tiny_lm):
    a = prefill(tiny_lm, document_from_text(FIRST, name="a.txt"))
    b = prefill(tiny_lm, document_from_text(SECOND, name="b.txt"))
    whole = document_from_text(FIRST + "\n\n" + SECOND, name="ab.txt")
    both = compose_reads(tiny_lm, [a, b], whole)
    head, tail = edges(a.prompt)  # the template's own tokens before and after the document
    body_a, body_b = len(a.ids) - head - tail, len(b.ids) - head - tail
    assert both.ids == a.ids[: head + body_a] + b.ids[head: head + body_b] + a.ids[len(a.ids) - tail:]
    assert both.document.text == FIRST + SECOND  # what the composed cache holds, as it holds it
    assert both.cache.length == len(both.ids)
    for (ka, va), (kb, vb), (kc, vc) in zip(a.cache.tensors(), b.cache.tensors(), both.cache.tensors()):
        first = slice(0, head + body_a)
        assert torch.equal(kc[:, :, first], ka[:, :, first]) and torch.equal(vc[:, :, first], va[:, :, first])
        moved = slice(head + body_a, head + body_a + body_b)
        assert torch.equal(vc[:, :, moved], vb[:, :, head: head + body_b])
        torch.testing.assert_close(kc[:, :, moved], shift_keys(tiny_lm, kb[:, :, head: head + body_b], body_a))
    engine = LocalEngine(Config(), lm=tiny_lm)
    answer = ask(engine, both, "Who kept the Gull Point light?", max_new_tokens=8).answer
    assert answer.used_cache and answer.timings.new_tokens > 0
    assert both.cache.length == len(both.ids)  # rolled back to the composed document afterwards


def test_runs_cut_at_paragraphs_are_their_tokens_and_compose_to_their_text(tiny_lm):
    paragraphs = [FIRST, "An unrelated paragraph about the tides and the harbour's ferries.", SECOND]
    text = "\n\n".join(paragraphs) + "\n"
    read = prefill(tiny_lm, document_from_text(text, name="three.txt"))
    first_end = text.index(paragraphs[1])  # the first paragraph and the blank line after it
    last = text.index(paragraphs[2])
    runs = cut(tiny_lm, read, [(0, first_end), (last, len(text))])
    assert [r.text for r in runs] == [text[:first_end], text[last:]]
    ids = read.ids
    assert all(run.ids == tuple(ids[run.at: run.at + len(run.ids)]) for run in runs)
    head, tail = template(read)
    composed = compose(tiny_lm, head, runs, tail, read.document, prompt=read.prompt)
    assert composed.document.text == text[:first_end] + text[last:]
    assert list(composed.ids) == read.prompt.prefix_ids(composed.document.text)  # the ids of reading that text
    assert cut(tiny_lm, read, [(3, 3)])[0].ids == ()  # a span holding no whole token gives an empty run
