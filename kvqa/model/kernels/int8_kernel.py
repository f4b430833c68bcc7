"""Which kernel multiplies few input rows (a decode step, a drafted run) by int8 weights: kvqa's own (int8_matmul.c,
built for this CPU at first use) where a C compiler and AVX2 or AVX-512 are here, else torch's `_weight_int8pack_mm`.

Both read each weight as the one byte it is stored in; kvqa's reads at about float32's rate, where torch's reads at
about half of it (docs/performance.md measures both). They give different bits (torch's rounds the inputs to bfloat16,
kvqa's keeps them float32), so the kernel is part of a cache's key (kvqa.model.weights.products_of). In both an output
row
depends on its own input row alone, bit for bit. The build is cached under the cache folder (kvqa.config), one file
per source, compiler and CPU (kvqa.model.kernels.native); a failed build is logged once and torch's kernel runs.
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

SOURCE = Path(__file__).with_name("int8_matmul.c")


@dataclass(frozen=True)
class Int8Kernel:
    """A named product y = x W^T of float32 rows x and int8 rows W times bfloat16 scales: one per row of W, (N,), or
    one per group of K / groups consecutive weights of a row, (N, groups)."""

    name: str
    multiply: Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
    address: int | None = None  # kvqa_int8_matmul's, for C that calls it (kvqa.model.kernels.llama_layer)

    def __call__(self, x: torch.Tensor, rows: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
        if x.shape[1] % 16:  # kvqa.model.weights.quantize refuses such a model; torch's kernel would read out of bounds
            raise ValueError(f"int8 product of width {x.shape[1]}: a multiple of 16 only")
        return self.multiply(x, rows, scales)

    def __str__(self) -> str:
        return self.name


def _torch_multiply(x: torch.Tensor, rows: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    if scales.dim() == 2:  # torch's kernel takes a scale a row only: the rows widened, as a long product is
        return torch.nn.functional.linear(x, widened(rows, scales, x.dtype))
    return torch._weight_int8pack_mm(x.to(torch.bfloat16), rows, scales).to(x.dtype)


def widened(rows: torch.Tensor, scales: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    """The int8 rows times their scales (one a row, or one a group of each row's weights) in dtype."""
    if scales.dim() == 1:
        return rows.to(dtype) * scales.to(dtype)[:, None]
    n, k = rows.shape
    return (rows.view(n, scales.shape[1], -1).to(dtype) * scales.to(dtype)[:, :, None]).view(n, k)


TORCH = Int8Kernel("torch's _weight_int8pack_mm", _torch_multiply)


def load(path: Path) -> Int8Kernel:
    """kvqa's kernel from a library build() made."""
    library = ctypes.CDLL(str(path))
    multiply = library.kvqa_int8_matmul
    multiply.argtypes = [ctypes.c_void_p] * 4 + [ctypes.c_int64] * 4 + [ctypes.c_int]
    multiply.restype = None
    lanes = library.kvqa_int8_lanes()  # 16 or 8: divides the widths Int8Kernel lets through

    def run(x: torch.Tensor, rows: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
        x = x.float().contiguous()
        (m, k), n = x.shape, rows.shape[0]
        groups = scales.shape[1] if scales.dim() == 2 else 1
        if (rows.shape[1] != k or rows.dtype != torch.int8 or scales.dtype != torch.bfloat16
                or scales.shape not in ((n,), (n, groups)) or k % groups or (k // groups) % lanes
                or not rows.is_contiguous() or not scales.is_contiguous()):  # what the C code reads, as it reads it
            raise ValueError(f"int8 product of {tuple(x.shape)} by {tuple(rows.shape)} {rows.dtype} rows, "
                             f"{scales.dtype} scales: shapes, dtypes or layout")
        y = torch.empty(m, n, dtype=torch.float32)
        multiply(x.data_ptr(), rows.data_ptr(), scales.data_ptr(), y.data_ptr(), m, n, k, k // groups,
                 torch.get_num_threads())
        return y

    return Int8Kernel(f"kvqa's {'AVX-512' if lanes == 16 else 'AVX2'} kernel", run,
                      ctypes.cast(multiply, ctypes.c_void_p).value)


@functools.cache
def choose_kernel() -> Int8Kernel:
    """kvqa's kernel on an x86 CPU with AVX2 or AVX-512 where it builds (KVQA_INT8_KERNEL=torch: torch's always),
    else torch's."""
    return built_or(SOURCE, load, TORCH, env="KVQA_INT8_KERNEL", log=log,
                    failed="int8 products run on torch's kernel, about half as fast")
