"""Run a kvqa script in AVX2 code on a CPU with AVX-512: `scripts/as_avx2.py SCRIPT [ARGS...]`.

For measuring what an AVX2 CPU runs where only an AVX-512 one is at hand (docs/performance.md): torch's AVX2 kernels
(the environment variables below, set before torch loads), kvqa's C kernels built with -mno-avx512f (built and kept
apart from the native ones: the flags are part of a build's key), and int8's long products widened to float32 with a
bfloat16 cache attended in float32 (no AMX, no AVX-512 bfloat16), as an AVX2 CPU gets. The memory and clocks stay the
machine's own. SCRIPT runs in this process (runpy), so its patches hold; it imports kvqa as the venv has it installed
(`make setup`), like every script here, and nothing from its own folder.
"""

from __future__ import annotations

import os
import runpy
import sys
from pathlib import Path

AVX2 = {"ATEN_CPU_CAPABILITY": "avx2", "ONEDNN_MAX_CPU_ISA": "AVX2", "MKL_ENABLE_INSTRUCTIONS": "AVX2"}


def main() -> None:
    if any(os.environ.get(k) != v for k, v in AVX2.items()):  # torch reads them as it loads: start again with them
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **AVX2})
    import torch

    torch.cpu._is_amx_tile_supported = lambda: False
    torch.cpu._is_avx512_bf16_supported = lambda: False
    from kvqa.model.kernels import native

    build = native.build
    native.build = lambda source, folder=None, compiler=None, flags=(): build(source, folder, compiler,
                                                                             (*flags, "-mno-avx512f"))
    from kvqa.model.kernels.int8_kernel import choose_kernel
    from kvqa.model.weights import choose_widening

    print(f"AVX2 code: torch {torch.backends.cpu.get_cpu_capability()}, {choose_kernel()}, {choose_widening()}",
          flush=True)
    script = Path(sys.argv[1])
    sys.argv = sys.argv[1:]
    runpy.run_path(str(script), run_name="__main__")


if __name__ == "__main__":
    main()
