"""The int8 decode step's layers in C (kvqa.model.kernels.llama_layer): the forward's logits and cache bit for bit, in
a float32 and a bfloat16 cache, with a scale a row or a scale a run; the Python loop where C cannot run the model as
the forward does; no drafting where the layers run in C (a drafted run costs more than the steps it saves)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

import kvqa
from conftest import tiny_llama
from kvqa.generation.decode import drafting_pays
from kvqa.model import weights as weights_module
from kvqa.model.kernels import llama_layer
from kvqa.model.kernels.int8_kernel import TORCH, choose_kernel
from kvqa.model.kernels.native import vector_cpu
from kvqa.model.weights import TO_BFLOAT16, TO_FLOAT32
from test_llama_step import TEXT, steps_both_ways


def layers_in_c_run() -> bool:
    """Whether this machine builds and runs the C layer loop (an x86 CPU with AVX2 or AVX-512, a C compiler)."""
    return vector_cpu() and choose_kernel().address is not None and llama_layer.library() is not None


needs_c = pytest.mark.skipif(not layers_in_c_run(),
                             reason="kvqa's C kernels need an x86 CPU with AVX2 or AVX-512 and a C compiler")


def python_loop(lm):
    """The same model with its step's layers in Python (what runs where C cannot)."""
    step = type(lm.step).__new__(type(lm.step))
    step.__dict__.update(lm.step.__dict__, in_c=None)
    return dataclasses.replace(lm, step=step)


def assert_same(outcomes):
    (fast_logits, fast_cache), (forward_logits, forward_cache) = outcomes
    assert all(torch.equal(a, b) for a, b in zip(fast_logits, forward_logits))
    assert all(torch.equal(k, k0) and torch.equal(v, v0) for (k, v), (k0, v0) in zip(fast_cache, forward_cache))
    return fast_logits


@needs_c
@pytest.mark.parametrize("widening", [TO_FLOAT32, TO_BFLOAT16], ids=["float32-cache", "bfloat16-cache"])
def test_int8_layers_in_c_step_as_the_forward_bit_for_bit(default_lm, widening):
    lm = tiny_llama(default_lm.tokenizer, weights="int8", widening=widening)
    assert lm.step.in_c is not None and lm.step.in_c.cache_dtype == widening.cache == lm.kv_dtype
    for prompt_tokens in (1, 45):
        in_c = assert_same(steps_both_ways(lm, prompt_tokens=prompt_tokens, steps=8))
        in_python = assert_same(steps_both_ways(python_loop(lm), prompt_tokens=prompt_tokens, steps=8))
        assert all(torch.equal(a, b) for a, b in zip(in_c, in_python))


@needs_c
def test_a_scale_a_run_steps_in_c_as_the_forward(default_lm, monkeypatch):
    monkeypatch.setitem(weights_module.INT8_GROUPS, "tiny-llama", 32)
    lm = tiny_llama(default_lm.tokenizer, weights="int8")
    assert lm.model.model.layers[0].mlp.down_proj.scales.shape == (64, 128 // 32)
    assert lm.step.in_c is not None
    assert_same(steps_both_ways(lm, prompt_tokens=30, steps=8))


@needs_c
def test_the_default_int8_model_steps_in_c(int8_lm):
    assert int8_lm.step.in_c is not None
    assert_same(steps_both_ways(int8_lm, prompt_tokens=200, steps=4))


def test_what_c_cannot_run_keeps_the_python_loop(default_lm, tiny_lm, monkeypatch):
    assert tiny_lm.step.in_c is None  # float32 weights: PyTorch's products
    assert tiny_llama(default_lm.tokenizer, weights="int8", kernel=TORCH).step.in_c is None  # torch's int8 kernel
    monkeypatch.setenv("KVQA_LAYER_KERNEL", "torch")
    llama_layer.library.cache_clear()
    try:
        lm = tiny_llama(default_lm.tokenizer, weights="int8")
        assert lm.step.in_c is None
        assert_same(steps_both_ways(lm, prompt_tokens=20, steps=5))
    finally:
        llama_layer.library.cache_clear()


@needs_c
def test_a_cache_c_does_not_read_is_stepped_in_python(default_lm):
    lm = tiny_llama(default_lm.tokenizer, weights="int8", widening=TO_BFLOAT16)
    other = dataclasses.replace(lm, kv_dtype=torch.float32)  # a cache in float32 where the layers expect bfloat16
    assert lm.step.in_c is not None and lm.kv_dtype == torch.bfloat16
    outcomes = steps_both_ways(other, prompt_tokens=20, steps=5)
    assert outcomes[0][1][0][0].dtype == torch.float32  # C would have read these float32 keys as bfloat16
    assert_same(outcomes)


@needs_c
def test_where_the_layers_run_in_c_answers_do_not_draft(int8_lm, default_lm):
    """A drafted run goes through the forward, dearer than the steps it saves once the step runs in C: no drafting
    there, and the answer is the plain one's; drafting where the step runs in Python (float32 weights)."""
    document = kvqa.document_from_text(TEXT)
    config = kvqa.Config.of(chunk_size=128, max_new_tokens=24)
    for model, drafts in ((int8_lm, False), (default_lm, True)):
        assert drafting_pays(model) is drafts
        doc = kvqa.prefill(model, document, config=config)
        question = "How much does item 12 cost, and what is the secret word?"
        drafted = kvqa.answer(model, doc, question, draft_tokens=6, max_new_tokens=24)
        plain = kvqa.answer(model, doc, question, draft_tokens=0, max_new_tokens=24)
        assert (drafted.timings.drafted_tokens + drafted.timings.rejected_tokens > 0) is drafts, drafted.text
        if not drafts:
            assert drafted.token_ids == plain.token_ids
