"""kvqa's RMS norm (kvqa/model/kernels/rms_norm.c through kvqa.model.kernels.rms_norm): transformers' LlamaRMSNorm
within float32's rounding, in its AVX-512 and its AVX2 build, a row's result the same bits however many rows come
with it; a loaded model's norms run on it in the forward and the written-out step alike (their bit-for-bit tests:
tests/test_llama_step.py), its name in a cache's key; PyTorch's norm where it cannot be built or is not asked for."""

from __future__ import annotations

import logging

import pytest
import torch
from transformers.models.llama.modeling_llama import LlamaRMSNorm

from conftest import HERE, kernel_builds, needs_a_build
from kvqa.model.kernels import native, rms_norm
from kvqa.model.kernels.rms_norm import SOURCE, TORCH, choose_rms_norm, load


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict[str, rms_norm.RmsNorm]:
    return kernel_builds(SOURCE, load, tmp_path_factory.mktemp("kernels"))


def llama_norm(width: int, eps: float = 1e-5) -> LlamaRMSNorm:
    norm = LlamaRMSNorm(width, eps=eps)
    with torch.no_grad():
        norm.weight.copy_(torch.randn(width))
    return norm


@needs_a_build
@pytest.mark.parametrize("which", ["native", "avx2"])
@pytest.mark.parametrize("rows, width, eps", [(1, 576, 1e-5), (7, 576, 1e-5), (512, 576, 1e-5), (3, 16, 1e-6),
                                              (2, 3072, 1e-5), (1, 64, 0.1)])
def test_the_norm_is_transformers_within_rounding_and_a_row_depends_on_itself_alone(builds, which, rows, width, eps):
    if which not in builds:
        pytest.skip("the AVX2 build is tried beside an AVX-512 one")
    kernel, module = builds[which], llama_norm(width, eps)
    x = torch.randn(1, rows, width) * 4
    got = kernel.run(x, module.weight, eps)
    assert got.shape == x.shape and got.dtype == torch.float32
    torch.testing.assert_close(got, module(x), rtol=2e-6, atol=2e-6)
    assert torch.equal(kernel.run(x[:, -1:], module.weight, eps), got[:, -1:])  # alone or among others, the same
    assert torch.equal(kernel.run(x[:, 0].clone(), module.weight, eps), got[:, 0])


@needs_a_build
def test_what_it_cannot_read_stays_with_pytorch(builds):
    kernel = builds["native"]
    assert kernel.takes(torch.ones(576))
    for why, weight in {"bfloat16": torch.ones(576, dtype=torch.bfloat16), "a width not a multiple of 16":
                        torch.ones(100), "not contiguous": torch.ones(1152)[::2]}.items():
        assert not kernel.takes(weight), why
    with pytest.raises(ValueError, match="RMS norm of torch.bfloat16"):
        kernel.run(torch.ones(1, 576, dtype=torch.bfloat16), torch.ones(576), 1e-5)
    assert not TORCH.takes(torch.ones(576))


@needs_a_build
def test_a_loaded_models_norms_run_on_it_and_name_it_in_a_caches_key(tiny_lm):
    from kvqa.cache.restore import cache_key
    from kvqa.documents.reading import Document
    from kvqa.model.norms import norm_of

    name = f"kvqa's {'AVX-512' if HERE == 'AVX512' else 'AVX2'} RMS norm"
    norms = [m for m in tiny_lm.model.modules() if isinstance(m, LlamaRMSNorm)]
    assert len(norms) == 2 * 2 + 1 and all(str(m.kvqa_norm) == name for m in norms)  # per layer two, and the last
    x = torch.randn(1, 3, norms[0].weight.shape[0])
    assert torch.equal(norms[0](x), choose_rms_norm().run(x, norms[0].weight, norms[0].variance_epsilon))
    assert norm_of(tiny_lm.model) == name
    assert f"+ {name} +" in cache_key(tiny_lm, Document("x.txt", "text"), weights="fp32").attention


def test_pytorchs_norm_where_kvqas_cannot_be_built_or_is_not_asked_for(monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(native, "default_cache_dir", lambda: tmp_path)
    monkeypatch.setattr(native, "vector_cpu", lambda: True)  # the build tried on any CPU
    choose_rms_norm.cache_clear()
    try:
        monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
        with caplog.at_level(logging.WARNING, logger="kvqa.model.kernels.rms_norm"):
            assert choose_rms_norm() is TORCH
        assert "could not build kvqa's" in caplog.text and "no C compiler" in caplog.text
        choose_rms_norm.cache_clear()
        monkeypatch.delenv("CC")
        monkeypatch.setenv("KVQA_NORM_KERNEL", "torch")  # asked for by name
        assert choose_rms_norm() is TORCH
    finally:
        choose_rms_norm.cache_clear()
