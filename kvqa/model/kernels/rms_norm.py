"""A float32 Llama-family RMS norm in one call: kvqa's own (rms_norm.c, built for this CPU at first use:
kvqa.model.kernels.native) where the CPU has AVX2 or AVX-512 and a C compiler is here, else PyTorch's.

transformers' LlamaRMSNorm is eight PyTorch operations (PyTorch's own rms_norm on the CPU is as many), some 25 us
for one row on 2 cores, and a decode step of SmolLM2 runs 61 norms: about 1.5 ms of a 13 ms step. kvqa's kernel
takes about 2 us a row. It sums the squares in another order than PyTorch's, so the model's forward and the
written-out steps both call it (kvqa.model.loading.prepare swaps the norms' forward; the steps in
kvqa.model.architectures use the same function): they stay equal bit for bit, and the norm is part of a cache's key
(kvqa.cache.restore.cache_key).
"""

from __future__ import annotations

import ctypes
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from kvqa.model.kernels.native import built_or

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("rms_norm.c")


@dataclass(frozen=True)
class RmsNorm:
    """A named norm: run(x, weight, eps) for float32 x (..., K) and weight (K,), or None for PyTorch's own."""

    name: str
    run: Callable[[torch.Tensor, torch.Tensor, float], torch.Tensor] | None = None
    lanes: int = 16
    address: int | None = None  # kvqa_rms_norm's, for C that calls it (kvqa.model.kernels.llama_layer)

    def takes(self, weight: torch.Tensor) -> bool:
        """Whether run() reads a norm of this weight: float32 on the CPU, a width that is a multiple of the lanes."""
        return (self.run is not None and weight.dtype == torch.float32 and weight.device.type == "cpu"
                and weight.dim() == 1 and weight.shape[0] % self.lanes == 0 and weight.is_contiguous())

    def __str__(self) -> str:
        return self.name


TORCH = RmsNorm("PyTorch's RMS norm")


def load(path: Path) -> RmsNorm:
    """kvqa's norm from a library build() made."""
    library = ctypes.CDLL(str(path))
    norm = library.kvqa_rms_norm
    norm.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 2 + [ctypes.c_float, ctypes.c_int]
    norm.restype = None
    lanes = library.kvqa_rms_norm_lanes()

    def run(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
        if x.dtype != torch.float32 or x.shape[-1] != weight.shape[0]:
            raise ValueError(f"RMS norm of {x.dtype} {tuple(x.shape)} by a weight of {tuple(weight.shape)}")
        x = x.contiguous()
        out = torch.empty_like(x)
        norm(x.data_ptr(), weight.data_ptr(), out.data_ptr(), x.numel() // weight.shape[0], weight.shape[0], eps,
             torch.get_num_threads())
        return out

    return RmsNorm(f"kvqa's {'AVX-512' if lanes == 16 else 'AVX2'} RMS norm", run, lanes,
                   ctypes.cast(norm, ctypes.c_void_p).value)


@functools.cache
def choose_rms_norm() -> RmsNorm:
    """kvqa's norm on an x86 CPU with AVX2 or AVX-512 where it builds (KVQA_NORM_KERNEL=torch: PyTorch's always),
    else PyTorch's."""
    return built_or(SOURCE, load, TORCH, env="KVQA_NORM_KERNEL", log=log,
                    failed="norms run on PyTorch's operations, a little slower")
