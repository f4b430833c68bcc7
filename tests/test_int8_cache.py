"""The int8 cache (kvqa.model.kv_cache with kvqa.model.kv_scales): keys and values held as int8 multiples of a scale
per layer, key/value head and channel, a quarter of float32's bytes; read as held by the decode attention and the C
layer loop (the same bits as the Python step); cached greedy answers bit for bit a recompute in the same chunks with
the same form; stored, composed and restored as the same integers."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import kvqa
from conftest import tiny_llama
from kvqa.cache.restore import cache_key
from kvqa.cache.store import KVStore
from kvqa.model.kernels.decode_attention import SDPA, attend_one, choose_decode_attention
from kvqa.model.kv_cache import Int8Scales, KVCache, bytes_per_token, cache_from_tensors, new_cache, to_int8
from kvqa.model.kv_scales import FILE, HEADROOM, measure_peaks, measured_scales, scales_from
from kvqa.model.loading import with_int8_cache
from test_exactness import QUESTIONS, TEXT
from test_llama_layer import needs_c, python_loop
from test_llama_step import steps_both_ways


@pytest.fixture(scope="module")
def lm8(default_lm):
    """The tiny Llama, int8 weights on kvqa's kernels, its cache in int8 by scales measured on TEXT."""
    lm = tiny_llama(default_lm.tokenizer, weights="int8")
    ids = lm.tokenizer(TEXT)["input_ids"][:200]
    return with_int8_cache(lm, scales_from(measure_peaks(lm.model, ids)))


def test_values_are_held_as_rounded_multiples_of_their_channels_scale():
    scales = Int8Scales(torch.tensor([0.5, 2.0]).view(1, 1, 1, 2), torch.tensor([1.0, 0.25]).view(1, 1, 1, 2))
    cache = new_cache_of(scales, capacity=4)
    layer = cache.layers[0]
    keys = torch.tensor([[[[0.74, 3.0], [-0.25, 1000.0]]]])  # 1.48 -> 1; 1.5 -> 2 (to even); -0.5 -> -0 ; clamped
    values = torch.tensor([[[[2.5, -0.1], [3.5, -1000.0]]]])
    layer.lazy_initialization(keys, values)
    layer.write(0, keys, values)
    layer.length = 2
    held_keys, held_values = layer.held(0, 2)
    assert held_keys.dtype == torch.int8
    assert held_keys.flatten().tolist() == [1, 2, 0, 127]
    assert held_values.flatten().tolist() == [2, 0, 4, -127]  # 2.5 -> 2 and 3.5 -> 4: to even
    keys_read, values_read = layer.read(0, 2)
    assert torch.equal(keys_read, held_keys.float() * scales.keys)
    assert torch.equal(values_read, held_values.float() * scales.values)
    assert torch.equal(layer.keys, keys_read) and torch.equal(layer.values, values_read)  # the filled part, widened


def new_cache_of(scales: Int8Scales, capacity: int) -> KVCache:
    return KVCache(1, capacity, dtype=torch.int8, scales=[scales])


@settings(max_examples=60, deadline=None)
@given(st.lists(st.floats(-300, 300, allow_nan=False, width=32), min_size=1, max_size=16).map(lambda v: v * 4),
       st.floats(0.01, 5.0))
def test_int8_rounding_is_within_half_a_step_and_clamps_beyond_127_steps(values, step):
    x = torch.tensor(values).view(1, 1, -1, 4)
    scale = torch.full((1, 1, 1, 4), step)
    q = to_int8(x, scale)
    back = q.float() * scale
    inside = x.abs() <= 127 * step
    assert torch.all((back - x).abs()[inside] <= step / 2 * (1 + 1e-5))
    assert torch.all(q[~inside].abs() == 127)


def test_an_int8_cache_is_a_quarter_of_float32s_bytes(lm8):
    doc = kvqa.prefill(lm8, kvqa.document_from_text(TEXT))
    float_bytes = bytes_per_token(lm8.config, torch.float32) * (doc.tokens + kvqa.Config().limits.reserve_tokens)
    assert doc.cache.tensors()[0][0].dtype == torch.int8
    assert doc.cache.nbytes == doc.cache_bytes == float_bytes // 4


@pytest.mark.parametrize("kv,group,d,n", [(2, 2, 32, 1), (2, 3, 64, 37), (1, 6, 128, 600), (2, 7, 64, 1100)])
def test_the_kernel_reads_int8_as_sdpa_reads_it_widened(kv, group, d, n):
    torch.manual_seed(n)
    query = torch.randn(1, kv, group, d) * 0.02  # as a query times the keys' scales
    keys = torch.randint(-127, 128, (1, kv, n, d), dtype=torch.int8)
    values = torch.randint(-127, 128, (1, kv, n, d), dtype=torch.int8)
    kernel = choose_decode_attention()
    expected = SDPA_widened(query, keys, values)
    got = attend_one(query, keys, values, d ** -0.5)
    assert torch.allclose(got, expected, atol=2e-3, rtol=1e-4)  # values up to 127
    if kernel is not SDPA:
        assert kernel.takes(query, keys, values)


def SDPA_widened(query, keys, values):
    return torch.nn.functional.scaled_dot_product_attention(query, keys.float(), values.float(),
                                                            scale=query.shape[-1] ** -0.5)


@needs_c
def test_the_c_loop_writes_and_reads_an_int8_cache_as_the_python_step_bit_for_bit(lm8):
    assert lm8.step.in_c is not None and lm8.step.in_c.cache_dtype == torch.int8 == lm8.kv_dtype
    for prompt_tokens in (1, 45):
        (in_c, c_cache), _ = steps_both_ways(lm8, prompt_tokens=prompt_tokens, steps=8)
        (in_python, python_cache), _ = steps_both_ways(python_loop(lm8), prompt_tokens=prompt_tokens, steps=8)
        assert all(torch.equal(a, b) for a, b in zip(in_c, in_python))
        assert all(torch.equal(k, k0) and torch.equal(v, v0)
                   for (k, v), (k0, v0) in zip(c_cache, python_cache))
        assert c_cache[0][0].dtype == torch.int8


def test_the_step_decodes_as_the_forward_does_on_an_int8_cache(lm8):
    """The forward reads the keys widened (to its cache dtype: bfloat16 where long products run in bfloat16), the step
    reads them as held (the query times the scales): the same attention up to that rounding, the integers written
    at most a step apart."""
    (step_logits, step_cache), (forward_logits, forward_cache) = steps_both_ways(lm8, prompt_tokens=45, steps=8)
    in_float32 = lm8.kv_scales[0].widened == torch.float32
    tolerance = 1e-4 if in_float32 else 0.15  # bfloat16 keeps 8 bits: a logit of about 7 moves by a few hundredths
    assert all(torch.allclose(a, b, atol=tolerance, rtol=tolerance) for a, b in zip(step_logits, forward_logits))
    if in_float32:
        assert [int(a.argmax()) for a in step_logits] == [int(b.argmax()) for b in forward_logits]
    for (k, v), (k0, v0) in zip(step_cache, forward_cache):
        assert (k.int() - k0.int()).abs().max() <= 1 and (v.int() - v0.int()).abs().max() <= 1
        assert (k != k0).float().mean() < 0.05  # the prompt's 45 the same, the 8 steps' a few apart


@pytest.mark.parametrize("draft", [0, 6])
def test_cached_int8_answers_are_bit_identical_to_a_recompute_in_the_same_chunks(lm8, draft):
    config = kvqa.Config.of(chunk_size=128, max_new_tokens=24)
    document = kvqa.document_from_text(TEXT)
    doc = kvqa.prefill(lm8, document, config=config)
    before = [tuple(t.clone() for t in pair) for pair in doc.cache.tensors()]
    assert doc.tokens > 2 * config.chunk_size
    for question in QUESTIONS:
        cached = kvqa.answer(lm8, doc, question, draft_tokens=draft)
        again = kvqa.answer_without_cache(lm8, document, question, config=config, prompt=doc.prompt,
                                          same_schedule=True, draft_tokens=draft)
        assert cached.token_ids == again.token_ids and cached.text == again.text, question
        assert all(torch.equal(a, b) and torch.equal(c, e) for (a, c), (b, e) in zip(doc.cache.tensors(), before))


def test_the_promise_names_the_int8_cache(lm8):
    info = kvqa.LocalEngine(kvqa.Config(), lm=lm8).info
    assert not info.exact_vs_recompute and info.precision.endswith("; int8 cache")
    assert "int8" in str(info.guarantee) and "one scale a channel" in str(info.guarantee)


def test_a_stored_int8_cache_restores_the_same_integers_under_its_scales_key(lm8, tmp_path):
    document = kvqa.document_from_text(TEXT)
    doc = kvqa.prefill(lm8, document)
    key = cache_key(lm8, document, weights="w")
    assert "cache int8" in key.dtype
    other = dataclasses.replace(lm8, kv_scales=[Int8Scales(s.keys * 2, s.values) for s in lm8.kv_scales])
    assert cache_key(other, document, weights="w") != key  # other scales: other integers, another file
    store = KVStore(tmp_path, limit_bytes=1 << 30)
    assert store.write(key, doc.ids, doc.prompt.date_string, doc.cache.tensors(), read_s=1.0)
    stored = store.get(key)
    assert stored is not None and stored.ids == doc.ids
    restored = cache_from_tensors(lm8.config, stored.tensors, doc.cache.capacity, lm8.kv_scales)
    assert all(torch.equal(a, b) and torch.equal(c, e) and a.dtype == torch.int8
               for (a, c), (b, e) in zip(doc.cache.tensors(), restored.tensors()))
    question = QUESTIONS[0]
    from_restored = dataclasses.replace(doc, cache=restored)
    assert kvqa.answer(lm8, from_restored, question).token_ids == kvqa.answer(lm8, doc, question).token_ids


def test_scales_are_kept_beside_the_copy_and_read_back(default_lm, tmp_path):
    lm = tiny_llama(default_lm.tokenizer)
    first = measured_scales(lm.model, lm.tokenizer, tmp_path)
    assert (tmp_path / FILE).exists()
    again = measured_scales(lm.model, lm.tokenizer, tmp_path)
    assert len(first) == len(again) == lm.config.num_hidden_layers
    assert all(torch.equal(a.keys, b.keys) and torch.equal(a.values, b.values) for a, b in zip(first, again))
    kv, d = lm.config.num_key_value_heads, lm.config.hidden_size // lm.config.num_attention_heads
    assert first[0].keys.shape == (1, kv, 1, d)


def test_a_channels_scale_is_headroom_times_its_peak_over_127(default_lm):
    lm = tiny_llama(default_lm.tokenizer)
    ids = lm.tokenizer(TEXT)["input_ids"][:100]
    peaks = measure_peaks(lm.model, ids, chunk=32)
    cache = new_cache(lm.config, len(ids))
    with torch.inference_mode():
        lm.model(input_ids=torch.tensor([ids]), cache=cache, use_cache=True)
    keys, values = cache.layers[1].read(0, len(ids))
    assert torch.allclose(peaks[1][0], keys.abs().amax(dim=2, keepdim=True), rtol=1e-5)
    scales = scales_from(peaks)
    assert torch.allclose(scales[1].values, peaks[1][1].clamp_min(1e-6) * HEADROOM / 127)
    held = to_int8(keys, scales[1].keys)
    assert held.abs().max() <= 127 / HEADROOM + 1  # what was measured fits in half the range


def test_auto_holds_the_offline_models_int8_weights_cache_in_int8_on_a_cpu():
    from kvqa.errors import ModelError
    from kvqa.model.loading import choose_kv_cache

    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    chosen = {(model, weights, device.type, compiled): choose_kv_cache("auto", model=model, weights=weights,
                                                                     device=device, compiled=compiled)
              for model in ("Qwen2.5-Coder-1.5B-Instruct", "meta-llama/Llama-3.2-3B-Instruct")
              for weights in ("int8", "fp32") for device in (cpu, cuda) for compiled in (False, True)}
    assert {k for k, form in chosen.items() if form == "int8"} == {("Qwen2.5-Coder-1.5B-Instruct", "int8", "cpu",
                                                                   False)}
    assert choose_kv_cache("model", model="x", weights="int8", device=cpu, compiled=False) == "model"
    assert choose_kv_cache("int8", model="x", weights="fp32", device=cpu, compiled=False) == "int8"
    with pytest.raises(ModelError) as refused:
        choose_kv_cache("int4", model="x", weights="int8", device=cpu, compiled=False)
    assert "auto, int8 or model" in str(refused.value)


def test_a_sliding_window_layer_attends_its_window_of_int8_as_held(default_lm):
    """Gemma 3's step on an int8 cache past its 16-position window: each sliding layer reads only its window, the
    same attention as the forward (which reads the window widened) up to rounding, the same greedy tokens; the cached
    answer bit for bit its recompute in the same chunks."""
    from test_llama_step import tiny_gemma

    lm = tiny_gemma(default_lm.tokenizer)
    lm = with_int8_cache(lm, scales_from(measure_peaks(lm.model, lm.tokenizer(TEXT)["input_ids"][:200])))
    assert type(lm.step).__name__ == "GemmaStep" and lm.kv_dtype == torch.int8
    (step_logits, step_cache), (forward_logits, _) = steps_both_ways(lm, prompt_tokens=40, steps=12)
    assert all(torch.allclose(a, b, atol=1e-4, rtol=1e-4) for a, b in zip(step_logits, forward_logits))
    assert step_cache[0][0].dtype == torch.int8 and step_cache[0][0].shape[2] == 52  # every position kept
    layer = lm.new_cache(60).layers[0]  # a sliding layer
    keys = torch.randn(1, 2, 30, 32)
    layer.lazy_initialization(keys, keys)
    layer.write(0, keys, keys)
    layer.length = 30
    query = torch.randn(1, 2, 2, 32)
    held_keys, held_values = layer.held(14, 30)  # its window: the last 16 positions
    expected = attend_one(query * layer.scales.keys, held_keys, held_values, 32 ** -0.5) * layer.scales.values
    assert layer.window == 16 and torch.equal(layer.attend(query, 30, 32 ** -0.5), expected)
    config = kvqa.Config.of(chunk_size=64, max_new_tokens=16)
    document = kvqa.document_from_text(TEXT[:600])
    doc = kvqa.prefill(lm, document, config=config)
    cached = kvqa.answer(lm, doc, QUESTIONS[1])
    again = kvqa.answer_without_cache(lm, document, QUESTIONS[1], config=config, prompt=doc.prompt, same_schedule=True)
    assert cached.token_ids == again.token_ids


def test_int8_parts_compose_to_the_same_integers_their_keys_moved(lm8):
    """Composing reads the runs widened and writes them back: the first part's integers and the second's values come
    back the same (a bfloat16 widening is within half a step of the integer), the second's keys moved by their
    rotation, within a step of the moved keys rounded."""
    from kvqa.generation.compose import compose_reads, edges, shift_keys
    from test_compose import FIRST, SECOND

    a = kvqa.prefill(lm8, kvqa.document_from_text(FIRST, name="a.txt"))
    b = kvqa.prefill(lm8, kvqa.document_from_text(SECOND, name="b.txt"))
    both = compose_reads(lm8, [a, b], kvqa.document_from_text(FIRST + "\n\n" + SECOND, name="ab.txt"))
    head, tail = edges(a.prompt)
    body_a, body_b = len(a.ids) - head - tail, len(b.ids) - head - tail
    first, moved = slice(0, head + body_a), slice(head + body_a, head + body_a + body_b)
    for (ka, va), (kb, vb), (kc, vc), scales in zip(a.cache.tensors(), b.cache.tensors(), both.cache.tensors(),
                                                    lm8.kv_scales):
        assert kc.dtype == torch.int8
        assert torch.equal(kc[:, :, first], ka[:, :, first]) and torch.equal(vc[:, :, first], va[:, :, first])
        assert torch.equal(vc[:, :, moved], vb[:, :, head: head + body_b])
        shifted = shift_keys(lm8, kb[:, :, head: head + body_b].float() * scales.keys, body_a)
        assert (kc[:, :, moved].int() - to_int8(shifted, scales.keys).int()).abs().max() <= 1
