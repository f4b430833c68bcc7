"""Gemma 3 (text): what kvqa's CPU path takes of it, its decode step written out, its parameter count.

One decode step of a Gemma 3 text model on the CPU, written out (as architectures/llama.py's is for Llama).

transformers' forward for one token builds two masks, two rotary tables and some 120 small operations a layer around
the 7 matrix products; this step does the same arithmetic in the same order with the same kernels (each RMSNorm's
eight operations as PyTorch's one rms_norm, which rounds alike), so its logits and the keys/values it writes are the
model's own bit for bit (tests/test_llama_step.py). Gemma 3 adds to Llama's layer:
norms on each head's queries and keys, a norm after attention and around the MLP, embeddings scaled by sqrt(hidden),
and sliding-window layers with their own rotary base, which attend to the window's last positions of the cache only
(kvqa.model.kv_cache keeps every position; the window is a view).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch
import torch.nn.functional as F

from kvqa.model.architectures.architecture import Architecture, counted, head_dim
from kvqa.model.architectures.llama import fuse_layers, rolled_sin
from kvqa.model.kv_cache import KVCache
from kvqa.model.weights import product


def supports(config) -> bool:
    """Without projection biases, soft-capping or bidirectional attention."""
    return (not getattr(config, "attention_bias", False) and not getattr(config, "attn_logit_softcapping", None)
            and not getattr(config, "final_logit_softcapping", None)
            and not getattr(config, "use_bidirectional_attention", False))


class GemmaLayer(NamedTuple):
    """One Gemma 3 layer as the written-out step calls it: its norms, products and activation, looked up once."""
    in_norm: Callable
    qkv: Callable  # q|k|v as one product
    qk_norm: Callable  # the queries' and keys' norms, the heads side by side (head_norms)
    scaling: float
    o_proj: Callable
    post_attn_norm: Callable
    pre_mlp_norm: Callable
    gate_up: Callable  # gate|up as one product
    act_fn: Callable
    down_proj: Callable
    post_mlp_norm: Callable


class GemmaStep:
    """step(token, cache) -> the next token's logits, (1, vocab); the token's keys/values added to the cache."""

    def __init__(self, model):
        self.model = model
        config = model.config
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.head_dim
        self.kinds = list(config.layer_types)
        self.qkv, self.gate_up = fuse_layers(model)
        # per layer, what the loop uses, looked up once (a module call costs microseconds, a norm eight operations)
        self.layers = [GemmaLayer(
            in_norm=gemma_norm(layer.input_layernorm), qkv=product(qkv),
            qk_norm=head_norms(layer.self_attn.q_norm, layer.self_attn.k_norm, self.heads, self.kv_heads),
            scaling=layer.self_attn.scaling, o_proj=product(layer.self_attn.o_proj),
            post_attn_norm=gemma_norm(layer.post_attention_layernorm),
            pre_mlp_norm=gemma_norm(layer.pre_feedforward_layernorm), gate_up=product(gate_up),
            act_fn=layer.mlp.act_fn.forward, down_proj=product(layer.mlp.down_proj),
            post_mlp_norm=gemma_norm(layer.post_feedforward_layernorm))
            for layer, qkv, gate_up in zip(model.model.layers, self.qkv, self.gate_up)]
        self.norm, self.head = gemma_norm(model.model.norm), product(model.lm_head)

    @torch.no_grad()
    def __call__(self, token: int, cache: KVCache) -> torch.Tensor:
        model, h, kv, d = self.model.model, self.heads, self.kv_heads, self.head_dim
        position = cache.length
        assert position < cache.capacity, f"cache overflow: {position + 1} > {cache.capacity} tokens"
        x = model.embed_tokens(torch.tensor([[token]]))  # (1, 1, hidden), scaled by sqrt(hidden)
        at = torch.tensor([[position]])
        half = d // 2
        rope = {}  # per kind of layer (sliding or full), its rotation's (1, 1, 1, D) cos and rolled sin
        for kind in set(self.kinds):
            cos, sin = model.rotary_emb(x, at, kind)  # (1, 1, D)
            rope[kind] = cos.unsqueeze(1), rolled_sin(sin).unsqueeze(1)
        for layer, kind, held in zip(self.layers, self.kinds, cache.layers):
            qkv = layer.qkv(layer.in_norm(x))  # (1, 1, (H + 2 KV) D)
            qk = layer.qk_norm(qkv[..., : (h + kv) * d].view(1, 1, h + kv, d).transpose(1, 2))  # (1, H + KV, 1, D)
            cos, sin = rope[kind]
            qk = qk * cos + torch.roll(qk, half, -1) * sin  # apply_rotary_pos_emb, queries and keys at once
            q, k = qk[:, :h], qk[:, h:]
            held.write(position, k, qkv[..., (h + kv) * d:].view(1, 1, kv, d).transpose(1, 2))
            out = held.attend(q.reshape(1, kv, h // kv, d), position + 1, layer.scaling)  # (1, KV, H / KV, D), windowed
            x = x + layer.post_attn_norm(layer.o_proj(out.reshape(1, 1, h * d).to(x.dtype)))
            gate, up = layer.gate_up(layer.pre_mlp_norm(x)).chunk(2, dim=-1)
            x = x + layer.post_mlp_norm(layer.down_proj(layer.act_fn(gate) * up))
        cache.advance(1)
        return self.head(self.norm(x))[:, -1]


def head_norms(q_norm: torch.nn.Module, k_norm: torch.nn.Module, heads: int, kv_heads: int):
    """A Gemma 3 layer's query and key norms (RMSNorms over each head's D values, the queries' and the keys' own
    weights) as one function of the heads side by side, (1, H + KV, 1, D): rms_norm without a weight, then times each
    head's (1 + w), the same bits as the two modules (tests/test_llama_step.py)."""
    if q_norm.eps != k_norm.eps:  # not Gemma 3's (one rms_norm_eps): each by its own module
        return lambda qk: torch.cat((q_norm(qk[:, :heads]), k_norm(qk[:, heads:])), dim=1)
    d, eps = q_norm.weight.shape[-1], q_norm.eps
    weight = torch.cat([(1.0 + q_norm.weight.float()).expand(heads, d),
                        (1.0 + k_norm.weight.float()).expand(kv_heads, d)]).view(heads + kv_heads, 1, d)

    def norm(qk: torch.Tensor) -> torch.Tensor:
        return (F.rms_norm(qk.float(), (d,), eps=eps) * weight).type_as(qk)

    return norm


def gemma_norm(module: torch.nn.Module):
    """A Gemma 3 RMSNorm as one operation: PyTorch's rms_norm with the weight (1 + w) made once, where the module
    computes x * rsqrt(mean(x^2) + eps) * (1 + w) in float32 in some eight (the same bits: tests/test_llama_step.py);
    its input and output in the module's dtype as the module's are."""
    weight = 1.0 + module.weight.float()
    shape, eps = tuple(module.weight.shape), module.eps

    def norm(x: torch.Tensor) -> torch.Tensor:
        return F.rms_norm(x.float(), shape, weight=weight, eps=eps).type_as(x)

    return norm


def parameters(c: dict) -> int:
    return counted(c, per_layer=2 * head_dim(c), norms=4)  # q and k norms; norms before and after attention and MLP


GEMMA3 = Architecture("Gemma3ForCausalLM", "gemma3_text", supports, GemmaStep, parameters)
