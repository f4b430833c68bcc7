"""The weights' form: float32 as loaded, or int8 (one byte a weight) on the CPU.

Decoding reads every weight once per token, so on a CPU its time is mostly bytes / memory bandwidth. int8 stores
each row of every linear layer (attention, MLP, the output layer) and of the token embedding as int8 times one
bfloat16 scale per row (symmetric, round to nearest), or for a model of INT8_GROUPS one per run of 32 weights of a
row (Gemma 3 270M, whose Chinese answers one a row cost): a quarter of float32's bytes. Products of few input rows (a
decode step, a drafted run) run through an int8 kernel (kvqa.model.kernels.int8_kernel: kvqa's own, built for this CPU,
float32 inputs and sums; or torch's `_weight_int8pack_mm`, inputs rounded to bfloat16), which reads each weight as
its one byte: each output row depends on its input row alone, bit for bit, whatever the number of rows. Longer ones (a
question's turn, a prefill chunk) are compute-bound, and those kernels are slow there: the int8 rows are widened for
that one product, to bfloat16 (exact: integers below 256) on a CPU that multiplies bfloat16 faster than float32 (AMX's
tiles, or AVX-512's bfloat16 dot products), whose product then rounds its output to bfloat16, or else (and for rows
with a scale a run) to float32 times the scales (the same weights, float32 inputs):
`Widening` names the rule, chosen once per machine by `choose_widening` (docs/performance.md measures both). With
bfloat16's, the cache holds its keys and values in bfloat16 too (LoadedModel.kv_dtype): half the bytes a decode
step reads at a long context and a question's turn attends to, and half the memory. With float32's, where kvqa's
decode attention reads a bfloat16 cache, the cache is bfloat16 as well, but attention over many tokens (a prefill
chunk, a question's turn) widens it to float32: torch's bfloat16 attention is slower than its float32 one on a CPU
without bfloat16 arithmetic. Everything else between the
products (norms, the residual stream) stays float32. The roundings mean a cached answer is
promised bit for bit equal to a recompute in the same chunks (as for bfloat16 models), not to one read in one go:
tests/test_weights.py and tests/test_exactness.py. A tied embedding and output layer share one int8 matrix.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from dataclasses import dataclass

import torch
import torch.nn.functional as F

from kvqa.errors import ModelError
from kvqa.model.int4 import Int4Weights
from kvqa.model.kernels.decode_attention import choose_decode_attention
from kvqa.model.kernels.int8_kernel import Int8Kernel, choose_kernel, widened

FORMS = ("fp32", "int8")  # what Config.weights names, besides "auto" (choose_weights)
MEASURED_CPUS = ("AVX2", "AVX512")  # x86 vector units where int8 decoding was measured faster; elsewhere auto: fp32
# Models whose int8 answers on the real sets held the gold within 2 points of float32's (docs/quality.md): auto picks
# int8 for these alone. Gemma 3 270M lost 2.4-5.7 points in Chinese with a scale a row; with a scale per 32 weights
# (INT8_GROUPS) it held the gold in 146 held-out answers of 251 against float32's 144; others: not measured.
INT8_KEEPS_ANSWERS = ("SmolLM2-135M-Instruct", "gemma-3-270m", "Qwen2.5-Coder-0.5B-Instruct",
                      "Qwen2.5-Coder-1.5B-Instruct")
# Models whose int8 weights keep a scale per run of this many weights of a row instead of one a row (int8_rows). Not
# the Qwen2.5-Coder copies: with a scale a run, a long product widens every weight to float32 per prefill chunk (their
# 1,705-token sample read at 16 tokens/s, 2026-12-07), where one a row multiplies in bfloat16 on CPUs that can.
INT8_GROUPS: dict[str, int] = {"gemma-3-270m": 32}


def int8_group(model: str) -> int | None:
    """The run of a row's weights one int8 scale covers for this model (INT8_GROUPS); None: the whole row."""
    return INT8_GROUPS.get(model)


@dataclass(frozen=True)
class Widening:
    """From `rows` input rows on, a product widens the int8 rows to `dtype` instead of running the int8 kernel."""

    dtype: torch.dtype
    rows: int
    cache: torch.dtype = torch.float32  # the dtype the cache holds the keys and values in
    attention: torch.dtype | None = None  # the dtype attention over many tokens computes in; None: the cache's

    @property
    def attention_apart(self) -> str | None:
        """The dtype's name where many tokens' attention computes in another dtype than the cache's, else None."""
        return str(self.attention).removeprefix("torch.") if self.attention not in (None, self.cache) else None

    def __str__(self) -> str:
        dtype, cache = (str(t).removeprefix("torch.") for t in (self.dtype, self.cache))
        return (f"{dtype} products from {self.rows} rows" + (f", {cache} cache" if self.cache != torch.float32 else "")
                + (f", attention in {self.attention_apart}" if self.attention_apart else ""))


# Where the int8 kernel stops being the faster one (experiments/weight_products.py, docs/performance.md): float32's
# product overtakes torch's near 128 rows on AVX2; a bfloat16 product on AMX near 16 (kvqa's kernel near 28 rows; 16
# kept), and with AVX-512's bfloat16 dot products but no AMX (AMD's Zen 4 and later) near 64. Without bfloat16
# arithmetic (AVX2), a bfloat16 cache still halves what a decode step reads (kvqa's decode attention widens as it
# reads), while many tokens' attention over it runs faster widened to float32 (AVX2 code on the Xeon, 7,000 tokens
# read at 259 tokens/s widened against 208 in bfloat16 and 250 with a float32 cache; docs/performance.md).
TO_FLOAT32 = Widening(torch.float32, 128)
TO_FLOAT32_BFLOAT16_CACHE = Widening(torch.float32, 128, cache=torch.bfloat16, attention=torch.float32)
TO_BFLOAT16 = Widening(torch.bfloat16, 16, cache=torch.bfloat16)
TO_BFLOAT16_FROM_64 = Widening(torch.bfloat16, 64, cache=torch.bfloat16)


def choose_widening(group: int | None = None) -> Widening:
    """bfloat16 products where the CPU multiplies bfloat16 faster than float32: AMX's tiles (from 16 rows on) or
    AVX-512's bfloat16 dot products (from 64; 2.2x float32's rate measured), else float32's, with a bfloat16 cache
    attended in float32 where kvqa's decode attention runs (TO_FLOAT32_BFLOAT16_CACHE). group (a scale a run of
    `group` weights, int8_group): float32's and a float32 cache, as such rows have no exact bfloat16 product
    (int8_product) and that model's answers were measured so."""
    if group:
        return TO_FLOAT32

    def has(name: str) -> bool:  # private, so looked up: torch 2.3 and later
        return getattr(torch.cpu, name, lambda: False)()
    if has("_is_amx_tile_supported"):
        return TO_BFLOAT16
    if has("_is_avx512_bf16_supported"):
        return TO_BFLOAT16_FROM_64
    return TO_FLOAT32_BFLOAT16_CACHE if choose_decode_attention().run is not None else TO_FLOAT32


class Linear(torch.nn.Module):
    """y = x W^T on a float32 weight that may be a view of a larger matrix (kvqa.model.architectures.llama's fused
    projections)."""

    def __init__(self, weight: torch.Tensor, bias: torch.Tensor | None = None):
        super().__init__()
        self.weight = torch.nn.Parameter(weight, requires_grad=False)
        self.bias = None if bias is None else torch.nn.Parameter(bias, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight, self.bias)


class Int8Linear(torch.nn.Module):
    """y = x W^T (+ b), W held as int8 rows (out, in) times a bfloat16 scale per row (or per run of a row), a bias kept
    in float32; products of fewer than `widening.rows` input rows run through `kernel` (default: choose_kernel()), or
    through the 4-bit form where the layer has one (`int4`, kvqa.model.int4), longer ones widen the rows first
    (Widening)."""

    def __init__(self, rows: torch.Tensor, scales: torch.Tensor, widening: Widening = TO_FLOAT32,
                 kernel: Int8Kernel | None = None, bias: torch.Tensor | None = None, int4: Int4Weights | None = None):
        super().__init__()
        self.register_buffer("rows", rows)
        self.register_buffer("scales", scales)
        self.register_buffer("bias", bias)
        self.widening = widening
        self.kernel = kernel or choose_kernel()
        self.int4 = int4  # not a buffer: the int8 copy's state stays what it was (int4.safetensors holds these)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = int8_product(self.rows, self.scales, self.widening, self.kernel, x, self.int4)
        return y if self.bias is None else y + self.bias

    @property
    def in_features(self) -> int:
        return self.rows.shape[1]

    @property
    def out_features(self) -> int:
        return self.rows.shape[0]


def int8_product(rows: torch.Tensor, scales: torch.Tensor, widening: Widening, kernel: Int8Kernel,
                 x: torch.Tensor, int4: Int4Weights | None = None) -> torch.Tensor:
    """x W^T for W = rows times scales (Int8Linear's forward); short products from the 4-bit form where given."""
    flat = x.reshape(-1, x.shape[-1])
    if flat.shape[0] < widening.rows and int4 is not None:  # bandwidth-bound: 0.625 bytes read per weight
        y = int4.kernel(flat, int4.nibbles, int4.scales, int4.mins).to(x.dtype)
    elif flat.shape[0] < widening.rows:  # bandwidth-bound (decoding, drafted runs): one byte read per weight
        y = kernel(flat, rows, scales).to(x.dtype)
    elif widening.dtype == torch.bfloat16 and scales.dim() == 1:  # compute-bound, on bfloat16 matrix units: the
        y = by_blocks(flat.to(torch.bfloat16), rows, lambda block, _: block.to(torch.bfloat16))  # exact rows
        y = y.to(x.dtype) * scales.to(x.dtype)
    else:  # compute-bound: float32's product, on the weights widened (scales a group: always)
        y = by_blocks(flat, rows, lambda block, at: widened(block, scales[at], x.dtype))
    return y.view(*x.shape[:-1], y.shape[-1])


BLOCK_WEIGHTS = 1 << 22  # a long product widens this many weights at a time (8 MB in bfloat16); see by_blocks


def by_blocks(x: torch.Tensor, rows: torch.Tensor,
              widen: Callable[[torch.Tensor, slice], torch.Tensor]) -> torch.Tensor:
    """x W^T, W's int8 rows widened (widen(block of rows, its slice)) a block of rows at a time: a few megabytes, used
    while they are in cache, where one widened copy of the whole matrix (Qwen2.5-1.5B's gate|up: 55 MB in bfloat16,
    above glibc's 32 MB mmap threshold) is fresh pages from the system on every product. The 1.5B's gate|up, 2 cores
    (2026-12-07): a 70-token question turn 29.5 -> 12.2 ms, a 512-token chunk 103 -> 95 ms. Each output element is
    still one product over the whole width, but the matrix library may round a block's shape otherwise than the
    whole's (ulps): the products' description (_mark) says "by blocks", so no cache made the other way is reused."""
    n, k = rows.shape
    step = max(1, BLOCK_WEIGHTS // k)
    if step >= n:
        return F.linear(x, widen(rows, slice(None)))
    y = torch.empty(x.shape[0], n, dtype=x.dtype)
    for start in range(0, n, step):
        at = slice(start, start + step)
        y[:, at] = F.linear(x, widen(rows[at], at))
    return y


def product(linear: torch.nn.Module) -> Callable[[torch.Tensor], torch.Tensor]:
    """A bias-free linear layer's y = x W^T as a plain function, its weights looked up once: the written-out decode
    steps call some 200 a token, and a module call with its buffer lookups costs microseconds. Any other module as
    it is."""
    if isinstance(linear, Int8Linear) and linear.bias is None:
        return functools.partial(int8_product, linear.rows, linear.scales, linear.widening, linear.kernel,
                                 int4=linear.int4)
    if isinstance(linear, (Linear, torch.nn.Linear)):
        return functools.partial(F.linear, weight=linear.weight, bias=getattr(linear, "bias", None))
    return linear


class Int8Embedding(torch.nn.Module):
    """The token embedding from int8 rows (shared with the output layer when tied), times the model's own embedding
    scale where it has one (Gemma 3 scales by sqrt(hidden))."""

    def __init__(self, rows: torch.Tensor, scales: torch.Tensor, embed_scale: torch.Tensor | None):
        super().__init__()
        self.register_buffer("rows", rows)
        self.register_buffer("scales", scales)
        self.embed_scale = embed_scale

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        scales = F.embedding(ids, self.scales if self.scales.dim() == 2 else self.scales[:, None]).float()
        x = F.embedding(ids, self.rows).float()
        x = (x.unflatten(-1, (scales.shape[-1], -1)) * scales[..., None]).flatten(-2)  # a scale a row, or a group
        return x if self.embed_scale is None else x * self.embed_scale.to(x.dtype)


def int8_rows(weight: torch.Tensor, group: int | None = None, *,
              block: int = 4096) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8: (rows, bfloat16 scales) with rows * scales as close to weight as int8 allows, one scale a row
    (N,), or with group, one a run of `group` weights of a row (N, K / group), as llama.cpp's Q8_0 has one per 32.
    `block` rows at a time (each row's numbers its own: the same bits in any blocks), so the temporaries stay small:
    Gemma 3's 262,144 x 640 embedding 1.3 s -> 0.4 s (2 cores, 2026-12-06), without five 671 MB copies at load."""
    weight = weight.detach().float()
    n, k = weight.shape
    per_row = k // group if group else 1
    rows = torch.empty(n, k, dtype=torch.int8, device=weight.device)
    scales = torch.empty(n, per_row, dtype=torch.bfloat16, device=weight.device)
    for start in range(0, n, block):
        runs = weight[start: start + block].reshape(-1, per_row, k // per_row)
        scale = (runs.abs().amax(dim=2) / 127).clamp(min=1e-12).to(torch.bfloat16)
        rounded = torch.round(runs / scale.float()[:, :, None]).clamp(-127, 127)
        rows[start: start + block] = rounded.to(torch.int8).view(-1, k)
        scales[start: start + block] = scale
    return rows, scales if group else scales[:, 0].contiguous()


def choose_weights(name: str, device: torch.device, dtype: torch.dtype, *, model: str = "",
                   compile: bool = False) -> str:
    """The form Config.weights names. auto: int8 for a model of INT8_KEEPS_ANSWERS in float32 on an x86 CPU with AVX2
    or AVX-512 (docs/performance.md measures why) unless the decode step is compiled (Config.compile, tested on
    float32 weights); else fp32, the loaded weights unchanged."""
    if name == "auto":
        measured = torch.backends.cpu.get_cpu_capability() in MEASURED_CPUS and model in INT8_KEEPS_ANSWERS
        return "int8" if device.type == "cpu" and dtype == torch.float32 and not compile and measured else "fp32"
    if name not in FORMS:
        raise ModelError("model.unknown_weights", name=name, forms=", ".join(("auto",) + FORMS))
    if name == "int8" and (device.type != "cpu" or dtype != torch.float32):
        raise ModelError("model.int8_cpu_only", device=device.type, dtype=str(dtype).removeprefix("torch."))
    return name


@torch.no_grad()
def quantize(model: torch.nn.Module, form: str, widening: Widening | None = None,
             kernel: Int8Kernel | None = None, group: int | None = None) -> torch.nn.Module:
    """The model with its weights in `form` (in place): for int8, every Linear and the token embedding, a scale a row
    or (group) a scale a run of `group` weights of a row (int8_rows), their short products through `kernel` (default:
    choose_kernel()), their long ones widened as `widening` says (default: choose_widening(group))."""
    if form == "fp32" or getattr(model.config, "kvqa_weights", None) == form:
        return model
    widening = widening or choose_widening(group)
    kernel = kernel or choose_kernel()
    embedding = model.get_input_embeddings()
    head = model.get_output_embeddings()
    tied = head is not None and head.weight.data_ptr() == embedding.weight.data_ptr()
    for name, child in model.named_modules():  # the int8 kernels read 16 weights at a time (torch's misreads others)
        if isinstance(child, torch.nn.Linear) and child.in_features % (group or 16):
            raise ModelError("model.int8_width", layer=name, width=child.in_features)
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, torch.nn.Linear) and not (tied and child is head):
                bias = None if child.bias is None else child.bias.detach().float()
                setattr(parent, name, Int8Linear(*int8_rows(child.weight, group), widening, kernel, bias))
    rows, scales = int8_rows(embedding.weight, group)
    model.set_input_embeddings(Int8Embedding(rows, scales, getattr(embedding, "embed_scale", None)))
    if tied:
        model.set_output_embeddings(Int8Linear(rows, scales, widening, kernel))  # one int8 matrix for both
    _mark(model, form, widening, kernel, group)
    return model


def _mark(model: torch.nn.Module, form: str, widening: Widening, kernel: Int8Kernel, group: int | None) -> None:
    """Record on the model's config the weights' form and how its products run (what cache_dtype() and products_of()
    read)."""
    model.config.kvqa_weights = form
    model.config.kvqa_products = (f"{kernel} below {widening.rows} rows, {widening}, by blocks of {BLOCK_WEIGHTS}"
                                  + (f", a scale per {group} weights" if group else ""))
    model.config.kvqa_cache_dtype = str(widening.cache).removeprefix("torch.")  # cache_dtype() reads it
    if widening.attention_apart:  # grouped_sdpa reads it from the attention's (text) config
        model.config.get_text_config(decoder=True).kvqa_attention_dtype = widening.attention_apart


def int8_state(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """An int8 model's tensors to write (its rows, scales, biases and float32 parameters; a tied output layer left to
    the embedding it shares), each contiguous: what load_int8 builds the model from again."""
    head, embedding = model.get_output_embeddings(), model.get_input_embeddings()
    tied = isinstance(head, Int8Linear) and head.rows.data_ptr() == embedding.rows.data_ptr()
    return {name: tensor.contiguous() for name, tensor in model.state_dict().items()
            if not (tied and name.startswith("lm_head."))}


@torch.no_grad()
def load_int8(model: torch.nn.Module, tensors: dict[str, torch.Tensor], *, group: int | None,
              widening: Widening | None = None, kernel: Int8Kernel | None = None) -> torch.nn.Module:
    """A model built on the meta device (no memory) given the tensors int8_state wrote: its linears and embedding
    become Int8Linear / Int8Embedding over those rows and scales (no float32 matrix made), the rest assigned as they
    are. The model comes back as quantize(model, "int8") would have made it."""
    widening = widening or choose_widening(group)
    kernel = kernel or choose_kernel()
    embedding_name = next(name for name, module in model.named_modules() if module is model.get_input_embeddings())
    for parent_name, parent in list(model.named_modules()):
        for name, child in list(parent.named_children()):
            full = f"{parent_name}.{name}" if parent_name else name
            if isinstance(child, torch.nn.Linear) and f"{full}.rows" in tensors:
                setattr(parent, name, Int8Linear(tensors.pop(f"{full}.rows"), tensors.pop(f"{full}.scales"), widening,
                                                 kernel, tensors.pop(f"{full}.bias", None)))
    rows, scales = tensors.pop(f"{embedding_name}.rows"), tensors.pop(f"{embedding_name}.scales")
    model.set_input_embeddings(Int8Embedding(rows, scales, None))
    if getattr(model.config, "tie_word_embeddings", False):
        model.set_output_embeddings(Int8Linear(rows, scales, widening, kernel))
    unexpected = model.load_state_dict(tensors, strict=False, assign=True).unexpected_keys
    if unexpected:
        raise ModelError("model.copy_incomplete", missing=", ".join(sorted(unexpected)[:3]))
    _mark(model, "int8", widening, kernel, group)
    return model


@torch.no_grad()
def dequantize(model: torch.nn.Module, dtype: torch.dtype) -> torch.nn.Module:
    """The model with every int8 module widened back to float (`dtype`): for a device or a form int8 does not run in.
    The weights are the int8 rows times their scales."""
    if getattr(model.config, "kvqa_weights", None) != "int8":
        return model
    embedding = model.get_input_embeddings()
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, Int8Linear) and child is not model.get_output_embeddings():
                linear = torch.nn.Linear(child.in_features, child.out_features, bias=child.bias is not None,
                                         device="meta")
                linear.weight = torch.nn.Parameter(widened(child.rows, child.scales, dtype), requires_grad=False)
                if child.bias is not None:
                    linear.bias = torch.nn.Parameter(child.bias.to(dtype), requires_grad=False)
                setattr(parent, name, linear)
    weight = torch.nn.Parameter(widened(embedding.rows, embedding.scales, dtype), requires_grad=False)
    plain = torch.nn.Embedding(weight.shape[0], weight.shape[1], device="meta")
    plain.weight = weight
    model.set_input_embeddings(plain)
    head = model.get_output_embeddings()
    if isinstance(head, Int8Linear):
        linear = torch.nn.Linear(head.in_features, head.out_features, bias=False, device="meta")
        linear.weight = weight if getattr(model.config, "tie_word_embeddings", False) else torch.nn.Parameter(
            widened(head.rows, head.scales, dtype), requires_grad=False)
        model.set_output_embeddings(linear)
    for name in ("kvqa_weights", "kvqa_products", "kvqa_cache_dtype"):
        if hasattr(model.config, name):
            delattr(model.config, name)
    return model


def cache_dtype(model: torch.nn.Module) -> torch.dtype:
    """The dtype the model's cache holds keys and values in: the widening's for int8 weights, else the model's."""
    name = getattr(model.config, "kvqa_cache_dtype", None)
    return getattr(torch, name) if name else next(model.parameters()).dtype


def products_of(model: torch.nn.Module) -> str:
    """How the model's int8 products run (the kernel for short ones, the Widening for long ones); "" for float32
    weights. It changes a cache's bits."""
    return getattr(getattr(model, "config", None), "kvqa_products", "")


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes the model's weights hold (parameters and int8 buffers), a storage shared by two names counted once."""
    tensors = [p for _, p in model.named_parameters(remove_duplicate=False)] + [
        t for m in model.modules() if isinstance(m, (Int8Linear, Int8Embedding)) for t in (m.rows, m.scales)] + [
        t for m in model.modules() if getattr(m, "int4", None) is not None
        for t in (m.int4.nibbles, m.int4.scales, m.int4.mins)]
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())


def decode_bytes(model: torch.nn.Module) -> int:
    """Bytes of weights a decode step reads: each linear layer's 4-bit form where it has one, else its int8 rows and
    scales (or float weights), the norms and biases; of the embedding one row (nothing, counted here)."""
    total, embedding = 0, model.get_input_embeddings()
    for module in model.modules():
        if module is embedding:
            continue
        if isinstance(module, Int8Linear):
            total += (module.int4.nbytes if module.int4 is not None else module.rows.nbytes + module.scales.nbytes)
            total += module.bias.nbytes if module.bias is not None else 0
        else:
            total += sum(p.nbytes for p in module.parameters(recurse=False))
    return total


def fuse(*linears: torch.nn.Module) -> torch.nn.Module:
    """One module computing the linears' outputs side by side, from one matrix that holds their rows one under the
    other; each linear's rows become a view of it (nothing is held twice)."""
    biases = [getattr(linear, "bias", None) for linear in linears]
    bias = None if all(b is None for b in biases) else torch.cat(
        [b if b is not None else torch.zeros(linear.weight.shape[0] if hasattr(linear, "weight") else
                                             linear.out_features) for b, linear in zip(biases, linears)])
    if all(isinstance(linear, Int8Linear) for linear in linears):
        fused = Int8Linear(torch.cat([linear.rows for linear in linears]),
                           torch.cat([linear.scales for linear in linears]), linears[0].widening, linears[0].kernel,
                           bias, fuse_int4([linear.int4 for linear in linears]))
        start = 0
        for linear in linears:
            n = linear.out_features
            linear.rows, linear.scales = fused.rows[start: start + n], fused.scales[start: start + n]
            linear.int4 = None if fused.int4 is None else dataclasses.replace(  # either all 4-bit or none: the
                fused.int4, **{name: getattr(fused.int4, name)[start: start + n]  # forward and the step agree
                               for name in ("nibbles", "scales", "mins")})
            start += n
        return fused
    fused = Linear(torch.cat([linear.weight for linear in linears]), bias)
    start = 0
    for linear in linears:
        n = linear.weight.shape[0]
        linear.weight = torch.nn.Parameter(fused.weight[start: start + n], requires_grad=False)
        start += n
    return fused


def fuse_int4(parts: list[Int4Weights | None]) -> Int4Weights | None:
    """The 4-bit forms of linears fused one under the other, where each has one (else None: int8 decodes them)."""
    if any(part is None for part in parts):
        return None
    return Int4Weights(*(torch.cat([getattr(part, name) for part in parts]) for name in ("nibbles", "scales", "mins")),
                       kernel=parts[0].kernel)


def attach_int4(model: torch.nn.Module, layers: dict[str, Int4Weights], kernel) -> int:
    """Give each int8 linear named in `layers` its 4-bit form (kvqa.model.int4), decoded by `kernel`; how many (fuse()
    takes it from a set fused for the step unless each has one). The products' description (products_of, a cache's
    key) says so."""
    attached = 0
    for name, module in model.named_modules():
        if isinstance(module, Int8Linear) and name in layers:
            weights = layers[name]
            if weights.nibbles.shape != (module.out_features, module.in_features // 2):
                shape = tuple(weights.nibbles.shape)
                raise ModelError("model.copy_incomplete", missing=f"{name} (4-bit shape {shape})")
            module.int4 = dataclasses.replace(weights, kernel=kernel)
            attached += 1
    if attached:
        model.config.kvqa_products += f", the GGUF's 4-bit layers decoded by {kernel}"
    return attached
