"""The weights' form: float32 as loaded, or int8 (one byte a weight) on the CPU.

Decoding reads every weight once per token, so on a CPU its time is mostly bytes / memory bandwidth. int8 stores
each row of every linear layer (attention, MLP, the output layer) and of the token embedding as int8 times one
bfloat16 scale per row (symmetric, round to nearest): a quarter of float32's bytes. Products of fewer than
DEQUANTIZE_ROWS input rows (a decode step, a drafted run, a short question) run through torch's
`_weight_int8pack_mm`, which rounds the input rows to bfloat16 and multiplies them by the int8 rows, accumulating in
float32: each output row depends on its input row alone, bit for bit, whatever the number of rows. Longer ones (a
prefill chunk) are compute-bound: the int8 rows are widened to float32 for that product (the same weights, float32
inputs), which is faster there on a CPU without int8 matrix units. Everything between the products (norms,
attention, the residual stream, the cache) stays float32. The rounding to bfloat16 means a cached answer is promised
bit for bit equal to a recompute in the same chunks (as for bfloat16 models), not to one read in one go:
tests/test_weights.py and tests/test_exactness.py. A tied embedding and output layer share one int8 matrix.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from .errors import ModelError

FORMS = ("fp32", "int8")  # what Config.weights names, besides "auto" (choose_weights)
MEASURED_CPUS = ("AVX2", "AVX512")  # x86 vector units where int8 decoding was measured faster; elsewhere auto: fp32
DEQUANTIZE_ROWS = 128  # from this many rows on (a prefill chunk), int8 rows are widened to float32 for one product


class Linear(torch.nn.Module):
    """y = x W^T on a float32 weight that may be a view of a larger matrix (kvqa.llama_step's fused projections)."""

    def __init__(self, weight: torch.Tensor):
        super().__init__()
        self.weight = torch.nn.Parameter(weight, requires_grad=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.weight)


class Int8Linear(torch.nn.Module):
    """y = x W^T, W held as int8 rows (out, in) times a bfloat16 scale per row."""

    def __init__(self, rows: torch.Tensor, scales: torch.Tensor):
        super().__init__()
        self.register_buffer("rows", rows)
        self.register_buffer("scales", scales)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        flat = x.reshape(-1, x.shape[-1])
        if flat.shape[0] >= DEQUANTIZE_ROWS:  # compute-bound: float32's product, on the weights widened once
            y = F.linear(flat, self.rows.to(x.dtype) * self.scales.to(x.dtype)[:, None])
        else:  # bandwidth-bound (decoding, drafted runs, a short question): one byte read per weight
            y = torch._weight_int8pack_mm(flat.to(torch.bfloat16), self.rows, self.scales).to(x.dtype)
        return y.reshape(*x.shape[:-1], -1)

    @property
    def in_features(self) -> int:
        return self.rows.shape[1]

    @property
    def out_features(self) -> int:
        return self.rows.shape[0]


class Int8Embedding(torch.nn.Module):
    """The token embedding from int8 rows (shared with the output layer when tied), times the model's own embedding
    scale where it has one (Gemma 3 scales by sqrt(hidden))."""

    def __init__(self, rows: torch.Tensor, scales: torch.Tensor, embed_scale: torch.Tensor | None):
        super().__init__()
        self.register_buffer("rows", rows)
        self.register_buffer("scales", scales)
        self.embed_scale = embed_scale

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        x = F.embedding(ids, self.rows).float() * F.embedding(ids, self.scales[:, None]).float()
        return x if self.embed_scale is None else x * self.embed_scale.to(x.dtype)


def int8_rows(weight: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Symmetric int8 per row: (rows, bfloat16 scales) with rows * scales as close to weight as int8 allows."""
    weight = weight.detach().float()
    scales = (weight.abs().amax(dim=1) / 127).clamp(min=1e-12).to(torch.bfloat16)
    rows = torch.round(weight / scales.float()[:, None]).clamp(-127, 127).to(torch.int8)
    return rows, scales


def choose_weights(name: str, device: torch.device, dtype: torch.dtype, *, compile: bool = False) -> str:
    """The form Config.weights names. auto: int8 on an x86 CPU with AVX2 or AVX-512 for a float32 model
    (docs/performance.md measures why) unless the decode step is compiled (Config.compile, tested on float32
    weights); else fp32, the loaded weights unchanged."""
    if name == "auto":
        measured = torch.backends.cpu.get_cpu_capability() in MEASURED_CPUS
        return "int8" if device.type == "cpu" and dtype == torch.float32 and not compile and measured else "fp32"
    if name not in FORMS:
        raise ModelError("model.unknown_weights", name=name, forms=", ".join(("auto",) + FORMS))
    if name == "int8" and (device.type != "cpu" or dtype != torch.float32):
        raise ModelError("model.int8_cpu_only", device=device.type, dtype=str(dtype).removeprefix("torch."))
    return name


@torch.no_grad()
def quantize(model: torch.nn.Module, form: str) -> torch.nn.Module:
    """The model with its weights in `form` (in place): for int8, every Linear and the token embedding."""
    if form == "fp32":
        return model
    embedding = model.get_input_embeddings()
    head = model.get_output_embeddings()
    tied = head is not None and head.weight.data_ptr() == embedding.weight.data_ptr()
    for parent in list(model.modules()):
        for name, child in list(parent.named_children()):
            if isinstance(child, torch.nn.Linear) and child.bias is None and not (tied and child is head):
                setattr(parent, name, Int8Linear(*int8_rows(child.weight)))
    rows, scales = int8_rows(embedding.weight)
    model.set_input_embeddings(Int8Embedding(rows, scales, getattr(embedding, "embed_scale", None)))
    if tied:
        model.set_output_embeddings(Int8Linear(rows, scales))  # one int8 matrix for both
    model.config.kvqa_weights = form
    return model


def weights_form(model: torch.nn.Module) -> str:
    """fp32 or int8: the form quantize() left the model in."""
    return getattr(model.config, "kvqa_weights", "fp32")


def weight_bytes(model: torch.nn.Module) -> int:
    """Bytes the model's weights hold (parameters and int8 buffers), a storage shared by two names counted once."""
    tensors = [p for _, p in model.named_parameters(remove_duplicate=False)] + [
        t for m in model.modules() if isinstance(m, (Int8Linear, Int8Embedding)) for t in (m.rows, m.scales)]
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())


def fuse(*linears: torch.nn.Module) -> torch.nn.Module:
    """One module computing the linears' outputs side by side, from one matrix that holds their rows one under the
    other; each linear's rows become a view of it (nothing is held twice)."""
    if all(isinstance(linear, Int8Linear) for linear in linears):
        fused = Int8Linear(torch.cat([linear.rows for linear in linears]),
                           torch.cat([linear.scales for linear in linears]))
        start = 0
        for linear in linears:
            n = linear.out_features
            linear.rows, linear.scales = fused.rows[start: start + n], fused.scales[start: start + n]
            start += n
        return fused
    fused = Linear(torch.cat([linear.weight for linear in linears]))
    start = 0
    for linear in linears:
        n = linear.weight.shape[0]
        linear.weight = torch.nn.Parameter(fused.weight[start: start + n], requires_grad=False)
        start += n
    return fused
