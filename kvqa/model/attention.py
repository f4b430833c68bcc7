"""The attention kvqa registers with transformers for the CPU (as GROUPED_SDPA; kvqa.model.loading sets it on a CPU
model that would use "sdpa"): PyTorch's SDPA with grouped key/value heads taken as they are, without a copy of the
cache per layer. transformers' own sdpa copies each key/value head for its query heads whenever a mask is needed
(later prefill chunks, drafted tokens); grouped_sdpa folds a single query token into its group instead, so one pass
reads each head's keys once (kvqa.model.kernels.decode_attention: kvqa's C kernel on AVX2/AVX-512), and
attend_after_past attends new tokens that follow cached ones without a T x S mask, the cached keys and the new ones in
two passes merged by their log-sum-exps (causal_mask leaves that mask out), which SDPA's CPU kernel would otherwise
convert, read for every head and compute the hidden blocks of in every layer. The same attention up to rounding (the
summation order changes; tests/test_exactness.py); the measured gains are in grouped_sdpa's and attend_after_past's
docstrings. Where the cache holds its keys and values in bfloat16 (int8 weights: kvqa.model.weights.Widening), a
single token's attention reads it as it is (kvqa's kernel keeps the query and output float32); many tokens' attention
computes in attention_dtype(): bfloat16 on a CPU with bfloat16 arithmetic (AMX: an 80-token question on 4,096 cached
tokens, its cached part in bfloat16: 181 -> 141 ms, SmolLM2, 2026-12-02), the queries rounded to it and the output
widened back; float32 elsewhere, the cache widened as it is read.
"""

from __future__ import annotations

import torch

from kvqa.model.kernels.decode_attention import attend_one

GROUPED_SDPA = "kvqa_grouped_sdpa"


def grouped_sdpa(module, query, key, value, attention_mask, dropout: float = 0.0, scaling: float | None = None,
                 is_causal: bool | None = None, **kwargs) -> tuple[torch.Tensor, None]:
    """PyTorch's SDPA with grouped key/value heads taken as they are (no copy of the cache per layer), for the CPU.

    transformers' own sdpa copies each key/value head for its query heads whenever a mask is needed (later prefill
    chunks, drafted tokens). Here a single query token is folded into its group instead, (B, H, 1, D) ->
    (B, kv_heads, H / kv_heads, D), so one pass reads each head's keys once
    (kvqa.model.kernels.decode_attention.attend_one: kvqa's
    kernel where built, else SDPA; the written-out steps call it too); new tokens after cached ones go through
    attend_after_past (no mask: causal_mask() leaves it out); a first chunk uses SDPA's causal kernel.
    Measured 2026-11-30 (SmolLM2-135M, 2 cores): a 7-token forward at 5,174 cached tokens 133 -> 106 ms, a decode
    step's attention at 4,096 tokens 19.8 -> 16.3 ms (30 layers), logits equal to transformers' within float32
    rounding (the exactness tests hold: both answer paths use the same kernels)."""
    b, heads, q_len, d = query.shape  # (B, H, T, D); key, value: (B, kv_heads, S, D)
    kv_heads, dtype = key.shape[1], query.dtype
    if q_len == 1 and attention_mask is None and b == 1:  # one token (a decode step), its group's queries together
        out = attend_one(query.reshape(b, kv_heads, heads // kv_heads, d), key, value, scaling or d ** -0.5)
        return out.reshape(b, heads, q_len, d).transpose(1, 2).to(dtype).contiguous(), None
    compute = attention_dtype(module, key.dtype)
    query, key, value = query.to(compute), key.to(compute), value.to(compute)  # see attention_dtype
    if attention_mask is not None and attention_mask.is_floating_point():
        attention_mask = attention_mask.to(compute)  # SDPA takes a boolean mask or one in the query's dtype
    if q_len == 1 and heads != kv_heads:
        mask = attention_mask  # (B, 1, 1, S) or None: the same for every head, so it broadcasts over the group
        out = torch.nn.functional.scaled_dot_product_attention(
            query.reshape(b, kv_heads, heads // kv_heads, d), key, value, attn_mask=mask, scale=scaling)
    elif q_len > 1 and attention_mask is None and key.shape[2] > q_len:
        out = attend_after_past(query, key, value, scaling)
    else:
        causal = q_len > 1 and attention_mask is None and (is_causal if is_causal is not None else True)
        out = torch.nn.functional.scaled_dot_product_attention(
            query, key, value, attn_mask=attention_mask, scale=scaling, is_causal=causal,
            enable_gqa=heads != kv_heads)
    return out.reshape(b, heads, q_len, d).transpose(1, 2).to(dtype).contiguous(), None  # (B, T, H, D)


def attention_dtype(module, cache: torch.dtype) -> torch.dtype:
    """The dtype attention over many tokens computes in: the cache's (a bfloat16 cache with int8 weights on AMX:
    bfloat16 attention, its output widened after), unless the model's int8 widening names another (a bfloat16 cache
    on a CPU without bfloat16 arithmetic: float32, the cache widened as it is read; kvqa.model.weights.Widening)."""
    name = getattr(getattr(module, "config", None), "kvqa_attention_dtype", None)
    return getattr(torch, name) if name else cache


def attend_after_past(query: torch.Tensor, key: torch.Tensor, value: torch.Tensor,
                      scaling: float | None) -> torch.Tensor:
    """Attention of T new tokens that follow cached ones (a later prefill chunk, a question, drafted tokens), each
    seeing every cached key and the new keys up to itself, without a mask: the cached keys in one pass (no mask
    needed: every new token sees them all; the group's queries folded as for one token), the new keys in a second
    (SDPA's causal kernel), the two merged by their log-sum-exps, as flash-decoding merges pieces. A T x S mask
    instead makes SDPA's CPU kernel convert it in every layer, read it for every head and compute the blocks it
    hides: 4,096 tokens prefilled in chunks of 512 took 9.24 s with the mask against 8.52 s split (medians of 5,
    alternating, SmolLM2-135M, 2 cores, 2026-11-30). Same attention up to rounding (the summation order changes;
    tests/test_exactness.py): (B, H, T, D) -> (B, H, T, D), all in one dtype; the merge in float32."""
    b, heads, t, d = query.shape
    kv_heads, past = key.shape[1], key.shape[2] - t
    group = heads // kv_heads
    flash = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu  # (out, log-sum-exp (B, H, T) in float32)
    folded = query.reshape(b, kv_heads, group * t, d)
    old, old_lse = flash(folded, key[:, :, :past], value[:, :, :past], scale=scaling)[:2]
    new, new_lse = flash(query, key[:, :, past:].repeat_interleave(group, 1),
                         value[:, :, past:].repeat_interleave(group, 1), is_causal=True, scale=scaling)[:2]
    old_share = torch.sigmoid(old_lse.reshape(b, heads, t, 1) - new_lse.unsqueeze(-1))  # the cached keys' weight
    new = new.float()
    return (new + (old.reshape(b, heads, t, d).float() - new) * old_share).to(query.dtype)


def causal_mask(**kwargs) -> torch.Tensor | None:
    """transformers' sdpa mask, left out (None) where new tokens follow cached ones plainly (also within a sliding
    window that hides none of the keys given), which grouped_sdpa then attends without a mask (attend_after_past);
    any other mask (padding, a fixed-shape cache, a window that hides keys) as transformers makes it."""
    from transformers.masking_utils import causal_mask_function, sdpa_mask

    q_end = kwargs.get("q_offset", 0) + kwargs["q_length"]  # one past the last new token's position
    kv_offset, window = kwargs.get("kv_offset", 0), kwargs.get("local_size")
    if kwargs.get("attention_mask") is not None or not kwargs.get("allow_is_causal_skip", True):
        return sdpa_mask(**kwargs)  # padding, or another mask laid over the causal one
    plain = kwargs.get("mask_function", causal_mask_function) is causal_mask_function and window is None
    # a sliding window (transformers passes its size as local_size) that hides none of the keys given, as kvqa's
    # cache gives a window layer only the positions its new tokens can see: plainly causal over those
    windowed = window is not None and not kwargs.get("use_vmap", False) and q_end - 1 - kv_offset < window
    if (plain and kv_offset == 0 or windowed) and q_end == kv_offset + kwargs["kv_length"]:
        return None
    return sdpa_mask(**kwargs)


def _register_grouped_sdpa() -> None:
    from transformers import AttentionInterface
    from transformers.masking_utils import AttentionMaskInterface

    AttentionInterface.register(GROUPED_SDPA, grouped_sdpa)
    AttentionMaskInterface.register(GROUPED_SDPA, causal_mask)
