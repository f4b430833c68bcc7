"""The architectures kvqa knows, one file each (what its written-out decode step takes, the step, its parameter
count): Llama, Qwen2, Gemma 3, Qwen3. Loading asks `written_out_step`; the presets ask `parameters`. Any other
architecture whose layers are full or sliding-window attention still loads and answers through its forward
(kvqa.model.kv_cache.unsupported_reason says which cannot). Adding one: docs/layout.md."""

from __future__ import annotations

from collections.abc import Callable

import torch

from kvqa.model.architectures.architecture import Architecture
from kvqa.model.architectures.gemma3 import GEMMA3
from kvqa.model.architectures.llama import LLAMA
from kvqa.model.architectures.qwen2 import QWEN2
from kvqa.model.architectures.qwen3 import QWEN3

ARCHITECTURES: tuple[Architecture, ...] = (LLAMA, QWEN2, GEMMA3, QWEN3)


def architecture_of(model) -> Architecture | None:
    """The architecture a loaded model is, or None for one kvqa has no file for."""
    return next((a for a in ARCHITECTURES if a.name == type(model).__name__), None)


def has_step(model, device: torch.device) -> bool:
    """Whether kvqa writes out this model's decode step: on the CPU, for an architecture and config its step takes
    (on a GPU the forward runs, or its CUDA graph)."""
    architecture = architecture_of(model)
    return (device.type == "cpu" and architecture is not None and architecture.step is not None
            and architecture.supports(model.config))


def written_out_step(model, device: torch.device) -> Callable | None:
    """The one-token step written out for this model where kvqa has one (has_step), else None."""
    return architecture_of(model).step(model) if has_step(model, device) else None


def parameters(settings: dict) -> int:
    """A model's parameters from its config.json's values (embeddings once when tied)."""
    architecture = next((a for a in ARCHITECTURES if a.model_type == settings["model_type"]), None)
    if architecture is None:
        raise ValueError(f"no parameter count for model_type {settings['model_type']!r}")
    return architecture.parameters(settings)
