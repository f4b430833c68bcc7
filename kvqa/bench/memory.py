"""What the bench measures about memory: peak memory during a block, the bytes a model's weights hold, and how fast
this machine reads memory (what bounds a decode step from below). Imports no compute of kvqa's."""

from __future__ import annotations

import gc
import re
import threading
import time
from dataclasses import dataclass

import torch

from ..timing import now


def _proc_status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            m = re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M)
        return int(m.group(1)) if m else None
    except OSError:
        return None


def _rss() -> int:
    kb = _proc_status_kb("VmRSS")
    if kb is not None:
        return kb * 1024
    import psutil

    return psutil.Process().memory_info().rss


class PeakMemory:
    """Peak memory during a block. On CUDA: the allocator's peak (reset at the start). Elsewhere: the process's RSS
    high-water mark, reset at the start through /proc/self/clear_refs on Linux, else sampled every 2 ms.

    `total` is the peak itself, `increase` the peak above the level at the start of the block."""

    def __init__(self, device: torch.device):
        self.device = device
        self.start = self.total = 0
        self._sampler: threading.Thread | None = None
        self._stop = threading.Event()

    def __enter__(self) -> PeakMemory:
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
            self.start = torch.cuda.memory_allocated(self.device)
            return self
        self.start = _rss()
        self.total = self.start
        if not self._reset_high_water():
            self._sampler = threading.Thread(target=self._sample, daemon=True)
            self._sampler.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.total = torch.cuda.max_memory_allocated(self.device)
        elif self._sampler is not None:
            self._stop.set()
            self._sampler.join()
            self.total = max(self.total, _rss())
        else:
            self.total = max(self.start, (_proc_status_kb("VmHWM") or 0) * 1024)

    @property
    def increase(self) -> int:
        return max(0, self.total - self.start)

    @staticmethod
    def _reset_high_water() -> bool:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM to the current RSS (Linux 4.0+)
            return _proc_status_kb("VmHWM") is not None
        except OSError:
            return False

    def _sample(self) -> None:
        while not self._stop.wait(0.002):
            self.total = max(self.total, _rss())


# ---------------------------------------------------------------------------------------------------------------
# The floor of a decode step: every weight and every cached key and value read once, at this machine's bandwidth


@dataclass(frozen=True)
class Bandwidth:
    """This machine's memory read bandwidth, as torch reads it with its current threads."""

    bytes_per_s: float
    tensor_bytes: int  # the size of the tensor read
    runs: int  # rounds timed, each one sum and one matrix-vector product; the fastest read counts

    @property
    def gb_s(self) -> float:
        return self.bytes_per_s / 1e9


def read_bandwidth(device: torch.device, *, seconds: float = 1.0, tensor_bytes: int | None = None) -> Bandwidth:
    """Read a float32 tensor far larger than any cache (1 GiB on CUDA, 512 MiB elsewhere) for about `seconds` in
    all, allocation included, at least 3 rounds; returns the fastest read's bytes per second.

    Each round reads it twice: t.sum(), and a matrix-vector product over it as a (rows, 4096) matrix, the read a
    decode step's linear layers do. On some CPUs the sum's reduction cannot keep up with memory (a 2-core Xeon:
    ~12 GB/s summed, ~16 GB/s multiplied), and a floor the decode can beat is no floor."""
    deadline = time.perf_counter() + seconds
    width = 4096
    rows = max(1, (tensor_bytes or (2**30 if device.type == "cuda" else 2**29)) // (4 * width))
    t = torch.ones(rows, width, dtype=torch.float32, device=device)  # ones, not empty: pages touched before timing
    vector = torch.ones(width, dtype=torch.float32, device=device)
    reads = (t.sum, lambda: torch.mv(t, vector))
    best, runs = float("inf"), 0
    while runs < 3 or time.perf_counter() < deadline:
        for read in reads:
            started = now(device)
            read()
            best = min(best, now(device) - started)
        runs += 1
    return Bandwidth(bytes_per_s=rows * width * 4 / best, tensor_bytes=rows * width * 4, runs=runs)
