"""kvqa's int8 kernel (kvqa/model/kernels/int8_matmul.c through kvqa.model.kernels.int8_kernel): built for this CPU and
cached, its products
those of the int8 rows in float32, each output row its own input row's alone bit for bit (the AVX-512 and the AVX2
builds), and torch's kernel where it cannot be built, with the reason logged."""

from __future__ import annotations

import copy
import logging

import pytest
import torch
import torch.nn.functional as F

from conftest import HERE, kernel_builds, needs_a_build
from kvqa.errors import ModelError
from kvqa.model.kernels import int8_kernel, native
from kvqa.model.kernels.int8_kernel import SOURCE, TORCH, choose_kernel, load, widened
from kvqa.model.kernels.native import build
from kvqa.model.weights import int8_rows, quantize


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict[str, int8_kernel.Int8Kernel]:
    return kernel_builds(SOURCE, load, tmp_path_factory.mktemp("kernels"))


def reference(x: torch.Tensor, rows: torch.Tensor, scales: torch.Tensor) -> torch.Tensor:
    if scales.dim() == 2:  # a scale a run of each row's weights
        n, k = rows.shape
        return F.linear(x, (rows.float().view(n, scales.shape[1], -1) * scales.float()[:, :, None]).view(n, k))
    return F.linear(x, rows.float() * scales.float()[:, None])


@needs_a_build
def test_the_build_is_named_for_its_vector_units_and_kept(builds, tmp_path, monkeypatch):
    assert builds["native"].name == f"kvqa's {'AVX-512' if HERE == 'AVX512' else 'AVX2'} kernel"
    if "avx2" in builds:
        assert builds["avx2"].name == "kvqa's AVX2 kernel"
    first = build(SOURCE, tmp_path)
    made = first.stat().st_mtime_ns
    assert build(SOURCE, tmp_path) == first and first.stat().st_mtime_ns == made  # the second time: the kept file
    assert [p.name for p in tmp_path.iterdir()] == [first.name]  # nothing half-written left beside it


@needs_a_build
@pytest.mark.parametrize("which", ["native", "avx2"])
@pytest.mark.parametrize("out,width", [(1001, 64), (64, 576), (7, 1536)])  # rows not a multiple of 4 among them
@pytest.mark.parametrize("group", [None, 32, 64])  # a scale a row, or a run of 32 or 64 of its weights
def test_products_are_the_int8_rows_in_float32_each_row_alone(builds, which, out, width, group):
    if which not in builds:
        pytest.skip("this CPU has no AVX-512: its build is the AVX2 one")
    kernel = builds[which]
    torch.manual_seed(out)
    rows, scales = int8_rows(torch.randn(out, width) * 0.1 * torch.logspace(-2, 0, width), group)  # columns of
    assert scales.shape == ((out,) if group is None else (out, width // group))  # very different sizes
    x = torch.randn(19, width)
    together = kernel(x, rows, scales)
    assert together.dtype == torch.float32 and together.shape == (19, out)
    torch.testing.assert_close(together, reference(x, rows, scales), rtol=1e-5, atol=1e-5 * width ** 0.5)
    alone = torch.cat([kernel(x[i: i + 1], rows, scales) for i in range(19)])
    assert torch.equal(together, alone)
    for n in (2, 4, 5, 8, 9):  # blocks of 4 input rows and what is left over, bit for bit the same
        assert torch.equal(kernel(x[3: 3 + n], rows, scales), together[3: 3 + n])
    if group:  # torch's kernel takes a scale a row only: grouped rows are widened for it
        torch.testing.assert_close(TORCH(x, rows, scales), reference(x, rows, scales))
        assert torch.equal(widened(rows, scales, torch.float32).view(out, -1, group)[:, -1],
                           rows.view(out, -1, group)[:, -1].float() * scales[:, -1:].float())


def test_a_width_not_a_multiple_of_16_is_refused(builds, tiny_lm):
    """Both kernels read 16 weights at a time (torch's reads out of bounds on other widths, crashing the process):
    a model with such a layer is refused with the layer named, a product of such a width never runs."""
    for kernel in (TORCH, *builds.values()):
        with pytest.raises(ValueError, match="width 72"):
            kernel(torch.randn(2, 72), *int8_rows(torch.randn(5, 72)))
    model = copy.deepcopy(tiny_lm.model)
    model.model.layers[1].mlp.down_proj = torch.nn.Linear(72, 64, bias=False)
    with pytest.raises(ModelError) as refused:
        quantize(model, "int8")
    assert "model.layers.1.mlp.down_proj" in str(refused.value) and "--weights fp32" in str(refused.value)
    assert isinstance(model.model.layers[0].mlp.down_proj, torch.nn.Linear)  # refused before anything changed


@needs_a_build
def test_what_the_c_code_cannot_read_is_refused(builds):
    rows, scales = int8_rows(torch.randn(8, 32))
    kernel, x = builds["native"], torch.randn(1, 32)
    for bad in ((rows.float(), scales), (rows, scales.float()), (rows.t().contiguous().t(), scales),
                (rows[:, :16], scales), (rows, scales[:4]), (rows, scales[:, None].expand(8, 3).contiguous())):
        with pytest.raises(ValueError, match="shapes, dtypes or layout"):
            kernel(x, *bad)


def test_torchs_kernel_where_kvqas_cannot_be_built(monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(native, "default_cache_dir", lambda: tmp_path)
    choose_kernel.cache_clear()
    try:
        monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))  # a name that is not on PATH either
        with caplog.at_level(logging.WARNING, logger="kvqa.model.kernels.int8_kernel"):
            assert choose_kernel() is TORCH
        assert "could not build kvqa's" in caplog.text and "no C compiler" in caplog.text and "CC" in caplog.text
        choose_kernel.cache_clear()
        monkeypatch.delenv("CC")
        monkeypatch.setenv("KVQA_INT8_KERNEL", "torch")  # asked for by name
        assert choose_kernel() is TORCH
    finally:
        choose_kernel.cache_clear()
    x = torch.randn(3, 64)
    rows, scales = int8_rows(torch.randn(10, 64))
    expected = (x.to(torch.bfloat16).float() @ rows.float().T) * scales.float()  # inputs and output in bfloat16
    torch.testing.assert_close(TORCH(x, rows, scales), expected, rtol=2**-8, atol=1e-6)


@needs_a_build
def test_a_source_that_does_not_compile_is_an_error_build_reports(monkeypatch, tmp_path):
    broken = tmp_path / "int8_matmul.c"
    broken.write_text("this is not C")
    with pytest.raises(native.subprocess.CalledProcessError) as failed:
        build(broken, tmp_path / "kernels")
    assert "error" in failed.value.stderr
    assert not list((tmp_path / "kernels").glob("*.so"))
