"""kvqa's 4-bit product for few input rows (int4_matmul.c), built for this CPU at first use where AVX-512 with VNNI
is (its integer dot products make 4-bit weights cheaper to multiply than to read); elsewhere None, and the weights
stay int8 (kvqa.model.int4). KVQA_INT4_KERNEL=torch turns it off. It rounds each run of 32 inputs to int8 (as
llama.cpp's Q8 inputs are): an output row depends on its own input row alone, bit for bit, whatever the number of
rows."""

from __future__ import annotations

import ctypes
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch

from kvqa.model.kernels.native import built_or, cpu_has

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("int4_matmul.c")
RUN = 32  # weights per scale and min
STEP = 64  # weights a dot product takes: a row's width must be a multiple


@dataclass(frozen=True)
class Int4Kernel:
    """y = x W^T of float32 rows x (M, K) and 4-bit rows W: nibbles (N, K / 2) uint8, scales and mins (N, K / 32)
    float16, w = scale q - min."""

    name: str
    multiply: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
    address: int | None = None  # kvqa_int4_matmul's, for C that calls it (kvqa.model.kernels.llama_layer)

    def __call__(self, x: torch.Tensor, nibbles: torch.Tensor, scales: torch.Tensor,
                 mins: torch.Tensor) -> torch.Tensor:
        return self.multiply(x, nibbles, scales, mins)

    def __str__(self) -> str:
        return self.name


def takes(k: int, nibbles: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor) -> bool:
    """Whether the C code reads these 4-bit weights of rows k wide as they lie (shapes, dtypes, layout)."""
    n = nibbles.shape[0]
    return (k % STEP == 0 and nibbles.shape == (n, k // 2) and nibbles.dtype == torch.uint8
            and scales.shape == (n, k // RUN) and mins.shape == scales.shape
            and scales.dtype == torch.float16 and mins.dtype == torch.float16
            and all(t.is_contiguous() for t in (nibbles, scales, mins)))


def load(path: Path) -> Int4Kernel:
    library = ctypes.CDLL(str(path))
    multiply = library.kvqa_int4_matmul
    multiply.argtypes = [ctypes.c_void_p] * 5 + [ctypes.c_int64] * 3 + [ctypes.c_int]
    multiply.restype = None

    def run(x: torch.Tensor, nibbles: torch.Tensor, scales: torch.Tensor, mins: torch.Tensor) -> torch.Tensor:
        x = x.float().contiguous()
        (m, k), n = x.shape, nibbles.shape[0]
        if not takes(k, nibbles, scales, mins):
            raise ValueError(f"4-bit product of {tuple(x.shape)} by {tuple(nibbles.shape)} {nibbles.dtype} nibbles: "
                             "shapes, dtypes or layout")
        y = torch.empty(m, n, dtype=torch.float32)
        multiply(x.data_ptr(), nibbles.data_ptr(), scales.data_ptr(), mins.data_ptr(), y.data_ptr(), m, n, k,
                 torch.get_num_threads())
        return y

    # the name is part of a cache's key (kvqa.model.weights.products_of): a new order of sums, a new name
    return Int4Kernel("kvqa's 4-bit AVX-512 VNNI kernel, 128 weights a step", run,
                      ctypes.cast(multiply, ctypes.c_void_p).value)


@functools.cache
def choose_int4_kernel() -> Int4Kernel | None:
    """kvqa's 4-bit kernel where this CPU has AVX-512 with VNNI and it builds, else None."""
    if not cpu_has("avx512_vnni"):
        return None
    return built_or(SOURCE, load, None, env="KVQA_INT4_KERNEL", log=log,
                    failed="decoding reads int8 weights instead of 4-bit ones")
