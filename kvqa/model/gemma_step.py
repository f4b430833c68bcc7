"""One decode step of a Gemma 3 text model on the CPU, written out (as kvqa.model.llama_step is for Llama).

transformers' forward for one token builds two masks, two rotary tables and some 120 small operations a layer around
the 7 matrix products; this step does the same arithmetic in the same order with the same kernels, so its logits and
the keys/values it writes are the model's own bit for bit (tests/test_llama_step.py). Gemma 3 adds to Llama's layer:
norms on each head's queries and keys, a norm after attention and around the MLP, embeddings scaled by sqrt(hidden),
and sliding-window layers with their own rotary base, which attend to the window's last positions of the cache only
(kvqa.model.kv_cache keeps every position; the window is a view).
"""

from __future__ import annotations

import torch
from transformers.models.gemma3.modeling_gemma3 import rotate_half

from kvqa.model.kernels.decode_attention import attend_one
from kvqa.model.kv_cache import KVCache
from kvqa.model.llama_step import fuse_layers


def supports(model, device: torch.device) -> bool:
    """Gemma 3 text models without projection biases or soft-capping, on the CPU."""
    config = model.config
    return (device.type == "cpu" and type(model).__name__ == "Gemma3ForCausalLM"
            and not getattr(config, "attention_bias", False) and not getattr(config, "attn_logit_softcapping", None)
            and not getattr(config, "final_logit_softcapping", None)
            and not getattr(config, "use_bidirectional_attention", False))


class GemmaStep:
    """step(token, cache) -> the next token's logits, (1, vocab); the token's keys/values added to the cache."""

    def __init__(self, model):
        self.model = model
        config = model.config
        self.heads, self.kv_heads = config.num_attention_heads, config.num_key_value_heads
        self.head_dim = config.head_dim
        self.kinds = list(config.layer_types)
        self.qkv, self.gate_up = fuse_layers(model)

    @torch.no_grad()
    def __call__(self, token: int, cache: KVCache) -> torch.Tensor:
        model, h, kv, d = self.model.model, self.heads, self.kv_heads, self.head_dim
        position = cache.length
        assert position < cache.capacity, f"cache overflow: {position + 1} > {cache.capacity} tokens"
        x = model.embed_tokens(torch.tensor([[token]]))  # (1, 1, hidden), scaled by sqrt(hidden)
        at = torch.tensor([[position]])
        rope = {kind: model.rotary_emb(x, at, kind) for kind in set(self.kinds)}  # (1, 1, D) cos, sin per kind
        for layer, kind, qkv_proj, gate_up_proj, held in zip(model.layers, self.kinds, self.qkv, self.gate_up,
                                                                 cache.layers):
            attn = layer.self_attn
            qkv = qkv_proj(layer.input_layernorm(x))  # (1, 1, (H + 2 KV) D)
            q = attn.q_norm(qkv[..., : h * d].view(1, 1, h, d).transpose(1, 2))  # (1, H, 1, D)
            k = attn.k_norm(qkv[..., h * d: (h + kv) * d].view(1, 1, kv, d).transpose(1, 2))  # (1, KV, 1, D)
            cos, sin = (t.unsqueeze(1) for t in rope[kind])
            q, k = q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin  # apply_rotary_pos_emb
            held.key_buffer[:, :, position: position + 1].copy_(k)
            held.value_buffer[:, :, position: position + 1].copy_(
                qkv[..., (h + kv) * d:].view(1, 1, kv, d).transpose(1, 2))
            start = held.window_start  # what the window sees (the cache's length is still `position`)
            keys, values = held.key_buffer[:, :, start: position + 1], held.value_buffer[:, :, start: position + 1]
            out = attend_one(q.reshape(1, kv, h // kv, d), keys, values, attn.scaling)  # (1, KV, H / KV, D)
            x = x + layer.post_attention_layernorm(attn.o_proj(out.reshape(1, 1, h * d).to(x.dtype)))
            gate, up = gate_up_proj(layer.pre_feedforward_layernorm(x)).chunk(2, dim=-1)
            x = x + layer.post_feedforward_layernorm(layer.mlp.down_proj(layer.mlp.act_fn(gate) * up))
        cache.advance(1)
        return self.model.lm_head(model.norm(x))[:, -1]
