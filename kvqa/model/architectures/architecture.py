"""What kvqa knows of one transformers architecture (kvqa.model.architectures lists them): which configs its decode
step written out takes, the step, and its parameter count from config.json's values."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True)
class Architecture:
    name: str  # the class a loaded model is: "LlamaForCausalLM"
    model_type: str  # config.json's model_type: "llama"
    supports: Callable[[object], bool]  # whether `step` takes a model of this config (on the CPU)
    step: Callable | None  # (model) -> step(token, KVCache) -> logits (1, vocab); None: the model's forward decodes
    parameters: Callable[[dict], int]  # counted from config.json's values


def head_dim(c: dict) -> int:
    return c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]


def counted(c: dict, *, per_layer: int = 0, norms: int = 2) -> int:
    """A decoder's parameters from config.json's values (c): attention, a gated MLP and `norms` norms per layer (plus
    `per_layer` more, an architecture's own), the embeddings (once when tied) and the final norm."""
    hidden, layers, vocab = c["hidden_size"], c["num_hidden_layers"], c["vocab_size"]
    q, kv = c["num_attention_heads"] * head_dim(c), c["num_key_value_heads"] * head_dim(c)
    attention = hidden * (q + 2 * kv) + q * hidden
    mlp = 3 * hidden * c["intermediate_size"]
    embeddings = vocab * hidden * (1 if c.get("tie_word_embeddings") else 2)
    return layers * (attention + mlp + norms * hidden + per_layer) + embeddings + hidden
