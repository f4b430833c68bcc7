"""Memory helpers: how much there is, and handing freed memory back to the system. Imports nothing of kvqa's."""

from __future__ import annotations

import ctypes

import torch


def default_budget_bytes(device: torch.device) -> int:
    """Half the memory available now: free GPU memory on CUDA, else available RAM."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free * 0.5)
    import psutil

    return int(psutil.virtual_memory().available * 0.5)


def release_memory() -> None:
    """Hand memory freed by dropped caches back to the system: CUDA's cached blocks, and glibc's heap, which
    otherwise keeps freed buffers for reuse and the process's RSS high after sessions end."""
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):  # not glibc: nothing to do
        pass
