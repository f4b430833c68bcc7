"""What one token's (or one question's) matrix products cost in each weight form, on this CPU: SmolLM2-135M's shapes
(30 layers' fused q/k/v, o, fused gate/up and down; the tied output layer), random weights, one process.

    .venv/bin/python scripts/weight_products.py [--rows 1,8,80]

Forms: float32 `F.linear`; int8 rows through `torch._weight_int8pack_mm` (bfloat16 inputs, kvqa.weights' decode
path); bfloat16 weights; int4 through `torch.ops.aten._weight_int4pack_mm_for_cpu` (groups of 64, asymmetric), with
float32 and with bfloat16 inputs. Prints milliseconds per product of all the shapes and each against float32, and
checks that int4's rows are independent (a row alone gives the bits it gives among others). docs/performance.md."""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from kvqa.weights import int8_rows  # noqa: E402

LAYERS = 30
LAYER_SHAPES = [(960, 576), (576, 576), (3072, 576), (576, 1536)]  # (out, in)
HEAD = (49152, 576)
GROUP = 64


def int4_pack(w: torch.Tensor, group: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(packed, scales_and_zeros): w ~ (q - 8) * scale + zero per group of `group` inputs, q in 0..15."""
    out, n_in = w.shape
    g = w.reshape(out, n_in // group, group)
    lo, hi = g.amin(-1), g.amax(-1)
    scale = ((hi - lo) / 15).clamp(min=1e-8)
    q = torch.round((g - lo[..., None]) / scale[..., None]).clamp(0, 15).to(torch.int32).reshape(out, n_in)
    packed = torch.ops.aten._convert_weight_to_int4pack_for_cpu(q, 1)
    return packed, torch.stack([scale, lo + scale * 8], -1).transpose(0, 1).contiguous()


def timed(f, n: int = 30) -> float:
    for _ in range(3):
        f()
    started = time.perf_counter()
    for _ in range(n):
        f()
    return (time.perf_counter() - started) / n * 1e3


def products(rows: int) -> dict[str, float]:
    torch.manual_seed(0)
    total: dict[str, float] = {}
    for (out, n_in), times in [(s, LAYERS) for s in LAYER_SHAPES] + [(HEAD, 1)]:
        w = torch.randn(out, n_in) * 0.05
        x = torch.randn(rows, n_in)
        xb = x.to(torch.bfloat16)
        int8, scales = int8_rows(w)  # kvqa's own int8 form
        wb = w.to(torch.bfloat16)
        packed, sz = int4_pack(w, GROUP)
        szb = sz.to(torch.bfloat16)
        one = torch.ops.aten._weight_int4pack_mm_for_cpu(x[:1].contiguous(), packed, GROUP, sz)
        assert torch.equal(one[0], torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, GROUP, sz)[0])
        forms = {"float32": lambda: F.linear(x, w),
                 "int8": lambda: torch._weight_int8pack_mm(xb, int8, scales),
                 "bfloat16": lambda: F.linear(xb, wb),
                 "int4 (float32 in)": lambda: torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, GROUP, sz),
                 "int4 (bfloat16 in)": lambda: torch.ops.aten._weight_int4pack_mm_for_cpu(xb, packed, GROUP, szb)}
        for name, f in forms.items():
            total[name] = total.get(name, 0.0) + timed(f, 10 if rows > 8 else 30) * times
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1,8,80", help="input rows per product (1: a decode step)")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {torch.backends.cpu.get_cpu_capability()}")
    for rows in (int(r) for r in args.rows.split(",")):
        total = products(rows)
        print(f"{rows} rows: " + ", ".join(f"{k} {v:.1f} ms ({v / total['float32']:.2f}x)" for k, v in total.items()))


if __name__ == "__main__":
    main()
