"""int8 weights (kvqa.model.weights): each row one byte a weight and a scale, rows independent of one another bit for
bit,
the decode step as the forward, answers bit for bit a recompute in the same chunks, a clear refusal where int8 cannot
run, and the form named in the store's key, the engine's description and the bench."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import kvqa
from conftest import tiny_llama
from kvqa.bench.report import format_table
from kvqa.bench.run import QUESTIONS, SAMPLE_DOCUMENT, parse_weights, run_bench, side_by_side
from kvqa.cache.store import weights_fingerprint
from kvqa.engines.local import LocalEngine
from kvqa.errors import KvqaError, ModelError
from kvqa.model import weights as weights_module
from kvqa.model.attention import grouped_sdpa
from kvqa.model.kernels.decode_attention import SDPA, DecodeAttention
from kvqa.model.kernels.int8_kernel import TORCH, choose_kernel
from kvqa.model.weights import (
    TO_BFLOAT16,
    TO_BFLOAT16_FROM_64,
    TO_FLOAT32,
    TO_FLOAT32_BFLOAT16_CACHE,
    Int8Embedding,
    Int8Linear,
    choose_weights,
    choose_widening,
    int8_rows,
    product,
    products_of,
    weight_bytes,
)
from test_exactness import assert_question_logits_as_in_the_same_chunks
from test_llama_step import steps_both_ways, tiny_gemma

TEXT = ("The secret word is pelican. The museum opens at 9 am on weekdays and at noon on Sundays. "
        + " ".join(f"Note {i}: the bridge near town {i} is {i * 3} metres long." for i in range(40))
        + "\n中文段落：文档只需要读一次。")
QUESTIONS_ASKED = ["What is the secret word?", "When does the museum open on Sundays?", "这份文件讲了什么？"]


@pytest.fixture(scope="session")
def tiny_int8(default_lm) -> kvqa.LoadedModel:
    return tiny_llama(default_lm.tokenizer, weights="int8")


def test_int8_rows_are_each_row_rounded_to_its_own_scale():
    torch.manual_seed(0)
    weight = torch.randn(64, 96) * torch.logspace(-3, 1, 64)[:, None]  # rows of very different sizes
    rows, scales = int8_rows(weight)
    assert rows.dtype == torch.int8 and scales.dtype == torch.bfloat16 and scales.shape == (64,)
    assert int(rows.abs().max()) <= 127
    error = (rows.float() * scales.float()[:, None] - weight).abs()
    assert bool((error <= scales.float()[:, None] * 0.5 + 1e-7 + weight.abs() * 2**-7).all())  # half a step
    assert float(error.max(dim=1).values[0]) < 1e-4  # the smallest row keeps its own precision


@pytest.mark.parametrize("group", [None, 32])
def test_int8_rows_are_the_same_bits_in_any_blocks_of_rows(group):
    """int8_rows works through blocks of rows; every row's numbers are its own, so any block size (one that does not
    divide the rows included) gives what the whole matrix in one go gives."""
    torch.manual_seed(0)
    weight = torch.randn(1000, 64) * torch.logspace(-3, 1, 1000)[:, None]
    runs = weight.view(1000, 64 // group if group else 1, -1)  # the whole matrix at once
    scales = (runs.abs().amax(dim=2) / 127).clamp(min=1e-12).to(torch.bfloat16)
    rows = torch.round(runs / scales.float()[:, :, None]).clamp(-127, 127).to(torch.int8).view(1000, 64)
    scales = scales if group else scales[:, 0]
    for block in (1, 7, 256, 4096):
        blocked_rows, blocked_scales = int8_rows(weight, group, block=block)
        assert torch.equal(blocked_rows, rows) and torch.equal(blocked_scales, scales)
        assert blocked_scales.is_contiguous()


def test_grouped_int8_rows_round_each_run_to_its_own_scale():
    """With a group, each run of 32 weights of a row has its own scale: a row whose first weights are 1,000 times
    its last keeps the small ones' precision, which one scale a row loses."""
    torch.manual_seed(0)
    weight = torch.randn(8, 128) * torch.cat([torch.full((32,), 1.0), torch.full((96,), 1e-3)])
    rows, scales = int8_rows(weight, 32)
    assert rows.dtype == torch.int8 and scales.dtype == torch.bfloat16 and scales.shape == (8, 4)
    grouped = (rows.float().view(8, 4, 32) * scales.float()[:, :, None]).view(8, 128)
    per_row = int8_rows(weight)
    per_row = per_row[0].float() * per_row[1].float()[:, None]
    small = slice(32, 128)
    assert (grouped - weight)[:, small].abs().max() < 5e-5 < 1e-3 < (per_row - weight)[:, small].abs().max()
    embedding = Int8Embedding(rows, scales, None)  # the embedding reads the same runs
    assert torch.equal(embedding(torch.tensor([3, 5])), grouped[[3, 5]])
    linear = Int8Linear(rows, scales, TO_FLOAT32)
    x = torch.randn(TO_FLOAT32.rows + 1, 128)  # a long product: the rows widened with their runs' scales
    assert torch.equal(linear(x), F.linear(x, grouped))
    torch.testing.assert_close(linear(x[:1]), linear(x)[:1], rtol=1e-5, atol=1e-5)  # and a short one


WIDENINGS = pytest.mark.parametrize("widening", [TO_FLOAT32, TO_BFLOAT16], ids=str)
KERNELS = pytest.mark.parametrize("kernel", [choose_kernel(), TORCH], ids=str)  # this CPU's, and torch's


@KERNELS
@WIDENINGS
@pytest.mark.parametrize("fewer", [0, 8, 1])  # rows = 1, 8 (a drafted step), widening.rows - 1
def test_each_output_row_depends_on_its_own_input_row_alone(widening, fewer, kernel):
    """Below the widening's rows (a decode step, a drafted run) a row's output is the same bits whatever rows come
    with it: a chunk and a token at a time agree."""
    torch.manual_seed(1)
    linear = Int8Linear(*int8_rows(torch.randn(300, 64)), widening, kernel)
    rows = {0: 1, 8: 8, 1: widening.rows - 1}[fewer]
    x = torch.randn(rows, 64)
    together = linear(x)
    alone = torch.cat([linear(x[i: i + 1]) for i in range(rows)])
    assert together.dtype == torch.float32 and together.shape == (rows, 300)
    assert torch.equal(together, alone)


@WIDENINGS
def test_long_products_use_the_same_int8_rows_widened(widening):
    torch.manual_seed(2)
    rows, scales = int8_rows(torch.randn(50, 64))
    linear = Int8Linear(rows, scales, widening)
    x = torch.randn(widening.rows + 3, 64)
    if widening.dtype == torch.float32:  # float32's product on the weights
        assert torch.equal(linear(x), F.linear(x, rows.float() * scales.float()[:, None]))
    else:  # bfloat16's product on the int8 rows themselves (exact in bfloat16), then each output column's scale
        assert torch.equal(rows.to(torch.bfloat16).float(), rows.float())
        expected = F.linear(x.to(torch.bfloat16), rows.to(torch.bfloat16)).float() * scales.float()
        assert torch.equal(linear(x), expected)
    exact = F.linear(x, rows.float() * scales.float()[:, None])
    assert torch.allclose(linear(x), exact, rtol=0.02, atol=0.05)
    short = linear(x[:1])  # the int8 kernel (torch's rounds the input to bfloat16): close, not equal
    assert torch.allclose(short, linear(x)[:1], rtol=0.02, atol=0.05)


@WIDENINGS
@pytest.mark.parametrize("group", [None, 16])
def test_a_long_product_widened_a_block_of_rows_at_a_time_is_the_whole_ones(widening, group, monkeypatch):
    """by_blocks: no widened copy of the whole matrix (the last block shorter), each block's product the whole's
    within rounding."""
    torch.manual_seed(3)
    rows, scales = int8_rows(torch.randn(50, 64), group)
    linear = Int8Linear(rows, scales, widening)
    x = torch.randn(widening.rows + 5, 64)
    whole = linear(x)
    monkeypatch.setattr(weights_module, "BLOCK_WEIGHTS", 64 * 8)  # blocks of 8 rows: 6 and a rest of 2
    widened_rows = []
    original = weights_module.F.linear
    monkeypatch.setattr(weights_module.F, "linear",
                        lambda a, w, *rest: widened_rows.append(w.shape[0]) or original(a, w, *rest))
    blocked = linear(x)
    torch.testing.assert_close(blocked, whole, rtol=1e-2, atol=1e-3)  # a bfloat16 output: ulps apart at most
    assert torch.equal(blocked[:, 8:16], linear(x)[:, 8:16])  # the same bits again: one rule, run twice
    assert widened_rows == ([8] * 6 + [2]) * 2


@pytest.mark.parametrize("attention", [DecodeAttention("kvqa's", run=lambda q, k, v, s: q), SDPA], ids=str)
def test_the_widening_is_bfloat16_where_the_cpu_multiplies_bfloat16_fast(monkeypatch, attention):
    """AMX or AVX-512's bfloat16: bfloat16 products and cache; else float32 products, with a bfloat16 cache where
    kvqa's decode attention reads one (AVX2), a float32 one where it does not run."""
    monkeypatch.setattr(weights_module, "choose_decode_attention", lambda: attention)
    neither = TO_FLOAT32_BFLOAT16_CACHE if attention.run else TO_FLOAT32
    for amx, avx512_bf16, expected in ((True, True, TO_BFLOAT16), (True, False, TO_BFLOAT16),
                                       (False, True, TO_BFLOAT16_FROM_64), (False, False, neither)):
        monkeypatch.setattr(torch.cpu, "_is_amx_tile_supported", lambda amx=amx: amx)
        monkeypatch.setattr(torch.cpu, "_is_avx512_bf16_supported", lambda bf16=avx512_bf16: bf16)
        assert choose_widening() == expected
        assert choose_widening(group=32) == TO_FLOAT32  # a scale a run of 32: no exact bfloat16 product
    assert str(TO_BFLOAT16) == "bfloat16 products from 16 rows, bfloat16 cache"
    assert str(TO_BFLOAT16_FROM_64) == "bfloat16 products from 64 rows, bfloat16 cache"
    assert str(TO_FLOAT32) == "float32 products from 128 rows"
    assert str(TO_FLOAT32_BFLOAT16_CACHE) == "float32 products from 128 rows, bfloat16 cache, attention in float32"


def test_bfloat16s_widening_holds_the_cache_in_bfloat16(tiny_int8_widened, monkeypatch):
    """With bfloat16's widening the cache holds its keys and values in bfloat16 (half the bytes, the memory check's
    count the same) and every read attends in bfloat16, the output widened back; with float32's, float32; with
    float32's and a bfloat16 cache (AVX2), the cache is bfloat16 and many tokens' attention widens it to float32."""
    sdpa, seen = torch.nn.functional.scaled_dot_product_attention, []
    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention",
                        lambda q, k, v, **kw: seen.append((q.dtype, k.dtype)) or sdpa(q, k, v, **kw))
    for widening in (TO_FLOAT32, TO_BFLOAT16, TO_FLOAT32_BFLOAT16_CACHE):
        lm, dtype = tiny_int8_widened[str(widening)], widening.cache
        assert lm.dtype == torch.float32 and lm.kv_dtype == dtype
        seen.clear()
        doc = kvqa.prefill(lm, kvqa.document_from_text(TEXT), config=kvqa.Config.of(chunk_size=100))
        assert {t.dtype for pair in doc.cache.tensors() for t in pair} == {dtype}
        assert doc.cache_bytes == kvqa.model.kv_cache.bytes_per_token(lm.config, dtype) * doc.cache.capacity
        answer = kvqa.answer(lm, doc, QUESTIONS_ASKED[1], max_new_tokens=8)
        assert len(answer.token_ids) > 0 and doc.cache.length == doc.tokens
        with torch.no_grad():  # a drafted step's shape through the model's forward
            logits = lm.model(input_ids=torch.tensor([[5, 6, 7]]), cache=doc.cache, use_cache=True).logits
        assert logits.dtype == torch.float32
        attends = widening.attention or dtype
        assert seen and set(seen) == {(attends, attends)}  # the step written out and the first chunk
    half, full = (tiny_int8_widened[str(w)] for w in (TO_BFLOAT16, TO_FLOAT32))
    assert kvqa.model.kv_cache.bytes_per_token(half.config, half.kv_dtype) * 2 == kvqa.model.kv_cache.bytes_per_token(
        full.config, full.kv_dtype)


def test_quantize_replaces_every_linear_and_shares_the_tied_matrix(tiny_lm, tiny_int8):
    model = tiny_int8.model
    assert tiny_int8.weights == "int8" and tiny_lm.weights == "fp32"
    assert not [m for m in model.modules() if isinstance(m, torch.nn.Linear)]
    head, embedding = model.get_output_embeddings(), model.get_input_embeddings()
    assert isinstance(head, Int8Linear) and isinstance(embedding, Int8Embedding)
    assert head.rows.data_ptr() == embedding.rows.data_ptr()  # tied: one int8 matrix
    assert weight_bytes(model) < 0.3 * weight_bytes(tiny_lm.model)
    ids = torch.tensor([tiny_lm.tokenizer(TEXT)["input_ids"][:40]])
    with torch.no_grad():
        reference, quantized = tiny_lm.model(ids).logits, model(ids).logits
    error = (quantized - reference).abs()  # close, not equal: about 3% of a logit here, where float32 would be 0
    assert 0 < float(error.mean()) < 0.05 * float(reference.abs().mean())
    assert float((quantized.argmax(-1) == reference.argmax(-1)).float().mean()) >= 0.9
    assert weights_fingerprint(model) != weights_fingerprint(tiny_lm.model)  # the store keeps them apart


def test_the_int8_decode_step_is_the_forward_bit_for_bit(int8_lm, default_lm):
    assert int8_lm.step is not None and int8_lm.weights == "int8"
    (fast_logits, fast_cache), (forward_logits, forward_cache) = steps_both_ways(int8_lm, prompt_tokens=37, steps=6)
    assert all(torch.equal(a, b) for a, b in zip(fast_logits, forward_logits))
    assert all(torch.equal(k, k0) and torch.equal(v, v0) for (k, v), (k0, v0) in zip(fast_cache, forward_cache))
    lm = tiny_gemma(default_lm.tokenizer, weights="int8")  # Gemma 3: sliding window, scaled embedding
    for prompt_tokens in (9, 40):
        (fast_logits, _), (forward_logits, _) = steps_both_ways(lm, prompt_tokens=prompt_tokens, steps=8)
        assert all(torch.equal(a, b) for a, b in zip(fast_logits, forward_logits))


def test_grouped_int8_weights_step_as_the_forward_bit_for_bit(default_lm, monkeypatch):
    """A model of INT8_GROUPS (Gemma 3 270M: a scale per 32 weights) gets grouped rows everywhere, its written-out
    step still the forward's bits, and the grouping named in what keys its caches."""
    monkeypatch.setitem(weights_module.INT8_GROUPS, "tiny-gemma", 32)
    lm = tiny_gemma(default_lm.tokenizer, weights="int8")
    assert lm.model.model.layers[0].mlp.down_proj.scales.shape == (64, 128 // 32)
    assert lm.model.get_input_embeddings().scales.shape == (len(default_lm.tokenizer), 64 // 32)
    assert "a scale per 32 weights" in products_of(lm.model)
    for prompt_tokens in (9, 40):
        (fast_logits, _), (forward_logits, _) = steps_both_ways(lm, prompt_tokens=prompt_tokens, steps=8)
        assert all(torch.equal(a, b) for a, b in zip(fast_logits, forward_logits))


def test_the_fused_int8_projections_are_the_modules_own_rows(int8_lm, default_lm):
    attn = int8_lm.model.model.layers[2].self_attn
    fused = int8_lm.step.qkv[2]
    assert fused.rows.shape[0] == sum(p.rows.shape[0] for p in (attn.q_proj, attn.k_proj, attn.v_proj))
    assert attn.k_proj.rows.untyped_storage().data_ptr() == fused.rows.untyped_storage().data_ptr()
    assert int8_lm.weight_bytes == weight_bytes(int8_lm.model) < 0.3 * weight_bytes(default_lm.model)


def test_a_product_is_its_layers_forward_as_a_plain_function():
    torch.manual_seed(0)
    plain, biased = torch.nn.Linear(32, 8, bias=False), torch.nn.Linear(32, 8)
    int8 = Int8Linear(*int8_rows(plain.weight), TO_FLOAT32)
    for rows in (1, 3, 200):  # the int8 kernel's rows and the widening's
        x = torch.randn(1, rows, 32)
        for layer in (plain, int8, biased):
            f = product(layer)
            assert f is not layer and torch.equal(f(x), layer(x))
    norm = torch.nn.LayerNorm(32)
    assert product(norm) is norm  # what it does not know how to call, it leaves as it is


@pytest.fixture(scope="session")
def tiny_int8_widened(default_lm) -> dict[str, kvqa.LoadedModel]:
    """The tiny Llama in int8 with each widening, whatever this CPU would choose, and with torch's int8 kernel."""
    widened = {str(w): tiny_llama(default_lm.tokenizer, weights="int8", widening=w)
               for w in (TO_FLOAT32, TO_BFLOAT16, TO_FLOAT32_BFLOAT16_CACHE)}
    return widened | {str(TORCH): tiny_llama(default_lm.tokenizer, weights="int8", kernel=TORCH)}


@pytest.mark.parametrize("name,draft", [(str(TO_FLOAT32), 0), (str(TO_FLOAT32), 6), (str(TO_BFLOAT16), 0),
                                        (str(TO_BFLOAT16), 6), (str(TO_FLOAT32_BFLOAT16_CACHE), 6), (str(TORCH), 6),
                                        ("smollm2", 6)])
def test_int8_answers_are_bit_for_bit_a_recompute_in_the_same_chunks(tiny_int8_widened, int8_lm, name, draft):
    lm = tiny_int8_widened.get(name, int8_lm)
    document = kvqa.document_from_text(TEXT)
    config = kvqa.Config.of(chunk_size=128, max_new_tokens=24)
    doc = kvqa.prefill(lm, document, config=config)
    before = [(k.clone(), v.clone()) for k, v in doc.cache.tensors()]
    for question in QUESTIONS_ASKED if name != "smollm2" else QUESTIONS_ASKED[::2]:  # English and Chinese
        cached = kvqa.answer(lm, doc, question, draft_tokens=draft)
        again = kvqa.answer_without_cache(lm, document, question, config=config, prompt=doc.prompt,
                                          same_schedule=True, draft_tokens=draft)
        assert cached.token_ids == again.token_ids and len(cached.token_ids) > 0, question
        assert doc.cache.length == doc.tokens
        assert all(torch.equal(k, k0) and torch.equal(v, v0) for (k, v), (k0, v0) in zip(doc.cache.tensors(), before))
    assert_question_logits_as_in_the_same_chunks(lm, doc, QUESTIONS_ASKED[0], config.chunk_size)


def test_each_widening_and_kernel_keys_its_own_caches(tiny_int8_widened, tiny_lm):
    """The widening and the int8 kernel change a prefilled cache's bits, so the store's key holds them (float32
    weights' keys as before); every int8 product of a model, the written-out step's fused ones included, widens the
    same way."""
    widenings = (TO_FLOAT32, TO_BFLOAT16, TO_FLOAT32_BFLOAT16_CACHE)
    lms = [tiny_int8_widened[str(w)] for w in widenings]
    keys = {weights_fingerprint(lm.model) for lm in tiny_int8_widened.values()}
    if choose_kernel() is not TORCH:
        assert len(keys) == 4
    assert len({weights_fingerprint(lm.model) for lm in lms}) == 3
    assert weights_fingerprint(tiny_lm.model) == weights_fingerprint(tiny_llama(tiny_lm.tokenizer).model)
    for lm, widening in zip(lms, widenings):
        products = [m for m in lm.model.modules() if isinstance(m, Int8Linear)] + [*lm.step.qkv, *lm.step.gate_up]
        assert {m.widening for m in products} == {widening}
    document = kvqa.document_from_text(TEXT)
    caches = [kvqa.prefill(lm, document, config=kvqa.Config.of(chunk_size=128)).cache for lm in lms]
    assert not all(torch.equal(a, b) for (a, _), (b, _) in zip(caches[1].tensors(), caches[2].tensors()))


@pytest.mark.parametrize("past", [0, 30])  # a first chunk (SDPA's causal kernel), a later one (attend_after_past)
def test_a_bfloat16_cache_attended_in_float32_is_float32_attention_on_the_widened_cache(past):
    """TO_FLOAT32_BFLOAT16_CACHE: many tokens' attention over a bfloat16 cache computes in float32 (the query kept,
    the cache widened), bit for bit as over a float32 copy of the cache; not in bfloat16."""
    torch.manual_seed(3)
    query = torch.randn(1, 6, 20, 16)  # 6 query heads over 2 key/value heads
    key, value = (torch.randn(1, 2, past + 20, 16).to(torch.bfloat16) for _ in range(2))
    widened = SimpleNamespace(config=SimpleNamespace(kvqa_attention_dtype="float32"))
    plain = SimpleNamespace(config=SimpleNamespace())
    got = grouped_sdpa(widened, query, key, value, None)[0]
    assert got.dtype == torch.float32 and got.shape == (1, 20, 6, 16)
    assert torch.equal(got, grouped_sdpa(plain, query, key.float(), value.float(), None)[0])
    in_bfloat16 = grouped_sdpa(plain, query, key, value, None)[0]
    assert not torch.equal(got, in_bfloat16)
    torch.testing.assert_close(got, in_bfloat16, rtol=0.05, atol=0.05)


def test_the_engine_names_the_weights_and_promises_what_is_tested(int8_lm, default_lm):
    info = LocalEngine(kvqa.Config.of(weights="int8"), lm=int8_lm).info
    assert info.weights == "int8" and not info.exact_vs_recompute
    assert info.guarantee.key == "promise.int8"
    assert info.precision == f"float32; int8 weights, {int8_lm.weight_bytes / 2**20:,.0f} MiB"
    fp32 = LocalEngine(kvqa.Config.of(weights="fp32"), lm=default_lm).info if default_lm.weights == "fp32" else None
    if fp32 is not None:
        assert fp32.guarantee.key == "promise.float32" and fp32.exact_vs_recompute


def test_the_form_is_chosen_or_refused_with_a_message():
    cpu, cuda = torch.device("cpu"), torch.device("cuda")
    measured = torch.backends.cpu.get_cpu_capability() in ("AVX2", "AVX512")  # the CI machines: AVX2, AVX-512
    default = kvqa.config.DEFAULT_MODEL
    assert choose_weights("auto", cpu, torch.float32, model=default) == ("int8" if measured else "fp32")
    assert choose_weights("auto", cpu, torch.float32, model="gemma-3-270m") == ("int8" if measured else "fp32")
    for other in ("Qwen/Qwen2.5-0.5B-Instruct", ""):  # not measured
        assert choose_weights("auto", cpu, torch.float32, model=other) == "fp32"
    assert choose_weights("int8", cpu, torch.float32, model="gemma-3-270m") == "int8"  # asked for: yes
    assert choose_weights("auto", cpu, torch.bfloat16, model=default) == "fp32"
    assert choose_weights("auto", cpu, torch.float32, model=default, compile=True) == "fp32"  # compiled: float32's
    assert choose_weights("auto", cuda, torch.bfloat16, model=default) == "fp32"
    assert choose_weights("fp32", cpu, torch.float32) == "fp32"
    with pytest.raises(ModelError) as unknown:
        choose_weights("int4", cpu, torch.float32)
    assert "int4" in str(unknown.value) and "fp32, int8" in str(unknown.value)
    with pytest.raises(ModelError) as on_gpu:
        choose_weights("int8", cuda, torch.bfloat16)
    assert "--weights fp32" in str(on_gpu.value)
    with pytest.raises(KvqaError) as bad:
        parse_weights(" , ")
    assert "fp32,int8" in str(bad.value)


def test_the_cli_refuses_an_unknown_form_in_one_line(tmp_path, capsys):
    from kvqa.cli import main

    doc = tmp_path / "d.txt"
    doc.write_text("The secret word is pelican.")
    assert main(["ask", str(doc), "-q", "What is the secret word?", "--weights", "int3"]) != 0
    err = capsys.readouterr().err
    assert "int3" in err and "auto, fp32, int8" in err and "Traceback" not in err


def test_the_bench_runs_forms_side_by_side(tiny_lm, tiny_int8):
    config = kvqa.Config.of(max_new_tokens=5, chunk_size=48)
    runs = [run_bench(lm, SAMPLE_DOCUMENT.read_text(), contexts=[120], questions=QUESTIONS[:2], config=config,
                      methods=("recompute", "kvqa"), warm_up=False) for lm in (tiny_lm, tiny_int8)]
    result = side_by_side(runs)
    assert result["weights"] == ["fp32", "int8"]
    rows = {(r["weights"], r["method"]): r for r in result["results"]}
    assert set(rows) == {(f, m) for f in ("fp32", "int8") for m in ("recompute", "kvqa")}
    fp32, int8 = rows["fp32", "kvqa"], rows["int8", "kvqa"]
    assert fp32["same_as_first_run"] is True
    assert int8["same_as_first_run"] == (int8["answers"] == fp32["answers"])
    assert int8["weight_bytes"] == tiny_int8.weight_bytes < fp32["weight_bytes"]
    table = format_table(result)
    assert "runs side by side" in table and "(int8 weights)" not in table.split("runs side by side")[0]
    assert "int8 weights: weights" in table
    # the token as answered (drafting where a form drafts) and the bare step, each form against the first
    ratio = int8["written_step_s"] / fp32["written_step_s"]
    line = next(line for line in table.splitlines() if "int8 weights: weights" in line)
    alone = re.search(r"a step alone ([\d.]+) ms vs ([\d.]+) ms, ([\d.]+)x\)", line)
    assert alone, line
    assert [float(v) for v in alone.groups()] == [round(int8["written_step_s"] * 1000, 1),
                                                   round(fp32["written_step_s"] * 1000, 1), round(ratio, 2)]


@pytest.mark.model  # `kvqa ask` loads the default model in a subprocess
def test_kvqa_ask_runs_int8_by_default_on_a_cpu(tmp_path):
    """What ships: with no setting, `kvqa ask` on a CPU loads int8 weights, says so (the conversation it exports),
    and answers from the document."""
    doc = tmp_path / "notes.txt"
    doc.write_text("The secret word is pelican. The museum opens at 9 am on weekdays and at noon on Sundays.")
    env = {k: v for k, v in os.environ.items() if k != "KVQA_WEIGHTS"}
    done = subprocess.run([sys.executable, "-m", "kvqa", "ask", str(doc), "-q", "What is the secret word?", "--json"],
                          env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    conversation = json.loads(done.stdout)
    shipped = choose_weights("auto", torch.device("cpu"), torch.float32, model=kvqa.config.DEFAULT_MODEL)  # int8 here
    assert conversation["weights"] == shipped and conversation["dtype"] == "float32"
    assert ("int8" in conversation["guarantee"]) == (shipped == "int8")
    assert conversation["kv_cache"] == ("int8" if shipped == "int8" else "float32")  # the offline model's int8 cache
    assert "pelican" in conversation["answers"][0]["answer"].lower()
