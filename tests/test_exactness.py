"""The core promise: answers from the prefilled cache equal answers from the whole prompt, and answering leaves the
prefilled cache exactly as it was (length and bits)."""

from __future__ import annotations

import pytest
import torch

import kvqa
from kvqa.generation.generate import run_chunks
from kvqa.model.kv_cache import bytes_per_token, new_cache

QUESTIONS = ["What is the secret word?", "When does the museum open?", "这份文件讲了什么？", "Summarise the document."]
TEXT = (
    "The secret word is pelican. The museum opens at 9 am on weekdays and at noon on Sundays. "
    + " ".join(f"Note {i}: the river near town {i} is calm and the bridge is {i * 3} metres long." for i in range(60))
    + "\n中文段落：文档只需要读一次。"
)
SHORT_TEXT = TEXT[: TEXT.index("Note 20:")] + TEXT[TEXT.index("\n中文段落"):]  # the first 20 notes, and the Chinese


def snapshot(doc: kvqa.PrefilledDocument) -> list[tuple[torch.Tensor, torch.Tensor]]:
    return [(k.clone(), v.clone()) for k, v in doc.cache.tensors()]


def assert_unchanged(doc: kvqa.PrefilledDocument, before) -> None:
    assert doc.cache.length == doc.tokens
    for (k, v), (k0, v0) in zip(doc.cache.tensors(), before):
        assert torch.equal(k, k0) and torch.equal(v, v0)


def assert_question_logits_as_in_the_same_chunks(lm, doc, question: str, chunk_size: int) -> None:
    """The question's logits from the prefilled cache equal, bit for bit, those of a scratch cache read in the same
    chunks; the cache is rolled back after."""
    ids = list(doc.ids) + doc.prompt.suffix_ids(question)
    with torch.no_grad():
        scratch = new_cache(lm.config, len(ids), lm.kv_dtype)
        for start in range(0, doc.tokens, chunk_size):
            run_chunks(lm, ids[start: min(start + chunk_size, doc.tokens)], scratch, chunk_size=len(ids))
        fresh = run_chunks(lm, ids[doc.tokens:], scratch, chunk_size=len(ids))
        cached = run_chunks(lm, ids[doc.tokens:], doc.cache, chunk_size=len(ids))
    doc.cache.rollback(doc.tokens)
    assert torch.equal(fresh, cached)  # the logits, bit for bit


@pytest.fixture(params=["tiny", "smollm2"])
def lm(request, tiny_lm, default_lm):
    return tiny_lm if request.param == "tiny" else default_lm


@pytest.mark.parametrize("draft, copy_bias", [(0, 0.0), (6, 0.0), (6, 2.0)])
def test_cached_answers_equal_whole_prompt_answers(lm, draft, copy_bias):
    """Every decoding rule chooses alike on the cache and on a recompute: drafting, and the copy bias toward the quoted
    passage (quoted only when it is on, so the two rows without it keep the question alone)."""
    document = kvqa.document_from_text(TEXT)
    config = kvqa.Config.of(chunk_size=128, max_new_tokens=24)
    doc = kvqa.prefill(lm, document, config=config)
    before = snapshot(doc)
    if copy_bias and lm.name == "tiny-llama":
        copy_bias *= 10  # the random model's logits lie further apart than a trained model's: 2 changes none of them
    copying = {"copy_bias": copy_bias, "quote_passages": 1} if copy_bias else {}
    asked = QUESTIONS if lm.name == "tiny-llama" else QUESTIONS[:1] if copy_bias else QUESTIONS[::2]
    biased = []  # with the copy bias on: whether it changed the answer (so the rule is tested, not idle)
    for question in asked:  # each recompute on the real model reads the whole text: a few questions there
        cached = kvqa.answer(lm, doc, question, draft_tokens=draft, **copying)
        if copy_bias:
            unbiased = kvqa.answer(lm, doc, question, draft_tokens=draft, quote_passages=1)
            biased.append(unbiased.token_ids != cached.token_ids)
        whole = kvqa.answer_without_cache(lm, document, question, config=config, prompt=doc.prompt,
                                          **copying)  # never drafts
        assert cached.token_ids == whole.token_ids, question
        assert cached.text == whole.text
        assert cached.timings.new_tokens == len(cached.token_ids) > 0
        assert cached.timings.question_tokens < whole.timings.question_tokens
        assert_unchanged(doc, before)
    assert any(biased) or not copy_bias
    assert doc.cache_bytes == bytes_per_token(lm.config, lm.dtype) * (doc.tokens + config.limits.reserve_tokens)


@pytest.mark.parametrize("name,draft", [("tiny-bfloat16", 0), ("tiny-float16", 0), ("smollm2-bfloat16", 0),
                                        ("smollm2-bfloat16", 6)])
def test_in_half_precision_cached_answers_are_bit_identical_to_a_recompute_in_the_same_chunks(half_lms, name, draft):
    """In bf16/fp16 a single forward over the whole prompt rounds differently from the chunked prefill
    (different matmul shapes), so only the recompute in the same chunks is promised, and it holds bit for bit."""
    lm = half_lms[name]
    tiny = name.startswith("tiny")  # the real model in bfloat16 is slow on a CPU: a shorter text, two questions
    document = kvqa.document_from_text(TEXT if tiny else SHORT_TEXT)
    config = kvqa.Config.of(chunk_size=128, max_new_tokens=24)
    doc = kvqa.prefill(lm, document, config=config)
    before = snapshot(doc)
    assert doc.cache.tensors()[0][0].dtype == lm.dtype != torch.float32
    assert doc.tokens > 3 * config.chunk_size  # read in several chunks
    for question in QUESTIONS if tiny else QUESTIONS[::2]:
        cached = kvqa.answer(lm, doc, question, draft_tokens=draft)
        again = kvqa.answer_without_cache(lm, document, question, config=config, prompt=doc.prompt,
                                          same_schedule=True, draft_tokens=draft)
        assert cached.token_ids == again.token_ids and cached.text == again.text, question
        assert_unchanged(doc, before)
    assert_question_logits_as_in_the_same_chunks(lm, doc, QUESTIONS[0], config.chunk_size)


def test_the_promise_follows_the_precision(default_lm, half_lms):
    assert kvqa.LocalEngine(kvqa.Config(), lm=default_lm).info.exact_vs_recompute
    half = kvqa.LocalEngine(kvqa.Config(), lm=half_lms["smollm2-bfloat16"]).info
    assert not half.exact_vs_recompute and "same chunks" in half.guarantee and "bfloat16" in half.guarantee


def test_same_question_twice_gives_the_same_answer(tiny_lm):
    doc = kvqa.prefill(tiny_lm, kvqa.document_from_text(TEXT), config=kvqa.Config.of(max_new_tokens=16))
    first = kvqa.answer(tiny_lm, doc, "Where is the bridge?")
    kvqa.answer(tiny_lm, doc, "Something else entirely, to disturb the reserve?")
    assert kvqa.answer(tiny_lm, doc, "Where is the bridge?").token_ids == first.token_ids


@pytest.mark.parametrize("chunk_size", [1, 7, 100, 4096])
def test_chunked_prefill_logits_match_one_forward(tiny_lm, chunk_size):
    """Chunking changes the shapes of the matmuls, so fp32 logits may differ in the last bits: this is the bound."""
    doc = kvqa.prefill(tiny_lm, kvqa.document_from_text(TEXT[:1500]), config=kvqa.Config.of(chunk_size=chunk_size))
    ids = list(doc.ids) + doc.prompt.suffix_ids("What is the secret word?")
    with torch.no_grad():
        one = run_chunks(tiny_lm, ids, new_cache(tiny_lm.config, len(ids)), chunk_size=len(ids))
        cached = run_chunks(tiny_lm, ids[doc.tokens:], doc.cache, chunk_size=len(ids))
    doc.cache.rollback(doc.tokens)
    diff = (one - cached).abs().max().item()
    assert diff < 1e-4, f"max abs logit difference {diff:.2e}"
    assert int(one.argmax()) == int(cached.argmax())


@pytest.mark.parametrize("group,new,past", [(3, 2, 1), (3, 7, 100), (3, 64, 300), (1, 5, 40)])
@pytest.mark.parametrize("dtype,tolerance", [(torch.float32, 1e-5), (torch.bfloat16, 2e-2)])
def test_new_tokens_after_cached_ones_attend_as_through_the_causal_mask(group, new, past, dtype, tolerance):
    """kvqa.model.attention.attend_after_past (no mask: cached keys in one pass, new ones in a causal one, merged)
    against
    SDPA with the mask transformers makes for the same tokens: the same attention, up to rounding."""
    from transformers.masking_utils import sdpa_mask

    from kvqa.model.attention import attend_after_past

    torch.manual_seed(0)
    kv_heads, d = 2, 16
    query = torch.randn(1, kv_heads * group, new, d, dtype=dtype)
    key, value = (torch.randn(1, kv_heads, past + new, d, dtype=dtype) for _ in range(2))
    mask = sdpa_mask(batch_size=1, q_length=new, kv_length=past + new, q_offset=past)
    assert mask is not None and not mask[0, 0, 0, past + 1:].any()  # the first new token sees no later one
    expected = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask, scale=0.25,
                                                                enable_gqa=group > 1)
    got = attend_after_past(query, key, value, 0.25)
    assert got.dtype == dtype and got.shape == expected.shape
    assert (got.float() - expected.float()).abs().max().item() < tolerance


def test_the_mask_is_left_out_only_where_new_tokens_plainly_follow_cached_ones():
    from transformers.masking_utils import sdpa_mask

    from kvqa.model.attention import causal_mask

    assert causal_mask(batch_size=1, q_length=4, kv_length=4) is None  # no past: SDPA's causal kernel
    assert causal_mask(batch_size=1, q_length=3, kv_length=10, q_offset=7) is None  # after 7 cached: split
    padded = torch.tensor([[0, 1, 1, 1, 1, 1, 1, 1, 1, 1]], dtype=torch.bool)
    for kwargs in ({"q_length": 3, "kv_length": 12, "q_offset": 7},  # a fixed-shape cache: later slots hidden
                   {"q_length": 3, "kv_length": 10, "q_offset": 7, "attention_mask": padded}):
        made = causal_mask(batch_size=1, **kwargs)
        assert made is not None and torch.equal(made, sdpa_mask(batch_size=1, **kwargs))


def test_later_prefill_chunks_take_the_split_attention(tiny_lm, monkeypatch):
    import kvqa.model.attention

    calls = []
    split = kvqa.model.attention.attend_after_past
    monkeypatch.setattr(kvqa.model.attention, "attend_after_past",
                        lambda *args, **kw: calls.append(args[0].shape) or split(*args, **kw))
    doc = kvqa.prefill(tiny_lm, kvqa.document_from_text(TEXT[:1500]), config=kvqa.Config.of(chunk_size=100))
    chunks = -(-doc.tokens // 100)
    assert chunks > 2 and len(calls) == (chunks - 1) * tiny_lm.config.num_hidden_layers
    assert calls[0][2] == 100  # (B, H, T, D): a whole chunk of new tokens


def test_stopping_mid_answer_leaves_the_cache_intact(tiny_lm):
    doc = kvqa.prefill(tiny_lm, kvqa.document_from_text(TEXT), config=kvqa.Config.of(max_new_tokens=32))
    before = snapshot(doc)
    fresh = kvqa.answer(tiny_lm, doc, "Tell me about the museum.")
    events = kvqa.stream(tiny_lm, doc, "A question that will be stopped.", temperature=0)
    next(events), next(events)
    events.close()  # what Gradio does on Stop or when the client goes away
    assert_unchanged(doc, before)
    assert not doc.lock.locked()
    assert kvqa.answer(tiny_lm, doc, "Tell me about the museum.").token_ids == fresh.token_ids


def test_an_error_inside_the_model_leaves_the_cache_intact(tiny_lm, monkeypatch):
    doc = kvqa.prefill(tiny_lm, kvqa.document_from_text(TEXT), config=kvqa.Config.of(max_new_tokens=16))
    before = snapshot(doc)
    fresh = kvqa.answer(tiny_lm, doc, "Where is the bridge?")
    inside = tiny_lm.model.lm_head  # called by the forward and by the written-out step alike
    real_forward, calls = inside.forward, []

    def failing_forward(*args, **kwargs):
        calls.append(1)
        if len(calls) == 3:  # the third pass through the model (question, then decode steps or drafted checks)
            raise RuntimeError("simulated failure")
        return real_forward(*args, **kwargs)

    monkeypatch.setattr(inside, "forward", failing_forward)
    with pytest.raises(RuntimeError, match="simulated"):
        kvqa.answer(tiny_lm, doc, "Where is the bridge?")
    monkeypatch.undo()
    assert len(calls) == 3
    assert_unchanged(doc, before)
    assert kvqa.answer(tiny_lm, doc, "Where is the bridge?").token_ids == fresh.token_ids


def test_a_second_question_while_one_streams_is_refused_not_mixed(tiny_lm):
    doc = kvqa.prefill(tiny_lm, kvqa.document_from_text(TEXT), config=kvqa.Config.of(max_new_tokens=16))
    first = kvqa.stream(tiny_lm, doc, "First?")
    next(first)
    with pytest.raises(kvqa.BusyError):
        kvqa.answer(tiny_lm, doc, "Second?")
    first.close()
    second = kvqa.answer(tiny_lm, doc, "Second?")
    fresh = kvqa.prefill(tiny_lm, kvqa.document_from_text(TEXT), config=kvqa.Config.of(max_new_tokens=16))
    alone = kvqa.answer(tiny_lm, fresh, "Second?")
    assert second.token_ids == alone.token_ids  # nothing of the first mixed in
    assert doc.cache.length == doc.tokens and second.timings.question_tokens == alone.timings.question_tokens


def test_llama3_template_exact_across_a_date_change(tiny_llama3_lm, monkeypatch):
    """Prefill 'yesterday', ask 'today': the cached prefix still matches, and answers equal the whole prompt's."""
    import kvqa.prompt

    monkeypatch.setattr(kvqa.prompt, "today", lambda: "28 Nov 2026")
    document = kvqa.document_from_text(TEXT)
    config = kvqa.Config.of(max_new_tokens=16)
    doc = kvqa.prefill(tiny_llama3_lm, document, config=config)
    monkeypatch.setattr(kvqa.prompt, "today", lambda: "29 Nov 2026")
    assert "28 Nov 2026" in tiny_llama3_lm.tokenizer.decode(doc.ids)
    for question in QUESTIONS[:3]:
        cached = kvqa.answer(tiny_llama3_lm, doc, question)
        whole = kvqa.answer_without_cache(tiny_llama3_lm, document, question, config=config, prompt=doc.prompt)
        assert cached.token_ids == whole.token_ids


def test_sampling_with_a_seed_is_repeatable(tiny_lm):
    doc = kvqa.prefill(tiny_lm, kvqa.document_from_text(TEXT), config=kvqa.Config.of(max_new_tokens=12))
    a = kvqa.answer(tiny_lm, doc, "Anything?", temperature=1.0, seed=7)
    b = kvqa.answer(tiny_lm, doc, "Anything?", temperature=1.0, seed=7)
    assert a.token_ids == b.token_ids
    greedy = kvqa.answer(tiny_lm, doc, "Anything?").token_ids
    others = {kvqa.answer(tiny_lm, doc, "Anything?", temperature=1.0, seed=s).token_ids for s in range(4)}
    assert any(o != greedy for o in others)  # the temperature is used: sampling is not greedy decoding
    assert len(others) > 1  # and the seed is used: other seeds, other answers
