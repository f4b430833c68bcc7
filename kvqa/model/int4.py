"""4-bit weights for decoding, taken as they are from an offline model's GGUF.

A Q4_K_M GGUF holds most of its linear layers as Q4_K: runs of 32 weights, each w = s q - m with q in 0..15 and one
scale s and min m a run. The int8 copy (kvqa.model.weights) re-rounds those weights to one byte with a scale a row;
a decode step reads every weight once, so its time is its bytes. Kept as the GGUF has them (the nibbles as they lie,
s and m as float16), a Q4_K layer is 0.625 bytes a weight, and the weights are the GGUF's (to float16's rounding of
s and m) where int8's are not. Decoding multiplies them by kvqa's 4-bit kernel (kvqa.model.kernels.int4_kernel: AVX-512
with VNNI); longer products (a prefill chunk, a question's turn) still widen the int8 rows, so both forms are held:
0.625 bytes a weight more in memory for the layers that have one. The layers the GGUF holds in Q6_K (its value
projections, half the down projections, the output) stay int8.

The copy's `int4.safetensors` holds, per layer, `<linear>.nibbles` (N, K / 2) uint8 (byte j of each 64 weights: weight
j in its low half, j + 32 in its high half, Q4_K's own order), `.scales` and `.mins` (N, K / 32) float16.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy and torch load with the first use, not with kvqa.model.offline, which names FILE
    import numpy as np
    import torch

FILE = "int4.safetensors"
# GGUF tensor names (blk.N.<name>.weight) -> the module's name in a layer, for the Llama-shaped models (Qwen2 too)
LAYER_NAMES = {"attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj", "attn_v": "self_attn.v_proj",
               "attn_output": "self_attn.o_proj", "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj",
               "ffn_down": "mlp.down_proj"}
BLOCK_BYTES, BLOCK_WEIGHTS = 144, 256  # a Q4_K block: d, dmin (float16), 12 bytes of 6-bit scales and mins, 128 of q


@dataclass(frozen=True)
class Int4Weights:
    """A linear layer's 4-bit form: w = scales q - mins per run of 32 weights of a row, q packed two a byte."""

    nibbles: torch.Tensor  # (N, K / 2) uint8
    scales: torch.Tensor  # (N, K / 32) float16
    mins: torch.Tensor  # (N, K / 32) float16
    kernel: object = None  # what multiplies by it (kvqa.model.kernels.int4_kernel), once attached

    @property
    def nbytes(self) -> int:
        return self.nibbles.nbytes + self.scales.nbytes + self.mins.nbytes


def q4k_runs(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Q4_K blocks (B, 144) uint8 -> their nibbles (B, 128) as they lie, and each run's scale and min (B, 8) float16:
    w = scale q - min (gguf.quants.Q4_K's arithmetic, its products rounded to float16)."""
    import numpy as np
    from gguf.quants import Q4_K

    d = blocks[:, 0:2].copy().view(np.float16).astype(np.float32)
    dmin = blocks[:, 2:4].copy().view(np.float16).astype(np.float32)
    sc, m = Q4_K.get_scale_min(blocks[:, 4:16].copy())
    return (blocks[:, 16:].copy(), (d * sc.astype(np.float32)).astype(np.float16),
            (dmin * m.astype(np.float32)).astype(np.float16))


def unpack(weights: Int4Weights) -> torch.Tensor:
    """The float32 weights (N, K) the 4-bit form holds."""
    import torch

    n, half = weights.nibbles.shape
    packed = weights.nibbles.view(n, half // 32, 1, 32)
    q = torch.cat((packed & 0x0F, packed >> 4), dim=2).view(n, -1, 32).float()  # (N, K / 32, 32), runs in order
    return (q * weights.scales.float()[..., None] - weights.mins.float()[..., None]).view(n, -1)


def from_gguf(path: Path) -> dict[str, torch.Tensor]:
    """The Q4_K layers of a GGUF as int4.safetensors holds them, named as the model's modules are."""
    import numpy as np
    import torch
    from gguf import GGMLQuantizationType, GGUFReader

    tensors = {}
    for tensor in GGUFReader(path).tensors:
        parts = tensor.name.split(".")  # blk.3.ffn_up.weight
        if (tensor.tensor_type != GGMLQuantizationType.Q4_K or len(parts) != 4 or parts[0] != "blk"
                or parts[2] not in LAYER_NAMES):
            continue
        k, n = (int(v) for v in tensor.shape[:2])  # GGUF lists the row's length first
        nibbles, scales, mins = q4k_runs(np.asarray(tensor.data).reshape(-1, BLOCK_BYTES))
        name = f"model.layers.{parts[1]}.{LAYER_NAMES[parts[2]]}"
        tensors[f"{name}.nibbles"] = torch.from_numpy(nibbles.reshape(n, k // 2))
        tensors[f"{name}.scales"] = torch.from_numpy(scales.reshape(n, k // 32))
        tensors[f"{name}.mins"] = torch.from_numpy(mins.reshape(n, k // 32))
    return tensors


def write(gguf: Path, folder: Path) -> int:
    """Write the GGUF's Q4_K layers to folder/int4.safetensors, atomically; how many layers."""
    from safetensors.torch import save_file

    tensors = from_gguf(gguf)
    partial = folder / f"{FILE}.partial"
    save_file(tensors, str(partial), metadata={"format": "pt", "kvqa_form": "int4"})
    partial.replace(folder / FILE)
    return len(tensors) // 3


def load(folder: Path) -> dict[str, Int4Weights]:
    """The copy's 4-bit layers by module name ({} where it has none)."""
    from safetensors.torch import load_file

    path = Path(folder) / FILE
    if not path.exists():
        return {}
    tensors = load_file(str(path))
    names = {key.rsplit(".", 1)[0] for key in tensors}
    return {name: Int4Weights(tensors[f"{name}.nibbles"], tensors[f"{name}.scales"], tensors[f"{name}.mins"])
            for name in names}
