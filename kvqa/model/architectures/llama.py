"""Llama (SmolLM2, Llama 3.x): what kvqa's CPU path takes of it, its decode step written out, its parameter count.

One decode step of a Llama-family model on the CPU, written out (gpt-fast style).

transformers' forward for one token runs some 110 small operations a layer around the 7 matrix products (masks,
position bookkeeping, per-module hooks and reshapes); on a 2-core CPU they cost more than the attention at 1,024
tokens. This step does the same arithmetic, in the same order and with the same kernels, as
`model(input_ids=[[token]], cache=cache)`: the logits and the keys/values it writes are the same bit for bit
(tests/test_llama_step.py), so a cached answer and a recomputed one still agree token for token. What it drops is
the bookkeeping: the query/key/value projections and the gate/up projections each run as one matrix product (the
modules' weights become row-slices of one matrix: no memory added), the rotation runs once for queries and keys
together, keys and values go straight into the cache's buffers, and the query token is folded into its key/value
head's group for attention (kvqa.model.kernels.decode_attention.attend_one, as kvqa.model.attention.grouped_sdpa calls
it). With int8 weights on kvqa's kernels the loop over the layers runs in C (kvqa.model.kernels.llama_layer: the same
kernels, the same bits, two C calls a layer instead of some 80 operations).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

import torch

from kvqa.model.architectures.architecture import Architecture, counted
from kvqa.model.kernels.llama_layer import layers_in_c
from kvqa.model.kv_cache import KVCache
from kvqa.model.norms import norm
from kvqa.model.weights import cache_dtype, fuse, product


def supports(config) -> bool:
    """Llama's layer without projection biases (attention_bias, mlp_bias: the written-out step adds none)."""
    return not getattr(config, "attention_bias", False) and not getattr(config, "mlp_bias", False)


@torch.no_grad()
def fuse_layers(model) -> tuple[list[torch.nn.Module], list[torch.nn.Module]]:
    """Per layer, q|k|v and gate|up as one module each (the modules' weights become views of its matrix)."""
    layers = model.model.layers
    return ([fuse(layer.self_attn.q_proj, layer.self_attn.k_proj, layer.self_attn.v_proj) for layer in layers],
            [fuse(layer.mlp.gate_proj, layer.mlp.up_proj) for layer in layers])


def rolled_sin(sin: torch.Tensor) -> torch.Tensor:
    """sin (..., D) with its first half negated: rotate_half(t) * sin == roll(t, D / 2) * rolled_sin(sin), bit for bit
    (one operation a layer instead of four)."""
    half = sin.shape[-1] // 2
    return torch.cat((-sin[..., :half], sin[..., half:]), dim=-1)


class StepLayer(NamedTuple):
    """One Llama layer as the written-out step calls it: its norms, products and activation, looked up once."""
    in_norm: Callable
    qkv: Callable  # q|k|v as one product
    scaling: float
    o_proj: Callable
    post_norm: Callable
    gate_up: Callable  # gate|up as one product
    act_fn: Callable
    down_proj: Callable


class LlamaStep:
    """step(token, cache) -> the next token's logits, (1, vocab); the token's keys/values added to the cache."""

    def __init__(self, model):
        self.model = model
        config = model.config
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = getattr(config, "head_dim", None) or config.hidden_size // self.heads
        self.qkv, self.gate_up = fuse_layers(model)
        # per layer, what the loop uses, looked up once (a module call costs microseconds, some 200 a token)
        self.layers = [StepLayer(in_norm=norm(layer.input_layernorm), qkv=product(qkv),
                                 scaling=layer.self_attn.scaling, o_proj=product(layer.self_attn.o_proj),
                                 post_norm=norm(layer.post_attention_layernorm), gate_up=product(gate_up),
                                 act_fn=layer.mlp.act_fn.forward, down_proj=product(layer.mlp.down_proj))
                       for layer, qkv, gate_up in zip(model.model.layers, self.qkv, self.gate_up)]
        self.in_c = layers_in_c(model, self.qkv, self.gate_up, cache_dtype(model), self.heads, self.kv_heads,
                                self.head_dim)  # int8 on kvqa's kernels: the loop below in C

    @property
    def drafting_pays(self) -> bool:
        """Checking drafted guesses runs 1 + k tokens through the forward; with the layers in C a step is near its
        floor and such a run costs more than the steps its kept guesses save (SmolLM2 int8 on the Xeon, 2026-12-05:
        172.5 tok/s plain against 132.2 drafting at 1,024 tokens, 102.3 against 82.0 at 4,096; docs/performance.md)."""
        return self.in_c is None

    @torch.no_grad()
    def __call__(self, token: int, cache: KVCache) -> torch.Tensor:
        model, h, kv, d = self.model.model, self.heads, self.kv_heads, self.head_dim
        position = cache.length
        assert position < cache.capacity, f"cache overflow: {position + 1} > {cache.capacity} tokens"
        x = model.embed_tokens(torch.tensor([[token]]))  # (1, 1, hidden)
        cos, sin = model.rotary_emb(x, torch.tensor([[position]]))  # (1, 1, D) each
        half, sin = d // 2, rolled_sin(sin)
        if self.in_c is not None and self.in_c.takes(cache):  # the loop below, in C
            x = self.in_c(x, cos, sin, cache, position)
            cache.advance(1)
            return self.model.lm_head(model.norm(x))[:, -1]
        for layer, held in zip(self.layers, cache.layers):
            qkv = layer.qkv(layer.in_norm(x))  # (1, 1, (H + 2 KV) D)
            qk = qkv[..., : (h + kv) * d].view(1, h + kv, 1, d)  # (1, H + KV, 1, D)
            qk = qk * cos + torch.roll(qk, half, -1) * sin  # apply_rotary_pos_emb, queries and keys at once
            held.write(position, qk[:, h:], qkv[..., (h + kv) * d:].view(1, kv, 1, d))
            out = held.attend(qk[:, :h].reshape(1, kv, h // kv, d), position + 1, layer.scaling)  # (1, KV, H / KV, D)
            x = x + layer.o_proj(out.reshape(1, 1, h * d))
            gate, up = layer.gate_up(layer.post_norm(x)).chunk(2, dim=-1)
            x = x + layer.down_proj(layer.act_fn(gate) * up)
        cache.advance(1)
        return self.model.lm_head(model.norm(x))[:, -1]


LLAMA = Architecture("LlamaForCausalLM", "llama", supports, LlamaStep, counted)
