"""The key/value cache: the one file that touches transformers' cache internals.

KVCache preallocates, per layer, room for the document plus a reserve for one question and its answer. Answering
writes the question's and the answer's keys/values into the reserve, in place, and `rollback` then resets the
length to the document's: forking costs nothing (no copy), decoding never reallocates (no per-token torch.cat),
and the document's keys/values are never written after the prefill, so they stay bit-identical.

A cache holds its keys and values in the model's dtype (float32, bfloat16) or in int8 (kvqa.model.kv_scales): one
byte an element, each a whole multiple of its channel's scale, one scale per layer, key/value head and channel fixed for
the model (so a document's cache, a composed one and a restored one all read alike, and a quarter of float32's bytes,
the scales aside). Attention reads int8 as it is held: the query times the keys' scales against the int8 keys, the
output times the values' scales (decode_attention.c widens int8 in registers); a forward over many tokens reads the
keys and values widened (read()).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import torch
from transformers.cache_utils import Cache, DynamicLayer, StaticLayer, get_layer_types_and_kwargs

from kvqa.messages import Message
from kvqa.model.kernels.decode_attention import attend_one


@dataclass(frozen=True)
class Int8Scales:
    """One layer's int8 scales: keys' and values' (1, kv_heads, 1, head_dim), float32; an element held as q stands
    for q x its channel's scale. `widened`: what a forward over many tokens reads them as (read()): the dtype the
    model's cache would hold otherwise (bfloat16 where its long products and attention run in bfloat16)."""

    keys: torch.Tensor
    values: torch.Tensor
    widened: torch.dtype = torch.float32

    def to(self, device: torch.device) -> Int8Scales:
        return Int8Scales(self.keys.to(device), self.values.to(device), self.widened)

    @cached_property
    def widening(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys' and values' scales in the widened dtype: read() widens int8 in one pass, the integers times
        these (int8 and bfloat16 make bfloat16). Made once per model, not per cache."""
        return self.keys.to(self.widened), self.values.to(self.widened)


def to_int8(x: torch.Tensor, scale: torch.Tensor) -> torch.Tensor:
    """x as int8 multiples of `scale`: x / scale rounded to nearest even, clamped to +-127 (llama_layer.c rounds the
    same way, bit for bit)."""
    return (x.float() / scale).round_().clamp_(-127, 127).to(torch.int8)


class _BufferLayer(DynamicLayer):
    """One layer's keys and values in preallocated buffers of shape (B, kv_heads, capacity, head_dim).

    A sliding-window layer (window W) keeps every position too, so rolling back is as free as for a full layer; it
    hands attention only the positions its new tokens can see (the W - 1 before them and themselves) and tells the
    mask where they start (get_mask_sizes), as transformers' DynamicSlidingWindowLayer does for the same tokens."""

    def __init__(self, capacity: int, window: int | None = None, dtype: torch.dtype | None = None,
                 scales: Int8Scales | None = None):
        super().__init__()
        assert (dtype == torch.int8) == (scales is not None), "an int8 cache layer needs its scales, and only it"
        self.capacity = capacity
        self.dtype = dtype  # what the buffers hold; None: the first keys' dtype
        self.scales = scales
        self.length = 0
        self.window = window
        self.is_sliding = window is not None  # read by transformers' masks: which layer sizes the sliding mask

    def lazy_initialization(self, key_states: torch.Tensor, value_states: torch.Tensor) -> None:
        b, h, _, d = key_states.shape
        self.device = key_states.device
        self.key_buffer = key_states.new_empty((b, h, self.capacity, d), dtype=self.dtype or key_states.dtype)
        self.value_buffer = value_states.new_empty((b, h, self.capacity, value_states.shape[-1]),
                                                   dtype=self.dtype or value_states.dtype)
        self.is_initialized = True

    # the filled part, made as it is read (views, or widened copies of int8): the written-out decode steps change the
    # length 30 times a token and read the buffers themselves (both views made at every change cost a few tenths of a
    # millisecond a token)
    @property
    def keys(self) -> torch.Tensor | None:
        return self._widened(self.key_buffer[:, :, : self.length], 0) if self.is_initialized else None

    @property
    def values(self) -> torch.Tensor | None:
        return self._widened(self.value_buffer[:, :, : self.length], 1) if self.is_initialized else None

    @keys.setter
    def keys(self, tensor: None) -> None:  # transformers' layer sets None as it starts; nothing else is taken
        if tensor is not None:
            raise AttributeError("a kvqa cache layer's keys are its buffer's filled part")

    @values.setter
    def values(self, tensor: None) -> None:
        if tensor is not None:
            raise AttributeError("a kvqa cache layer's values are its buffer's filled part")

    # the narrow interface every writer and reader goes through (transformers' update below, the written-out steps,
    # the C layer loop, the store's tensors()): a cache form is a change here, not in each of them

    def write(self, position: int, keys: torch.Tensor, values: torch.Tensor) -> None:
        """Hold the keys and values (B, kv_heads, T, head_dim) of positions position.. position + T - 1, rounded to
        the cache's dtype; the length is the caller's to advance."""
        end = position + keys.shape[-2]
        assert end <= self.capacity, f"cache overflow: {end} > {self.capacity} tokens"
        if self.scales is not None and keys.dtype != torch.int8:  # int8 given is held as it is (a restore)
            keys, values = to_int8(keys, self.scales.keys), to_int8(values, self.scales.values)
        self.key_buffer[:, :, position: end].copy_(keys)
        self.value_buffer[:, :, position: end].copy_(values)

    def held(self, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values of positions start.. end - 1 as the buffers hold them (int8 too), as views."""
        return self.key_buffer[:, :, start: end], self.value_buffer[:, :, start: end]

    def read(self, start: int, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """The keys and values of positions start.. end - 1: views, or int8 widened by its scales (Int8Scales.widened;
        the product of the integer and the scale, rounded to that dtype)."""
        keys, values = self.held(start, end)
        return self._widened(keys, 0), self._widened(values, 1)

    def _widened(self, held: torch.Tensor, part: int) -> torch.Tensor:
        """Keys (part 0) or values (1) as held: themselves, or int8 times their scales (Int8Scales.widening)."""
        return held if self.scales is None else held * self.scales.widening[part]

    def attend(self, query: torch.Tensor, end: int, scale: float) -> torch.Tensor:
        """One token's attention over what the token at position end - 1 sees (visible()): query (1, KV, G, D) ->
        (1, KV, G, D), float32. int8 read as it is held: the query times the keys' scales, the output times the
        values' (what kvqa.model.kernels.llama_layer computes too, bit for bit)."""
        if self.scales is None:
            return attend_one(query, *self.visible(end), scale)
        keys, values = self.held(self._seen_from(end), end)
        return attend_one(query * self.scales.keys, keys, values, scale) * self.scales.values

    def visible(self, end: int) -> tuple[torch.Tensor, torch.Tensor]:
        """What the token at position end - 1 attends to (read()): from 0, or for a sliding window its last `window`
        positions."""
        return self.read(self._seen_from(end), end)

    def _seen_from(self, end: int) -> int:
        return 0 if self.window is None else max(0, end - self.window)

    def addresses(self, dtype: torch.dtype) -> tuple[int, int, int, int | None, int | None] | None:
        """(keys' address, values' address, elements from one position to the next, the keys' and the values' int8
        scales' addresses or None) for C that writes and reads the buffers in place (kvqa.model.kernels.llama_layer), or
        None where they are not laid out as it reads them."""
        buffers = (self.key_buffer, self.value_buffer)
        if not all(b.dtype == dtype and b.is_contiguous() for b in buffers):
            return None
        scales = (None, None) if self.scales is None else (self.scales.keys.data_ptr(), self.scales.values.data_ptr())
        return self.key_buffer.data_ptr(), self.value_buffer.data_ptr(), self.key_buffer.stride(1), *scales

    @property
    def nbytes(self) -> int:
        """Bytes the buffers hold (an int8 layer's scales are the model's, shared by all its caches)."""
        return self.key_buffer.nbytes + self.value_buffer.nbytes if self.is_initialized else 0

    def update(self, key_states: torch.Tensor, value_states: torch.Tensor, *args, **kwargs):
        if not self.is_initialized:
            self.lazy_initialization(key_states, value_states)
        end = self.length + key_states.shape[-2]
        self.write(self.length, key_states, value_states)
        start = self.window_start  # a window sees the W - 1 before the new tokens, and themselves
        self.length = end
        return self.read(start, end)  # (B, kv_heads, end - start, head_dim): views, no copy (int8: widened)

    def get_mask_sizes(self, query_length: int) -> tuple[int, int]:
        """(keys attended, position of the first): what update() returns for the next `query_length` tokens."""
        start = self.window_start
        return self.length - start + query_length, start

    @property
    def window_start(self) -> int:
        """The first position the next token sees: 0, or for a sliding window the W - 1 before it."""
        return 0 if self.window is None else max(0, self.length - self.window + 1)

    def get_seq_length(self) -> int:
        return self.length

    def crop(self, tokens_to_remove: int) -> None:
        self.length -= abs(tokens_to_remove)

    def __getstate__(self) -> dict:
        """Pickle (the ZeroGPU boundary) only the filled part of the buffers, once: not the reserve, not views."""
        state = dict(self.__dict__)  # the filled views are properties, not held
        if self.is_initialized:
            state["key_buffer"] = self.key_buffer[:, :, : self.length].clone()
            state["value_buffer"] = self.value_buffer[:, :, : self.length].clone()
        return state

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)
        if self.is_initialized:
            filled_keys, filled_values = self.key_buffer, self.value_buffer
            self.lazy_initialization(filled_keys, filled_values)  # full-capacity buffers again
            self.key_buffer[:, :, : self.length].copy_(filled_keys)
            self.value_buffer[:, :, : self.length].copy_(filled_values)

    def to(self, device: torch.device) -> None:
        if self.scales is not None:
            self.scales = self.scales.to(device)
        if self.is_initialized:
            self.key_buffer = self.key_buffer.to(device)
            self.value_buffer = self.value_buffer.to(device)
            self.device = self.key_buffer.device


class KVCache(Cache):
    """A cache for a document plus a reserve of tokens, with a free rollback to any earlier length; its keys and
    values held in `dtype` (None: the model's; the layers round what they are given to it, and hand it back)."""

    def __init__(self, num_layers: int, capacity: int, windows: list[int | None] | None = None,
                 dtype: torch.dtype | None = None, scales: list[Int8Scales] | None = None):
        windows = windows or [None] * num_layers  # per layer: its sliding window, None for full attention
        assert len(windows) == num_layers, f"{len(windows)} windows for {num_layers} layers"
        per_layer = scales or [None] * num_layers  # an int8 cache: each layer's scales
        assert len(per_layer) == num_layers, f"{len(per_layer)} layers' scales for {num_layers} layers"
        super().__init__(layers=[_BufferLayer(capacity, window, dtype, s) for window, s in zip(windows, per_layer)])
        self.capacity = capacity
        self._static: Cache | None = None  # static_view(), built on first use

    def __getstate__(self) -> dict:
        return {**self.__dict__, "_static": None}  # the view shares the buffers: rebuilt after unpickling

    @property
    def length(self) -> int:
        return self.layers[0].length

    def rollback(self, length: int) -> None:
        """Forget every token after the first `length`, in place."""
        assert 0 <= length <= self.length, f"cannot roll back to {length} from {self.length}"
        for layer in self.layers:
            layer.length = length

    @property
    def nbytes(self) -> int:
        """Bytes held by the buffers, reserve included."""
        return sum(layer.nbytes for layer in self.layers)

    def tensors(self) -> list[tuple[torch.Tensor, torch.Tensor]]:
        """Each layer's (keys, values) over the current length as held (int8 too), as views."""
        return [layer.held(0, layer.length) for layer in self.layers]

    def static_view(self) -> Cache:
        """The same buffers as a fixed-shape cache for a compiled decode step
        (kvqa.generation.decode.decode_one_token):
        every forward sees the whole capacity, later positions hidden by the causal mask, and the write position is
        a tensor, so the shapes and addresses a compiled graph (or a CUDA graph) captures never change from token
        to token or question to question. Built once per cache; call advance(n) after each step."""
        if self._static is None:
            layers = []
            for layer in self.layers:
                assert layer.is_initialized, "prefill the cache before decoding from it"
                assert layer.scales is None, "a compiled step reads a float cache"
                static = StaticLayer(max_cache_len=self.capacity)
                static.keys, static.values = layer.key_buffer, layer.value_buffer  # shared, not copied
                for buffer in (layer.key_buffer, layer.value_buffer):  # the reserve was never written: masked
                    buffer[:, :, layer.length:].zero_()  # positions must hold numbers (0 x NaN is NaN)
                static.device = layer.key_buffer.device
                static.batch_size, static.num_heads = layer.key_buffer.shape[:2]
                static.k_head_dim, static.v_head_dim = layer.key_buffer.shape[-1], layer.value_buffer.shape[-1]
                static.cumulative_length = torch.zeros((), dtype=torch.long, device=static.device)
                for tensor in (static.keys, static.values, static.cumulative_length):
                    torch._dynamo.mark_static_address(tensor)
                static.is_initialized = True
                layers.append(static)
            self._static = Cache(layers=layers)
        for static in self._static.layers:
            static.cumulative_length.fill_(self.length)  # in place: the graph keeps reading the same tensor
        return self._static

    def advance(self, tokens: int) -> None:
        """Count `tokens` written by a step on the static view as held."""
        assert self.length + tokens <= self.capacity, f"cache overflow: {self.length + tokens} > {self.capacity}"
        for layer in self.layers:
            layer.length += tokens

    def to(self, device: torch.device | str) -> KVCache:
        """Move the buffers to `device` in place (ZeroGPU keeps caches on the CPU between calls)."""
        for layer in self.layers:
            layer.to(torch.device(device))
        self._static = None  # its tensors were on the old device
        return self


def new_cache(model_config, capacity: int, dtype: torch.dtype | None = None,
              scales: list[Int8Scales] | None = None) -> KVCache:
    """An empty KVCache for a model, able to hold `capacity` tokens in every layer (sliding-window layers too), in
    `dtype` (LoadedModel.kv_dtype; None: the model's; int8 with each layer's `scales`, LoadedModel.kv_scales)."""
    per_layer = windows(model_config)
    return KVCache(len(per_layer), capacity, per_layer, dtype, scales)


def windows(model_config) -> list[int | None]:
    """Each layer's sliding window (the positions a token sees, itself included), None for full attention."""
    layer_types, kwargs = get_layer_types_and_kwargs(model_config.get_text_config(decoder=True))
    return [k["sliding_window"] if kind == "sliding_attention" else None for kind, k in zip(layer_types, kwargs)]


def unsupported_reason(model_config) -> Message | None:
    """Why a model's cache cannot be rolled back exactly (chunked or linear layers), or None. Full and
    sliding-window attention are supported."""
    text_config = model_config.get_text_config(decoder=True)
    try:
        layer_types, _ = get_layer_types_and_kwargs(text_config)
    except Exception as e:  # an architecture this version cannot describe
        return Message("model.layout_unknown", error=e)
    other = sorted(set(layer_types) - {"full_attention", "sliding_attention"})
    if other:
        return Message("model.layers_not_full", kinds=", ".join(other))
    return None


def bytes_per_token(model_config, dtype: torch.dtype) -> int:
    """One token's keys and values in a model's cache (kv_bytes for its config; an int8 cache's scales, a few KiB
    for the whole cache, not counted)."""
    c = model_config.get_text_config(decoder=True)
    kv_heads = getattr(c, "num_key_value_heads", None) or c.num_attention_heads
    head_dim = getattr(c, "head_dim", None) or c.hidden_size // c.num_attention_heads
    return kv_bytes(c.num_hidden_layers, kv_heads, head_dim, dtype.itemsize)


def cache_bytes(model_config, dtype: torch.dtype, tokens: int, reserve: int) -> int:
    """The bytes a document's cache takes: `tokens` prefix tokens plus the `reserve` for a question and its answer,
    in `dtype` (new_cache's nbytes for that capacity). What a prefill or a restore is admitted for."""
    return bytes_per_token(model_config, dtype) * (tokens + reserve)


def kv_bytes(layers: int, kv_heads: int, head_dim: int, itemsize: int) -> int:
    """2 (keys and values) x layers x kv_heads x head_dim x bytes per element."""
    return 2 * layers * kv_heads * head_dim * itemsize


def cache_from_tensors(model_config, tensors: list[tuple[torch.Tensor, torch.Tensor]], capacity: int,
                       scales: list[Int8Scales] | None = None) -> KVCache:
    """A KVCache of `capacity` tokens holding a copy of each layer's (keys, values), as KVCache.tensors() gave them
    (the disk tier restores caches with this; int8 ones with the model's `scales`); bit for bit the same keys and
    values."""
    cache = new_cache(model_config, capacity, tensors[0][0].dtype if tensors else None, scales)
    assert len(tensors) == len(cache.layers), f"{len(tensors)} layers stored, the model has {len(cache.layers)}"
    for layer, (keys, values) in zip(cache.layers, tensors):  # written as held (update() would widen them back)
        layer.lazy_initialization(keys, values)
        layer.write(0, keys, values)
        layer.length = keys.shape[-2]
    return cache
