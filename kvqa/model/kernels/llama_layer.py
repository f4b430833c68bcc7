"""A Llama-family decode step's layers in C (llama_layer.c, built for this CPU at first use: kvqa.model.kernels.native),
for int8 weights on kvqa's own kernels (Llama, and Qwen2 with its q/k/v biases): two C calls a layer around PyTorch's
activation, where the written-out step in Python runs some 80 PyTorch operations a layer between the same kernels.

The C code calls the int8 product (or the 4-bit one for a layer that has that form: kvqa.model.int4), the norm and the
decode attention through the addresses of the functions the model's forward calls, adds the biases, and computes the
rotation, the cache writes and the residual sums in PyTorch's roundings: the logits and the cache are the forward's bit
for bit (tests/test_llama_layer.py, test_qwen.py, test_int4.py). `layers_in_c` says None where that cannot hold
(float32 weights, torch's kernels, a cache in another dtype than the model's): the step then runs its Python loop.
"""

from __future__ import annotations

import ctypes
import functools
import logging
from ctypes import POINTER, c_float, c_int, c_int64, c_void_p
from pathlib import Path

import torch

from kvqa.model.kernels.decode_attention import HELD, choose_decode_attention
from kvqa.model.kernels.int4_kernel import takes
from kvqa.model.kernels.native import built_or

log = logging.getLogger(__name__)

SOURCE = Path(__file__).with_name("llama_layer.c")
FLAGS = ("-ffp-contract=off",)  # a * b + c stays two roundings, as PyTorch's two operations round


class Matrix(ctypes.Structure):
    _fields_ = [("rows", c_void_p), ("scales", c_void_p), ("n", c_int64), ("k", c_int64), ("run", c_int64),
                ("bias", c_void_p), ("nibbles", c_void_p), ("scales4", c_void_p), ("mins4", c_void_p)]


class Layer(ctypes.Structure):
    _fields_ = [("in_norm", c_void_p), ("post_norm", c_void_p), ("in_eps", c_float), ("post_eps", c_float),
                ("qkv", Matrix), ("o", Matrix), ("gate_up", Matrix), ("down", Matrix)]


class Model(ctypes.Structure):
    _fields_ = [("hidden", c_int64), ("heads", c_int64), ("kv_heads", c_int64), ("dim", c_int64),
                ("inter", c_int64), ("scaling", c_float), ("held", c_int), ("matmul", c_void_p), ("int4", c_void_p),
                ("norm", c_void_p), ("attend", c_void_p), ("layers", POINTER(Layer))]


def load(path: Path):
    """The library build() made, its two functions typed."""
    library = ctypes.CDLL(str(path))
    library.kvqa_llama_attention.argtypes = [c_void_p, c_int64, c_void_p, c_int64, c_void_p, c_void_p, c_void_p,
                                             c_void_p, c_int64, c_void_p, c_void_p, c_int]
    library.kvqa_llama_attention.restype = c_int
    library.kvqa_llama_mlp_out.argtypes = [c_void_p, c_int64, c_void_p, c_int]
    library.kvqa_llama_mlp_out.restype = None
    library.kvqa_llama_scratch.argtypes = [c_void_p]
    library.kvqa_llama_scratch.restype = c_int64
    return library


@functools.cache
def library():
    """The built library, or None where it cannot be built (KVQA_LAYER_KERNEL=torch: None always)."""
    return built_or(SOURCE, load, None, env="KVQA_LAYER_KERNEL", log=log, flags=FLAGS,
                    failed="decode steps run their layers in Python between kvqa's kernels")


def _matrix(linear) -> Matrix | None:
    """An int8 linear layer (kvqa.model.weights.Int8Linear) as C reads it: its int8 rows, its bias and its 4-bit form
    where it has them; None where it is not one C can run."""
    rows, scales, kernel = (getattr(linear, name, None) for name in ("rows", "scales", "kernel"))
    if rows is None or scales is None or getattr(kernel, "address", None) is None:
        return None
    n, k = rows.shape
    run = k // scales.shape[1] if scales.dim() == 2 else k
    if (rows.dtype != torch.int8 or scales.dtype != torch.bfloat16 or not rows.is_contiguous()
            or not scales.is_contiguous() or k % 16 or run % 16):
        return None
    bias, int4 = linear.bias, getattr(linear, "int4", None)
    if bias is not None and (bias.dtype != torch.float32 or bias.shape != (n,) or not bias.is_contiguous()):
        return None
    if int4 is None:
        return Matrix(rows.data_ptr(), scales.data_ptr(), n, k, run, _address(bias))
    parts = (int4.nibbles, int4.scales, int4.mins)
    if getattr(int4.kernel, "address", None) is None or int4.nibbles.shape[0] != n or not takes(k, *parts):
        return None
    return Matrix(rows.data_ptr(), scales.data_ptr(), n, k, run, _address(bias), *(t.data_ptr() for t in parts))


def _address(bias: torch.Tensor | None) -> int | None:
    return None if bias is None else bias.data_ptr()


def _norm(module) -> tuple[int, float, int] | None:
    """(weight address, eps, the kernel's address) of a norm kvqa's kernel runs, else None."""
    kernel = getattr(module, "kvqa_norm", None)
    if kernel is None or kernel.address is None or not kernel.takes(module.weight):
        return None
    return module.weight.data_ptr(), float(module.variance_epsilon), kernel.address


class CLayers:
    """x (1, 1, hidden) through every layer for one token at `position`, its keys and values written into the cache:
    the written-out step's loop, in C."""

    def __init__(self, library, model: Model, layers, act_fns: list, keep: list, kv_dtype: torch.dtype):
        self.library, self.keep, self.layers = library, keep, layers  # keep, layers: what the C structs point into
        self.model, self.address = model, ctypes.addressof(model)
        self.act_fns, self.cache_dtype = act_fns, kv_dtype
        self.hidden, self.inter = model.hidden, model.inter
        self.size = library.kvqa_llama_scratch(self.address)

    def takes(self, cache) -> bool:
        """Whether C reads this cache's buffers as they are laid out: the model's cache dtype, contiguous."""
        return cache.layers[0].addresses(self.cache_dtype) is not None

    def __call__(self, x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, cache, position: int) -> torch.Tensor:
        scratch = torch.empty(self.size)  # x | norm's and products' rows | q, k, v | attention | gate, up | act
        scratch[: self.hidden].copy_(x.reshape(-1))
        inter = self.inter
        gate, up, act = scratch[-3 * inter: -2 * inter], scratch[-2 * inter: -inter], scratch[-inter:]
        cos, sin = cos.contiguous(), sin.contiguous()
        at, threads, base = self.address, torch.get_num_threads(), scratch.data_ptr()
        attention, mlp_out = self.library.kvqa_llama_attention, self.library.kvqa_llama_mlp_out
        for i, (held, act_fn) in enumerate(zip(cache.layers, self.act_fns)):
            keys, values, stride, key_scales, value_scales = held.addresses(self.cache_dtype)
            if attention(at, i, base, position, cos.data_ptr(), sin.data_ptr(), keys, values, stride, key_scales,
                         value_scales, threads):
                raise MemoryError("kvqa's decode attention could not allocate its scratch memory")
            torch.mul(act_fn(gate), up, out=act)  # PyTorch's activation, as the forward's
            mlp_out(at, i, base, threads)
        return scratch[: self.hidden].view(1, 1, self.hidden)


def layers_in_c(model, qkv: list, gate_up: list, kv_dtype: torch.dtype, heads: int, kv_heads: int,
                dim: int) -> CLayers | None:
    """The model's layers in C (qkv, gate_up: the step's fused projections per layer; kv_dtype: what its cache holds;
    its query and key/value heads of `dim`), or None where C cannot run them as the forward does: weights not int8
    on one kvqa kernel, norms not kvqa's, an attention kvqa's kernel does not take, or no build."""
    attention = choose_decode_attention()
    if (attention.address is None or heads % kv_heads or heads // kv_heads > attention.max_group
            or dim > attention.max_dim or dim % 16 or kv_dtype not in HELD):
        return None
    layers, matmuls, int4s, norm_kernels, keep = [], set(), set(), set(), []
    for layer, fused_qkv, fused_gate_up in zip(model.model.layers, qkv, gate_up):
        linears = (fused_qkv, layer.self_attn.o_proj, fused_gate_up, layer.mlp.down_proj)
        matrices = [_matrix(linear) for linear in linears]
        norms = [_norm(layer.input_layernorm), _norm(layer.post_attention_layernorm)]
        if None in matrices or None in norms:
            return None
        matmuls |= {linear.kernel.address for linear in linears}
        int4s |= {linear.int4.kernel.address for linear in linears if linear.int4 is not None}
        norm_kernels |= {kernel for _, _, kernel in norms}
        layers.append(Layer(norms[0][0], norms[1][0], norms[0][1], norms[1][1], *matrices))
        keep += [t for linear in linears for t in (linear.rows, linear.scales, linear.bias) if t is not None]
        keep += [t for linear in linears if linear.int4 is not None
                 for t in (linear.int4.nibbles, linear.int4.scales, linear.int4.mins)]
    if len(matmuls) != 1 or len(int4s) > 1 or len(norm_kernels) != 1 or (built := library()) is None:
        return None
    config, table = model.config, (Layer * len(layers))(*layers)
    c_model = Model(config.hidden_size, heads, kv_heads, dim, config.intermediate_size,
                    float(model.model.layers[0].self_attn.scaling), HELD[kv_dtype], matmuls.pop(),
                    next(iter(int4s), None), norm_kernels.pop(), attention.address, table)
    return CLayers(built, c_model, table, [layer.mlp.act_fn.forward for layer in model.model.layers], keep, kv_dtype)
