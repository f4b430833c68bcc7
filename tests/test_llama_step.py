"""The decode steps written out (kvqa.model.architectures: llama.py, gemma3.py) compute what the model's own forward
computes for
one token, bit for bit: the same logits and the same keys and values in the cache, step after step, in float32 and
bfloat16, past a sliding window too. They add no memory, and models they cannot run fall back to the forward."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from transformers import Gemma3ForCausalLM, Gemma3TextConfig, LlamaConfig, LlamaForCausalLM

from kvqa.generation.decode import decode_one_token
from kvqa.generation.generate import run_chunks
from kvqa.model.architectures import has_step
from kvqa.model.kv_cache import new_cache
from kvqa.model.loading import prepare
from kvqa.model.weights import weight_bytes

TEXT = "The secret word is pelican. " + " ".join(f"Item {i} costs {i * 7} euros." for i in range(60))


def steps_both_ways(lm, *, prompt_tokens: int, steps: int):
    """Greedy decoding from the same prefilled cache through lm.step and through the model's forward."""
    ids = lm.tokenizer(TEXT)["input_ids"][:prompt_tokens]
    outcomes = []
    for way in (lm, dataclasses.replace(lm, step=None)):
        cache = lm.new_cache(len(ids) + steps)
        token = int(run_chunks(lm, ids, cache, chunk_size=128).argmax())
        logits = []
        for _ in range(steps):
            logits.append(decode_one_token(way, token, cache))
            token = int(logits[-1].argmax())
        assert cache.length == len(ids) + steps
        outcomes.append((logits, [(k.clone(), v.clone()) for k, v in cache.tensors()]))
    return outcomes


@pytest.mark.parametrize("prompt_tokens", [1, 37, 300])
def test_the_default_model_steps_as_its_forward_does_bit_for_bit(default_lm, prompt_tokens):
    assert default_lm.step is not None  # the default model on the CPU decodes through it
    (fast_logits, fast_cache), (forward_logits, forward_cache) = steps_both_ways(
        default_lm, prompt_tokens=prompt_tokens, steps=6)
    for fast, forward in zip(fast_logits, forward_logits):
        assert fast.shape == forward.shape == (1, default_lm.config.vocab_size)
        assert torch.equal(fast, forward)
    for (k, v), (k0, v0) in zip(fast_cache, forward_cache):
        assert torch.equal(k, k0) and torch.equal(v, v0)


@pytest.mark.parametrize("name", ["tiny-bfloat16", "smollm2-bfloat16"])
def test_bfloat16_steps_as_the_forward_does_bit_for_bit(half_lms, name):
    lm = half_lms[name]
    assert lm.step is not None and lm.dtype == torch.bfloat16
    (fast_logits, fast_cache), (forward_logits, forward_cache) = steps_both_ways(lm, prompt_tokens=120, steps=5)
    assert all(torch.equal(a, b) for a, b in zip(fast_logits, forward_logits))
    assert all(torch.equal(k, k0) and torch.equal(v, v0) for (k, v), (k0, v0) in zip(fast_cache, forward_cache))


def test_other_shapes_of_grouped_attention_step_the_same(tiny_lm, tiny_llama3_lm):
    for lm in (tiny_lm, tiny_llama3_lm):  # 4 query heads on 2 key/value heads, head size 16
        (fast_logits, _), (forward_logits, _) = steps_both_ways(lm, prompt_tokens=90, steps=8)
        assert all(torch.equal(a, b) for a, b in zip(fast_logits, forward_logits))


def tiny_gemma(tokenizer, dtype: torch.dtype = torch.float32, weights: str = "fp32", key_eps: float | None = None):
    """A random Gemma 3 text model: five sliding-window layers (16 positions) and a global one, 4 heads on 2
    (key_eps: the keys' norms' own eps, not the model's)."""
    torch.manual_seed(0)
    config = Gemma3TextConfig(vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, num_hidden_layers=6,
                              num_attention_heads=4, num_key_value_heads=2, head_dim=32, sliding_window=16,
                              max_position_embeddings=4096)
    model = Gemma3ForCausalLM(config)
    with torch.no_grad():
        for p in model.parameters():
            p.normal_(0, 0.2)  # the norms' weights too: Gemma's start at 0 (scale 1 + w)
    for layer in model.model.layers if key_eps is not None else ():
        layer.self_attn.k_norm.eps = key_eps
    return prepare(model.to(dtype), tokenizer, name="tiny-gemma", device=torch.device("cpu"), weights=weights)


@pytest.mark.parametrize("dtype, key_eps", [(torch.float32, None), (torch.bfloat16, None), (torch.float32, 1e-2)])
def test_gemma_steps_as_its_forward_does_bit_for_bit_past_the_window(default_lm, dtype, key_eps):
    lm = tiny_gemma(default_lm.tokenizer, dtype, key_eps=key_eps)
    assert type(lm.step).__name__ == "GemmaStep"
    for prompt_tokens in (1, 9, 40):  # inside the 16-position window, and past it
        (fast_logits, fast_cache), (forward_logits, forward_cache) = steps_both_ways(
            lm, prompt_tokens=prompt_tokens, steps=12)
        assert all(torch.equal(a, b) for a, b in zip(fast_logits, forward_logits)), prompt_tokens
        assert all(torch.equal(k, k0) and torch.equal(v, v0)
                   for (k, v), (k0, v0) in zip(fast_cache, forward_cache)), prompt_tokens


def test_fused_projections_are_the_modules_own_weights(default_lm):
    """q|k|v and gate|up run as one matrix each, and the modules' weights are views of it: nothing is held twice."""
    layer, fused = default_lm.model.model.layers[3], default_lm.step.qkv[3].weight
    attn = layer.self_attn
    assert fused.shape[0] == attn.q_proj.weight.shape[0] + attn.k_proj.weight.shape[0] + attn.v_proj.weight.shape[0]
    for proj in (attn.q_proj, attn.k_proj, attn.v_proj):
        assert proj.weight.untyped_storage().data_ptr() == fused.untyped_storage().data_ptr()
    assert (layer.mlp.up_proj.weight.untyped_storage().data_ptr()
            == default_lm.step.gate_up[3].weight.untyped_storage().data_ptr())
    held = {p.untyped_storage().data_ptr() for p in default_lm.model.parameters()}
    assert len(held) < len(list(default_lm.model.parameters()))  # shared storages, counted once by weight_bytes
    assert weight_bytes(default_lm.model) == sum(p.nbytes for p in default_lm.model.parameters())


def test_a_step_past_the_capacity_is_refused(tiny_lm):
    ids = tiny_lm.tokenizer(TEXT)["input_ids"][:20]
    cache = new_cache(tiny_lm.config, len(ids))
    run_chunks(tiny_lm, ids, cache, chunk_size=64)
    with pytest.raises(AssertionError, match="cache overflow"):
        tiny_lm.step(5, cache)
    assert cache.length == len(ids)


def test_models_it_cannot_run_keep_the_forward(default_lm):
    config = LlamaConfig(vocab_size=len(default_lm.tokenizer), hidden_size=64, intermediate_size=128,
                         num_hidden_layers=2, num_attention_heads=4, num_key_value_heads=2, attention_bias=True)
    biased = prepare(LlamaForCausalLM(config), default_lm.tokenizer, name="biased", device=torch.device("cpu"))
    assert biased.step is None  # projection biases: not written out
    ids = default_lm.tokenizer(TEXT)["input_ids"][:30]
    cache = new_cache(biased.config, len(ids) + 2)
    run_chunks(biased, ids, cache, chunk_size=64)
    assert decode_one_token(biased, 5, cache).shape == (1, config.vocab_size)
    assert not has_step(default_lm.model, torch.device("cuda"))  # the GPU runs the forward (or its CUDA graph)
