"""Attention for one new token over the cache (a decode step): kvqa's own kernel (decode_attention.c, built for this
CPU at first use: kvqa.model.kernels.native) where the CPU has AVX2 or AVX-512 and a C compiler is here, else PyTorch's
SDPA.

At a long context a decode step's attention reads every cached key and value once for a single query token.
PyTorch's CPU kernel reads them at about 14 GB/s here, kvqa's at about 30 (30 layers at 4,096 tokens: 12-13 -> 5.4 ms
in float32, 7 -> 3.4 ms in bfloat16; docs/performance.md). Where the cache holds bfloat16, kvqa's keeps the query and
its output float32 (PyTorch's rounds both to bfloat16). The same attention up to rounding (the
summation order and the exponential differ: tests/test_decode_attention.py); the written-out steps and the forward's
one-token attention (kvqa.model.attention.grouped_sdpa) call the same function, so they stay equal bit for bit. The
kernel
is part of a cache's key (kvqa.cache.restore.cache_key): a prefill whose last chunk is one token runs through it.
"""

from __future__ import annotations

import ctypes
import functools
import logging
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F

from kvqa.model.kernels.native import built_or, cpu_vendor

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("decode_attention.c")


@dataclass(frozen=True)
class DecodeAttention:
    """A named attention of one token: run(query, keys, values, scale), or None for PyTorch's SDPA; what it takes."""

    name: str
    run: Callable[[torch.Tensor, torch.Tensor, torch.Tensor, float], torch.Tensor] | None = None
    max_group: int = 0
    max_dim: int = 0
    address: int | None = None  # kvqa_decode_attention's, for C that calls it (kvqa.model.kernels.llama_layer)

    def takes(self, query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor) -> bool:
        """Whether run() reads these as they are laid out: one sequence on the CPU, a float32 query, keys and values
        float32, bfloat16 or int8 alike, each key and value a contiguous row, a head size that is a multiple of 16."""
        b, kv, group, d = query.shape
        return (self.run is not None and b == 1 and query.device.type == keys.device.type == "cpu"
                and query.dtype == torch.float32 and keys.dtype == values.dtype
                and keys.dtype in HELD and keys.shape == values.shape
                and keys.shape[:2] == (1, kv) and keys.shape[3] == d and keys.shape[2] > 0
                and group <= self.max_group and d <= self.max_dim and d % 16 == 0
                and keys.stride()[1:] == values.stride()[1:] and keys.stride(3) == 1 and keys.stride(2) == d)

    def __str__(self) -> str:
        return self.name


SDPA = DecodeAttention("PyTorch's SDPA")
HELD = {torch.float32: 0, torch.bfloat16: 1, torch.int8: 2}  # what the kernel reads, as decode_attention.c numbers it


def attend_one(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float) -> torch.Tensor:
    """One token's attention, its query heads folded into their key/value head's group: query (1, KV, G, D), keys
    and values (1, KV, S, D) in the cache's dtype (int8: the integers themselves, their scales the caller's) ->
    (1, KV, G, D) in the query's dtype."""
    kernel = choose_decode_attention()
    if kernel.takes(query, keys, values):
        return kernel.run(query, keys, values, scale)
    if keys.dtype == torch.int8:  # SDPA takes no integers: widened
        keys, values = keys.to(query.dtype), values.to(query.dtype)
    return F.scaled_dot_product_attention(query.to(keys.dtype), keys, values, scale=scale).to(query.dtype)


def load(path: Path) -> DecodeAttention:
    """kvqa's attention from a library build() made."""
    library = ctypes.CDLL(str(path))
    attend = library.kvqa_decode_attention
    attend.argtypes = [ctypes.c_void_p] * 3 + [ctypes.c_int64] * 2 + [ctypes.c_int] * 3 + [
        ctypes.c_float, ctypes.c_int, ctypes.c_void_p, ctypes.c_int]
    attend.restype = ctypes.c_int
    group, dim = ctypes.c_int(), ctypes.c_int()
    library.kvqa_decode_attention_limits(ctypes.byref(group), ctypes.byref(dim))
    lanes = library.kvqa_decode_attention_lanes()  # 16 (AVX-512) or 8 (AVX2)

    def run(query: torch.Tensor, keys: torch.Tensor, values: torch.Tensor, scale: float) -> torch.Tensor:
        query = query.contiguous()
        _, kv, g, d = query.shape
        out = torch.empty_like(query)
        failed = attend(query.data_ptr(), keys.data_ptr(), values.data_ptr(), keys.stride(1), keys.shape[2], kv, g,
                        d, scale, HELD[keys.dtype], out.data_ptr(), torch.get_num_threads())
        if failed:
            raise MemoryError("kvqa's decode attention could not allocate its scratch memory")
        return out

    return DecodeAttention(f"kvqa's {'AVX-512' if lanes == 16 else 'AVX2'} decode attention", run, group.value,
                           dim.value, ctypes.cast(attend, ctypes.c_void_p).value)


def prefetch_flags(vendor: str | None = None) -> tuple[str, ...]:
    """The build's software prefetching (decode_attention.c's AHEAD) for this CPU's maker: two blocks ahead on an
    Intel CPU, none elsewhere. Measured on the two CPUs kvqa has run on (the two builds alternately;
    docs/performance.md): on an Intel Xeon (AVX-512, AMX) SmolLM2's int8 decode step, bfloat16 cache, took 16.9
    against 18.6 ms at 4,096 tokens and 20.3 against 22.6 at 7,000 with prefetching (the same at 1,024); on an AMD
    EPYC (AVX-512) prefetching read 30 layers' caches slower (20-22 against 26-31 GB/s). The same bits either way, so
    the choice changes only the speed."""
    return ("-DAHEAD=2",) if (vendor if vendor is not None else cpu_vendor()) == "GenuineIntel" else ()


@functools.cache
def choose_decode_attention() -> DecodeAttention:
    """kvqa's kernel on an x86 CPU with AVX2 or AVX-512 where it builds (KVQA_ATTENTION_KERNEL=torch: PyTorch's
    SDPA always), else SDPA; prefetching as suits the CPU (prefetch_flags)."""
    return built_or(SOURCE, load, SDPA, env="KVQA_ATTENTION_KERNEL", log=log, flags=prefetch_flags(),
                    failed="decode steps attend with PyTorch's SDPA, slower at long contexts")
