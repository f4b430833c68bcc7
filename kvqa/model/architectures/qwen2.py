"""Qwen2 (Qwen2.5 and Qwen2.5-Coder): Llama's layer with biases on the query, key and value projections. Its decode
step is Llama's (architectures/llama.py): the fused q|k|v product keeps the three biases (kvqa.model.weights.fuse)
and adds them after the product, as the model does; its RMSNorm is Llama's arithmetic (kvqa.model.norms). With int8
weights the C layer loop (kvqa.model.kernels.llama_layer) runs its layers, the biases added there."""

from __future__ import annotations

from kvqa.model.architectures.architecture import Architecture, counted, head_dim
from kvqa.model.architectures.llama import LlamaStep


def supports(config) -> bool:
    """Without its sliding window (off in every Qwen2.5 config) and without MLP biases."""
    return not getattr(config, "use_sliding_window", False) and not getattr(config, "mlp_bias", False)


def parameters(c: dict) -> int:
    biases = (c["num_attention_heads"] + 2 * c["num_key_value_heads"]) * head_dim(c)  # q, k and v
    return counted(c, per_layer=biases)


QWEN2 = Architecture("Qwen2ForCausalLM", "qwen2", supports, LlamaStep, parameters)
