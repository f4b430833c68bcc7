"""Qwen3: Llama's layer with norms on each head's queries and keys. kvqa offers it as a preset (a GPU, or the
forward on the CPU) and writes out no decode step for it."""

from __future__ import annotations

from kvqa.model.architectures.architecture import Architecture, counted, head_dim


def parameters(c: dict) -> int:
    return counted(c, per_layer=2 * head_dim(c))  # the q and k norms


QWEN3 = Architecture("Qwen3ForCausalLM", "qwen3", lambda config: False, None, parameters)
