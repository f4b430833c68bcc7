"""The model: loaded once per process, on the best device, with its tokenizer and what generation needs to know."""

from __future__ import annotations

import importlib.util
import inspect
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

import torch

from kvqa.config import Config
from kvqa.errors import ModelError
from kvqa.messages import Message
from kvqa.model import int4
from kvqa.model.architectures import written_out_step
from kvqa.model.attention import GROUPED_SDPA, _register_grouped_sdpa
from kvqa.model.kernels.int4_kernel import choose_int4_kernel
from kvqa.model.kernels.int8_kernel import Int8Kernel
from kvqa.model.kv_cache import Int8Scales, KVCache, new_cache, unsupported_reason
from kvqa.model.kv_scales import measured_scales
from kvqa.model.norms import kernel_norms
from kvqa.model.offline import SMOLLM2, Stages, model_dir, offline_model, stored_form
from kvqa.model.vocabulary import eos_ids
from kvqa.model.weights import (
    Widening,
    attach_int4,
    cache_dtype,
    choose_weights,
    choose_widening,
    dequantize,
    int8_group,
    load_int8,
    quantize,
    weight_bytes,
)

_DTYPES = {"float32": torch.float32, "fp32": torch.float32, "bfloat16": torch.bfloat16, "bf16": torch.bfloat16,
           "float16": torch.float16, "fp16": torch.float16}


@dataclass(frozen=True)
class LoadedModel:
    """A model ready to prefill and answer."""

    model: torch.nn.Module
    tokenizer: object
    name: str
    device: torch.device
    dtype: torch.dtype
    attn_implementation: str
    context_length: int  # the most tokens the model reads: document + question + answer
    eos_ids: frozenset[int]
    load_s: float
    decode_step: Callable | None = None  # compiled one-token step on a KVCache.static_view() (Config.compile)
    step: Callable | None = None  # the one-token step written out, (token, KVCache) -> logits
    # (kvqa.model.architectures)
    weights: str = "fp32"  # the weights' form (kvqa.model.weights): fp32 as loaded, or int8
    weight_bytes: int = 0  # what the weights hold in memory
    kv_dtype: torch.dtype = torch.float32  # what the cache holds keys and values in (kvqa.model.weights.cache_dtype)
    kv_scales: list[Int8Scales] | None = None  # an int8 cache's scales, per layer (kvqa.model.kv_scales)

    def new_cache(self, capacity: int) -> KVCache:
        """An empty cache of `capacity` tokens in this model's cache form."""
        return new_cache(self.config, capacity, self.kv_dtype, self.kv_scales)

    @property
    def config(self):
        return self.model.config


_loaded: dict[tuple, LoadedModel] = {}
_lock = threading.Lock()


def load_model(config: Config = Config(), *, progress: Stages | None = None) -> LoadedModel:
    """The model named by config, loaded on first use and shared by every caller in the process. progress(fraction,
    stage) as each stage of a load begins (converting an offline model, once; loading; preparing the weights)."""
    device = choose_device(config.device)
    weights = choose_weights(config.weights, device, choose_dtype(config.dtype, device),  # "auto" and its form: one
                             model=config.model, compile=config.compile == "on")
    copy = str(config.cache_dir) if offline_model(config.model) else None  # an offline model's copy is its folder's
    key = (config.model, copy, config.device, config.dtype, config.attn_implementation, config.compile, weights,
           config.kv_cache)
    with _lock:
        if key not in _loaded:
            _loaded[key] = _load(config, progress=progress or (lambda fraction, stage: None))
        return _loaded[key]


def choose_device(name: str = "auto") -> torch.device:
    """cuda if present, then mps, then cpu; or the device named."""
    if name != "auto":
        try:
            device = torch.device(name)
        except RuntimeError:
            raise ModelError("model.unknown_device", name=name) from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise ModelError("model.no_cuda")
        return device
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def choose_dtype(name: str, device: torch.device) -> torch.dtype:
    """bfloat16 on CUDA (float16 where bf16 is unsupported), float16 on MPS, float32 on CPU; or the dtype named."""
    if name != "auto":
        if name not in _DTYPES:
            raise ModelError("model.unknown_dtype", name=name)
        return _DTYPES[name]
    if device.type == "cuda":
        return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16
    if device.type == "mps":
        return torch.float16
    return torch.float32


def choose_attention(name: str, device: torch.device) -> str:
    """flash_attention_2 on CUDA when the flash_attn package is installed, else PyTorch's sdpa."""
    if name != "auto":
        return name
    if device.type == "cuda" and importlib.util.find_spec("flash_attn") is not None:
        return "flash_attention_2"
    return "sdpa"


def default_model_dir(cache_dir: Path) -> Path:
    """The offline default's float32 copy, converted from its packaged GGUF on first use (kvqa.model.offline)."""
    return model_dir(SMOLLM2, cache_dir)


def model_source(name: str, cache_dir: Path, *, progress: Stages | None = None) -> str:
    """What transformers loads for a model name: an offline model's converted folder (converted first when there is
    none: progress says its stages), else the name itself."""
    offline = offline_model(name)
    return str(model_dir(offline, cache_dir, progress=progress)) if offline else name


def _load(config: Config, *, progress: Stages) -> LoadedModel:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    started = time.perf_counter()
    device = choose_device(config.device)
    dtype = choose_dtype(config.dtype, device)
    attn = choose_attention(config.attn_implementation, device)
    source = model_source(config.model, config.cache_dir, progress=progress)
    progress(0.7, Message("load.weights", name=config.model))
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
        if stored_form(Path(source)) == "int8":
            model = _load_int8_copy(Path(source), config.model, attn)
        else:
            model = AutoModelForCausalLM.from_pretrained(source, dtype=dtype, attn_implementation=attn)
    except (OSError, ValueError, ImportError) as e:
        raise ModelError(_load_failure(config.model, e)) from None
    progress(0.9, Message("load.prepare", name=config.model))
    lm = prepare(model, tokenizer, name=config.model, device=device, load_started=started,
                 compile=config.compile == "on", weights=config.weights)
    if choose_kv_cache(config.kv_cache, model=config.model, weights=lm.weights, device=device,
                       compiled=lm.decode_step is not None) == "int8":
        folder = Path(source) if offline_model(config.model) else None
        progress(0.95, Message("load.kv_scales", name=config.model))
        lm = with_int8_cache(lm, measured_scales(lm.model, tokenizer, folder))
        lm = replace(lm, load_s=time.perf_counter() - started)
    return lm


def choose_kv_cache(name: str, *, model: str, weights: str, device: torch.device, compiled: bool) -> str:
    """What the cache holds: "int8" or "model" as named; auto: int8 for the offline models with int8 weights on a CPU
    (where it was measured: docs/quality.md), else the model's dtype. A compiled step reads the model's dtype only."""
    if name not in ("auto", "int8", "model"):
        raise ModelError("model.kv_cache_unknown", name=name)
    if compiled:
        return "model"
    if name == "auto":
        return "int8" if offline_model(model) and weights == "int8" and device.type == "cpu" else "model"
    return name


def with_int8_cache(lm: LoadedModel, scales: list[Int8Scales]) -> LoadedModel:
    """The model with its cache in int8 by these scales, widened to read as its cache dtype was (bfloat16 where its
    long products attend in bfloat16): its written-out step (and C loop) built for that form."""
    scales = [replace(s, widened=lm.kv_dtype) for s in scales]
    lm.model.config.kvqa_cache_dtype = "int8"  # cache_dtype() reads it
    return replace(lm, kv_dtype=torch.int8, kv_scales=scales, step=written_out_step(lm.model, lm.device))


def _load_int8_copy(folder: Path, name: str, attn: str):
    """An offline model's int8 copy (kvqa.model.offline, stored "int8"), built on the meta device and given the copy's
    rows and scales as they are: no float32 matrix is made on the way (kvqa.model.weights.load_int8); its 4-bit layers
    beside them where it has some and this CPU decodes them (kvqa.model.int4)."""
    from safetensors.torch import load_file
    from transformers import AutoConfig, AutoModelForCausalLM

    settings = AutoConfig.from_pretrained(folder)
    with torch.device("meta"):
        model = AutoModelForCausalLM.from_config(settings, dtype=torch.float32, attn_implementation=attn)
    load_int8(model, load_file(str(folder / "model.safetensors")), group=int8_group(name))
    kernel = choose_int4_kernel()
    if kernel is not None:  # the GGUF's Q4_K layers decode 4-bit where this CPU multiplies them fast (kvqa.model.int4)
        attach_int4(model, int4.load(folder), kernel)
    for parent in list(model.modules()):  # buffers made at construction (the rotary frequencies): made again here
        for child_name, child in list(parent.named_children()):
            if any(b.is_meta for b in child.buffers(recurse=False)) and hasattr(child, "config"):
                setattr(parent, child_name, type(child)(config=child.config))
    meta = [n for n, t in [*model.named_parameters(), *model.named_buffers()] if t.is_meta]
    if meta:
        raise ModelError("model.copy_incomplete", missing=", ".join(meta[:3]))
    model.generation_config = _generation_config(folder, model.generation_config)
    return model


def _generation_config(folder: Path, default):
    """The copy's generation_config.json where it has one, else the model's default."""
    from transformers import GenerationConfig

    try:
        return GenerationConfig.from_pretrained(folder)
    except OSError:
        return default


def prepare(model, tokenizer, *, name: str, device: torch.device, load_started: float | None = None,
            compile: bool = False, weights: str = "fp32", widening: Widening | None = None,
            kernel: Int8Kernel | None = None) -> LoadedModel:
    """Check a model is supported, move it to its device in eval mode, put its weights in the form named
    (kvqa.model.weights.choose_weights; int8's short products through `kernel` and long ones widened as `widening` says,
    defaults this CPU's choose_kernel() and choose_widening()), and describe it. compile: decode through
    compiled_decode_step()."""
    if "cache" not in inspect.signature(model.forward).parameters:  # transformers < 5.24 ignores cache=, silently
        import transformers

        raise ModelError("model.old_transformers", version=transformers.__version__)
    reason = unsupported_reason(model.config)
    if reason:
        raise ModelError("model.unsupported", name=name, reason=reason)
    model = model.to(device).eval().requires_grad_(False)  # inference only, whatever the thread's grad mode
    if getattr(model.config, "kvqa_weights", None) == "int8":  # an int8 copy: widened where int8 does not run
        dtype = choose_dtype("auto", device) if device.type != "cpu" else torch.float32
        if choose_weights(weights, device, dtype, model=name, compile=compile) != "int8":
            model = dequantize(model, dtype).to(device)
    weights = choose_weights(weights, device, next(model.parameters()).dtype, model=name, compile=compile)
    widening = widening or choose_widening(int8_group(name))
    quantize(model, weights, widening, kernel, group=int8_group(name))
    if device.type == "cpu":
        kernel_norms(model)  # float32 Llama norms in one call each (kvqa.model.kernels.rms_norm)
    _register_grouped_sdpa()
    if device.type == "cpu" and model.config._attn_implementation == "sdpa":
        model.set_attn_implementation(GROUPED_SDPA)
    text_config = model.config.get_text_config(decoder=True)
    eos = model.generation_config.eos_token_id if model.generation_config is not None else None
    return LoadedModel(
        model=model,
        tokenizer=tokenizer,
        name=name,
        device=device,
        dtype=next(model.parameters()).dtype,
        attn_implementation=model.config._attn_implementation,
        context_length=int(getattr(text_config, "max_position_embeddings", 0) or 2048),
        eos_ids=eos_ids(tokenizer, eos),  # the vocabulary scanned now, not in a first question's wait
        load_s=time.perf_counter() - load_started if load_started else 0.0,
        decode_step=compiled_decode_step(model, device) if compile else None,
        step=written_out_step(model, device),
        weights=weights,
        weight_bytes=weight_bytes(model),
        kv_dtype=cache_dtype(model),
    )


def compiled_decode_step(model, device: torch.device) -> Callable:
    """One decode step, (ids (1, 1), position (1, 1), static cache) -> logits (1, vocab), under torch.compile with
    fixed shapes per document: CUDA graphs on a GPU ("reduce-overhead": no Python or kernel launches per layer),
    fused small ops on the CPU. Compiled once, on the first step, for any cache capacity (dynamic=True: the capacity
    is symbolic); a CUDA graph is recorded per capacity, i.e. per document, and replayed for its every token."""
    def step(ids: torch.Tensor, position: torch.Tensor, cache) -> torch.Tensor:
        return model(input_ids=ids, position_ids=position, cache=cache, use_cache=True).logits[:, -1]

    return torch.compile(step, mode="reduce-overhead" if device.type == "cuda" else "default", dynamic=True)


def _load_failure(name: str, error: Exception) -> Message:
    text = str(error).splitlines()[0] if str(error) else type(error).__name__
    hint = "model.hint_check"
    if "gated" in text.lower() or "401" in text or "403" in text or "access" in text.lower():
        hint = "model.hint_gated"
    elif "offline" in text.lower() or "connect" in text.lower() or "resolve" in text.lower():
        hint = "model.hint_offline"
    return Message("model.load_failed", name=name, hint=Message(hint), detail=text)
