"""What one token's (or one question's) matrix products cost in each weight form, on this CPU: SmolLM2-135M's shapes
(30 layers' fused q/k/v, o, fused gate/up and down on every row; the tied output layer on the last row, as kvqa asks
for the last position's logits), random weights, one process.

    .venv/bin/python experiments/weight_products.py [--rows 1,8,16,24,32,80,512]

Forms: float32 `F.linear`; kvqa.model.weights.Int8Linear on its three paths: the int8 kernel (this machine's choice,
kvqa.model.kernels.int8_kernel: the decode step's; and torch's `_weight_int8pack_mm`, bfloat16 inputs, beside it), the
int8 rows
widened to float32 and to bfloat16 for the product from 2 rows on (choose_widening's two rules for long products; one
row: the kernel); the int8 rows as a bfloat16 copy held beside them (what widening costs against holding one);
bfloat16 weights; int4 through `torch.ops.aten._weight_int4pack_mm_for_cpu` (groups of 64, asymmetric), with float32
(up to 8 rows) and with bfloat16 inputs. Prints milliseconds per product of all the shapes and each against float32,
and checks that int4's rows are independent (a row alone gives the bits it gives among others). Each shape's matrix
is the same at every repeat, so the int8 ones stay in the CPU's caches: for the rows where the kernel and a widening
cross, not for a decode step's reading from memory (the bench). docs/performance.md."""

from __future__ import annotations

import argparse
import time

import torch
import torch.nn.functional as F

from kvqa.model.kernels.int8_kernel import TORCH, choose_kernel
from kvqa.model.weights import Int8Linear, Widening, int8_rows

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
    """A forward of `rows` tokens as kvqa runs one: every layer's products on all rows, the output layer on the last
    (kvqa asks for the last position's logits only)."""
    torch.manual_seed(0)
    total: dict[str, float] = {}
    for (out, n_in), times, n in [(s, LAYERS, rows) for s in LAYER_SHAPES] + [(HEAD, 1, 1)]:
        w = torch.randn(out, n_in) * 0.05
        x = torch.randn(n, n_in)
        xb = x.to(torch.bfloat16)
        int8, scales = int8_rows(w)  # kvqa's own int8 form
        wb = w.to(torch.bfloat16)
        packed, sz = int4_pack(w, GROUP)
        szb = sz.to(torch.bfloat16)
        one = torch.ops.aten._weight_int4pack_mm_for_cpu(x[:1].contiguous(), packed, GROUP, sz)
        assert torch.equal(one[0], torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, GROUP, sz)[0])
        copy = int8.to(torch.bfloat16)  # a bfloat16 copy of the int8 rows, held: what kvqa does not do
        kernel, to_float32, to_bfloat16 = (Int8Linear(int8, scales, Widening(dtype, least))  # that path from 2 rows
                                           for dtype, least in ((torch.bfloat16, 1 << 30), (torch.float32, 2),
                                                                (torch.bfloat16, 2)))
        torch_kernel = Int8Linear(int8, scales, Widening(torch.bfloat16, 1 << 30), TORCH)
        forms = {"float32": lambda: F.linear(x, w),
                 "int8": lambda: kernel(x),
                 "int8 (torch's kernel)": lambda: torch_kernel(x),
                 "int8 widened to float32": lambda: to_float32(x),
                 "int8 widened to bfloat16": lambda: to_bfloat16(x),
                 "int8 as a held bfloat16 copy": lambda: F.linear(xb, copy).float() * scales.float(),
                 "bfloat16": lambda: F.linear(xb, wb),
                 "int4 (float32 in)": lambda: torch.ops.aten._weight_int4pack_mm_for_cpu(x, packed, GROUP, sz),
                 "int4 (bfloat16 in)": lambda: torch.ops.aten._weight_int4pack_mm_for_cpu(xb, packed, GROUP, szb)}
        if rows > 8:  # no fast path for float32 inputs: 13x float32 at one row, minutes at 512
            del forms["int4 (float32 in)"]
        for name, f in forms.items():
            total[name] = total.get(name, 0.0) + timed(f, 10 if n > 8 else 30) * times
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", default="1,8,16,24,32,80,512", help="input rows per product (1: a decode step)")
    args = parser.parse_args()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads, {torch.backends.cpu.get_cpu_capability()}, "
          f"int8: {choose_kernel()}")
    for rows in (int(r) for r in args.rows.split(",")):
        total = products(rows)
        print(f"{rows} rows: " + ", ".join(f"{k} {v:.1f} ms ({v / total['float32']:.2f}x)" for k, v in total.items()))


if __name__ == "__main__":
    main()
