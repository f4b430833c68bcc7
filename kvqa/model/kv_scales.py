"""An int8 cache's scales: one per layer, key/value head and channel, fixed for a model, measured once.

A float32 cache of Qwen2.5-Coder-1.5B is 56 KiB a token; in int8 it is 14 (a quarter: the scales, a few KiB for the
whole model, are not per token). Keys are what int8 loses most on (KIVI, KVQuant: a few channels carry values tens of
times the rest, which a scale per token spends its 255 steps on), so the scales are per channel, as those papers
quantize keys, and values take the same form. A scale per channel cannot follow each new token (a cache is written a
token at a time and never rewritten), so each channel's is fixed: HEADROOM times the largest magnitude the model puts
in that channel while reading the bundled sample document (SAMPLE), over 127. Fixed per model, a document's cache, a
composed one and a restored one all hold the same integers for the same keys, whatever was read before.

Measured on Qwen2.5-Coder-0.5B-Instruct (2026-12-07; five public pages, XQuAD English and German, CMRC 2018, 484 to
1,265 tokens each, every position's next-token distribution against the float32 cache's): a scale per token and
head, keys and values: KL 0.013-0.030, top token the same 91-94%; per channel from the sample with HEADROOM 2: KL
0.0023-0.0052, 95-98%, one element in three million clamped (headroom 1: 0.002-0.008, a thousandth clamped; 3:
0.004-0.007, coarser steps). Values alone in int8 (per token) cost KL 0.0005: the keys are the loss.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import torch

from kvqa.model.kv_cache import Int8Scales, new_cache

log = logging.getLogger(__name__)

SAMPLE = Path(__file__).resolve().parent.parent.parent / "assets" / "declaration-of-independence.md"
HEADROOM = 2.0  # a channel's scale: this times the largest magnitude measured, over 127
FILE = "kv-scales.safetensors"  # where a model's copy keeps them (kvqa.model.offline's folder)


def measure_peaks(model, ids: list[int], *, chunk: int = 512) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, the largest |key| and |value| in each key/value head's channel, (1, KV, 1, D) each, over the model
    reading `ids` (a float32 cache, in chunks of `chunk`)."""
    cache = new_cache(model.config, len(ids))
    with torch.inference_mode():
        for start in range(0, len(ids), chunk):
            model(input_ids=torch.tensor([ids[start: start + chunk]]), cache=cache, use_cache=True, logits_to_keep=1)
    return [tuple(t.abs().amax(dim=2, keepdim=True).float() for t in layer.read(0, layer.length))
            for layer in cache.layers]


def scales_from(peaks: list[tuple[torch.Tensor, torch.Tensor]], headroom: float = HEADROOM) -> list[Int8Scales]:
    """Each layer's scales: headroom x the peak over 127 (a channel never seen above 1e-6 gets 1e-6's)."""
    return [Int8Scales(*(peak.clamp_min(1e-6) * headroom / 127 for peak in pair)) for pair in peaks]


def measured_scales(model, tokenizer, folder: Path | None) -> list[Int8Scales]:
    """The model's int8 cache scales: from `folder`'s FILE where it is there, else measured on SAMPLE (the first
    2,048 tokens; a 1.5B model reads them in about 20 s on 2 cores) and kept there."""
    from safetensors.torch import load_file, save_file

    path = folder / FILE if folder is not None else None
    if path is not None and path.exists():
        saved = load_file(str(path))
        layers = len(saved) // 2
        return [Int8Scales(saved[f"{i}.keys"], saved[f"{i}.values"]) for i in range(layers)]
    ids = tokenizer(SAMPLE.read_text(encoding="utf-8"))["input_ids"][:2048]
    scales = scales_from(measure_peaks(model, ids))
    if path is not None:
        try:
            tensors = {f"{i}.{part}": getattr(s, part).contiguous() for i, s in enumerate(scales)
                       for part in ("keys", "values")}
            save_file(tensors, str(path))
        except OSError as e:  # a read-only copy: measured again next time
            log.warning("could not keep the int8 cache scales in %s: %s", path, e)
    return scales


def digest(scales: list[Int8Scales]) -> str:
    """A short SHA-256 of the scales' bits: part of a stored cache's key (kvqa.cache.restore.cache_key)."""
    sha = hashlib.sha256()
    for s in scales:
        sha.update(str(s.widened).encode())
        sha.update(s.keys.contiguous().numpy().tobytes())
        sha.update(s.values.contiguous().numpy().tobytes())
    return sha.hexdigest()[:16]
