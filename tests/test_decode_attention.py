"""kvqa's decode attention (kvqa/model/kernels/decode_attention.c through kvqa.model.kernels.decode_attention): one
token's attention over a cache
as a float64 reference computes it, within float32's rounding, for the shapes of the models kvqa knows and others, on
float32 and bfloat16 caches, windows of a larger buffer included, in its AVX-512 and its AVX2 build; the same bits
on any thread count; what it cannot read goes to PyTorch's SDPA, as does everything where it cannot be built."""

from __future__ import annotations

import logging

import pytest
import torch
import torch.nn.functional as F

from conftest import HERE, kernel_builds, needs_a_build
from kvqa.model.kernels import decode_attention, native
from kvqa.model.kernels.decode_attention import SDPA, SOURCE, attend_one, choose_decode_attention, load


@pytest.fixture(scope="module")
def builds(tmp_path_factory) -> dict[str, decode_attention.DecodeAttention]:
    return kernel_builds(SOURCE, load, tmp_path_factory.mktemp("kernels"))


@pytest.fixture
def kernel(builds) -> decode_attention.DecodeAttention:
    return builds["native"]


def cache(kv: int, length: int, d: int, dtype: torch.dtype, *, start: int = 0, capacity: int | None = None):
    """Keys and values as a cache holds them: rows [start, start + length) of a (1, kv, capacity, d) buffer."""
    capacity = capacity or start + length + 5
    keys, values = (torch.randn(1, kv, capacity, d).to(dtype) for _ in range(2))
    return keys[:, :, start: start + length], values[:, :, start: start + length]


def reference(query, keys, values, scale):
    return F.scaled_dot_product_attention(query.double(), keys.double(), values.double(), scale=scale).float()


@needs_a_build
@pytest.mark.parametrize("which", ["native", "avx2"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("kv, group, d", [(3, 3, 64), (8, 3, 128), (1, 4, 256), (2, 6, 128), (2, 7, 64), (1, 1, 16),
                                         (2, 8, 32)])
@pytest.mark.parametrize("length", [1, 7, 8, 9, 15, 16, 17, 511, 512, 513, 1100])
def test_attention_is_the_reference_within_rounding(builds, which, dtype, kv, group, d, length):
    if which not in builds:
        pytest.skip("this CPU has no AVX-512: its build is the AVX2 one")
    kernel = builds[which]
    torch.manual_seed(length * 7 + d)
    keys, values = cache(kv, length, d, dtype, start=3)
    query = torch.randn(1, kv, group, d) * 3  # sharp enough that the maximum matters
    got = kernel.run(query, keys, values, d ** -0.5)
    assert kernel.takes(query, keys, values)
    assert got.dtype == torch.float32 and got.shape == query.shape
    torch.testing.assert_close(got, reference(query, keys, values, d ** -0.5), rtol=1e-5, atol=2e-6)


@needs_a_build
def test_a_score_far_above_the_rest_and_a_window_of_a_larger_buffer(builds):
    torch.manual_seed(1)  # the same draw on every run: the tolerance is checked on known data
    keys, values = cache(3, 700, 64, torch.float32, start=200, capacity=1000)
    query = torch.randn(1, 3, 3, 64)
    keys[0, 1, 650] = query[0, 1, 2] * 40  # one key that takes nearly all of a query's weight, late in the part
    for kernel in builds.values():
        got = kernel.run(query, keys, values, 0.125)
        torch.testing.assert_close(got, reference(query, keys, values, 0.125), rtol=1e-5, atol=2e-6)
        assert torch.allclose(got[0, 1, 2], values[0, 1, 650], atol=1e-4)


@needs_a_build
def test_the_same_bits_on_any_thread_count(builds):
    torch.manual_seed(2)
    keys, values = cache(3, 2000, 64, torch.bfloat16)
    query = torch.randn(1, 3, 3, 64)
    threads = torch.get_num_threads()
    for kernel in builds.values():
        try:
            outs = []
            for n in (1, 2, 3):
                torch.set_num_threads(n)
                outs.append(kernel.run(query, keys, values, 0.125))
        finally:
            torch.set_num_threads(threads)
        assert all(torch.equal(outs[0], out) for out in outs[1:])


@needs_a_build
def test_what_it_cannot_read_goes_to_sdpa(kernel, monkeypatch):
    monkeypatch.setattr(decode_attention, "choose_decode_attention", lambda: kernel)
    query = torch.randn(1, 2, 3, 64)
    keys, values = cache(2, 40, 64, torch.float32)
    assert kernel.takes(query, keys, values)
    unreadable = {
        "a bfloat16 query": (query.bfloat16(), keys, values),
        "keys and values in two dtypes": (query, keys, values.bfloat16()),
        "float16 keys and values": (query, keys.half(), values.half()),
        "a head size not a multiple of 16": tuple(t[..., :40].contiguous() for t in (query, keys, values)),
        "more query heads to a group than it holds": (torch.randn(1, 2, 9, 64), keys, values),
        "rows that are not contiguous": (query, keys.transpose(2, 3).contiguous().transpose(2, 3), values),
        "two sequences": (query.expand(2, -1, -1, -1), keys.expand(2, -1, -1, -1), values.expand(2, -1, -1, -1)),
        "no keys": (query, keys[:, :, :0], values[:, :, :0]),
        "tensors not on the CPU": (query.to("meta"), keys.to("meta"), values.to("meta")),
    }
    for why, (q, k, v) in unreadable.items():
        assert not kernel.takes(q, k, v), why
    q, k, v = unreadable["a head size not a multiple of 16"]
    expected = F.scaled_dot_product_attention(q, k, v, scale=0.2)
    assert torch.equal(attend_one(q, k, v, 0.2), expected)  # SDPA's own result, as before the kernel


def test_sdpa_where_kvqas_cannot_be_built(monkeypatch, tmp_path, caplog):
    monkeypatch.setattr(native, "default_cache_dir", lambda: tmp_path)
    monkeypatch.setattr(native, "vector_cpu", lambda: True)  # the build tried on any CPU
    choose_decode_attention.cache_clear()
    try:
        monkeypatch.setenv("CC", str(tmp_path / "no-such-compiler"))
        with caplog.at_level(logging.WARNING, logger="kvqa.model.kernels.decode_attention"):
            assert choose_decode_attention() is SDPA
        assert "could not build kvqa's" in caplog.text and "no C compiler" in caplog.text
        choose_decode_attention.cache_clear()
        monkeypatch.delenv("CC")
        monkeypatch.setenv("KVQA_ATTENTION_KERNEL", "torch")  # asked for by name
        assert choose_decode_attention() is SDPA
    finally:
        choose_decode_attention.cache_clear()
    query = torch.randn(1, 2, 3, 64)
    keys, values = cache(2, 30, 64, torch.bfloat16)
    monkeypatch.setattr(decode_attention, "choose_decode_attention", lambda: SDPA)
    expected = F.scaled_dot_product_attention(query.bfloat16(), keys, values, scale=0.125).float()
    assert torch.equal(attend_one(query, keys, values, 0.125), expected)


@needs_a_build
def test_the_kernel_is_what_runs_here_and_is_named_in_a_caches_key(builds, tiny_lm):
    from kvqa.cache.restore import cache_key
    from kvqa.documents.reading import Document

    name = f"kvqa's {'AVX-512' if HERE == 'AVX512' else 'AVX2'} decode attention"
    assert builds["native"].name == choose_decode_attention().name == name
    if "avx2" in builds:
        assert builds["avx2"].name == "kvqa's AVX2 decode attention"
    key = cache_key(tiny_lm, Document("x.txt", "text"), weights="fp32")
    assert key.attention.endswith(f"+ {name}")


@needs_a_build
def test_the_prefetching_build_gives_the_same_bits(builds, tmp_path):
    intel = decode_attention.prefetch_flags("GenuineIntel")
    prefetching = {"native": load(native.build(SOURCE, tmp_path, flags=intel))}
    if "avx2" in builds:
        prefetching["avx2"] = load(native.build(SOURCE, tmp_path, flags=("-mno-avx512f", *intel)))
    for which, kernel in prefetching.items():
        for dtype in (torch.float32, torch.bfloat16):
            for length in (1, 17, 513, 2000):
                torch.manual_seed(length)
                keys, values = cache(3, length, 64, dtype, start=2)
                query = torch.randn(1, 3, 3, 64)
                got = kernel.run(query, keys, values, 0.125)
                assert torch.equal(got, builds[which].run(query, keys, values, 0.125))


def test_prefetching_is_chosen_by_the_cpus_maker(monkeypatch, tmp_path):
    assert decode_attention.prefetch_flags("GenuineIntel") == ("-DAHEAD=2",)
    assert decode_attention.prefetch_flags("AuthenticAMD") == ()
    assert decode_attention.prefetch_flags("") == ()
    built = []
    monkeypatch.setattr(native, "vector_cpu", lambda: True)
    monkeypatch.setattr(native, "build", lambda source, folder=None, compiler=None, flags=(): built.append(flags) or
                        tmp_path / "kernel.so")
    monkeypatch.setattr(decode_attention, "load", lambda path: "loaded")
    monkeypatch.delenv("KVQA_ATTENTION_KERNEL", raising=False)
    for vendor, flags in (("GenuineIntel", ("-DAHEAD=2",)), ("AuthenticAMD", ())):
        monkeypatch.setattr(decode_attention, "cpu_vendor", lambda vendor=vendor: vendor)
        choose_decode_attention.cache_clear()
        try:
            assert choose_decode_attention() == "loaded"
        finally:
            choose_decode_attention.cache_clear()
        assert built[-1] == flags
