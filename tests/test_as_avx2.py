"""scripts/as_avx2.py runs a script in AVX2 code (torch's AVX2 kernels, kvqa's kernels built for AVX2, float32
widening, a bfloat16 cache attended in float32): what docs/performance.md's AVX2 tables on an AVX-512 machine rest
on."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kvqa.model.kernels.decode_attention import choose_decode_attention
from kvqa.model.kernels.native import vector_cpu

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.skipif(not vector_cpu() or choose_decode_attention().address is None,
                    reason="kvqa's C kernels need an x86 CPU with AVX2 or AVX-512 and a C compiler")
def test_a_script_runs_in_avx2_code(tmp_path):
    script = tmp_path / "kernels.py"
    script.write_text("import sys, torch\n"
                      "from kvqa.model.kernels.decode_attention import choose_decode_attention\n"
                      "from kvqa.model.kernels.llama_layer import library\n"
                      "from kvqa.model.weights import choose_widening\n"
                      "print(torch.backends.cpu.get_cpu_capability(), choose_decode_attention(), choose_widening(),"
                      " library() is not None, sys.argv[1:])\n")
    run = subprocess.run([sys.executable, str(ROOT / "scripts" / "as_avx2.py"), str(script), "--flag"],
                         capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert run.returncode == 0, run.stderr
    last = run.stdout.strip().splitlines()[-1]
    assert last.startswith("AVX2 kvqa's AVX2 decode attention float32 products from 128 rows, bfloat16 cache,"
                           " attention in float32")
    assert last.endswith("True ['--flag']")
