"""The RMSNorms kvqa computes in one call: Llama's and Qwen2's (the same arithmetic, x * rsqrt(mean(x^2) + eps) * w in
float32) on kvqa's norm kernel where it takes them (kvqa.model.kernels.rms_norm), so the forward and the written-out
steps (kvqa.model.architectures) get the same bits. Gemma 3's (1 + w) norms are its own (architectures/gemma3.py).
"""

from __future__ import annotations

import functools

import torch
import torch.nn.functional as F
from transformers.models.llama.modeling_llama import LlamaRMSNorm
from transformers.models.qwen2.modeling_qwen2 import Qwen2RMSNorm

from kvqa.model.kernels.rms_norm import choose_rms_norm

RMS_NORMS = (LlamaRMSNorm, Qwen2RMSNorm)  # the same arithmetic: x * rsqrt(mean(x^2) + eps) * w, in float32


def kernel_norms(model) -> None:
    """Every float32 Llama RMSNorm of the model computed by kvqa's norm kernel where it takes it
    (kvqa.model.kernels.rms_norm): the forward calls it, and norm() hands the written-out step the same function, so
    their bits stay equal."""
    kernel = choose_rms_norm()
    for module in model.modules():
        if type(module) in RMS_NORMS and kernel.takes(module.weight):
            module.forward = functools.partial(kernel.run, weight=module.weight, eps=module.variance_epsilon)
            module.kvqa_norm = kernel


def norm_of(model) -> str:
    """The kernel the model's norms run on where kernel_norms() set one, else "" (it changes a cache's bits)."""
    return next((str(module.kvqa_norm) for module in model.modules() if hasattr(module, "kvqa_norm")), "")


def norm(module: torch.nn.Module):
    """A Llama RMSNorm as the forward computes it, in one call: kvqa's kernel where kernel_norms() set it; else a
    float32 one as PyTorch's rms_norm of its weight (the same bits as LlamaRMSNorm, one operation instead of eight;
    not in bfloat16, where the weight's product rounds differently); any other norm as it is."""
    if hasattr(module, "kvqa_norm"):
        return module.forward
    if type(module) in RMS_NORMS and module.weight.dtype == torch.float32:
        return functools.partial(F.rms_norm, normalized_shape=module.weight.shape, weight=module.weight,
                                 eps=module.variance_epsilon)
    return module
