"""KVCache on its own (no model): what the rollback promises, on random keys and values. The exactness tests check the
same promises through real models; these run in milliseconds, so the mutation run (docs/testing.md) can use them."""

from __future__ import annotations

import pickle

import pytest
import torch
from transformers import Gemma3TextConfig, GPT2Config, LlamaConfig

from kvqa.model.kv_cache import (
    KVCache,
    bytes_per_token,
    cache_bytes,
    cache_from_tensors,
    kv_bytes,
    new_cache,
    unsupported_reason,
    windows,
)

HEADS, DIM = 2, 4


def kv(tokens: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return torch.randn(1, HEADS, tokens, DIM, generator=g), torch.randn(1, HEADS, tokens, DIM, generator=g)


def filled(capacity: int = 16, tokens: int = 10, *, layers: int = 2, windows=None) -> KVCache:
    cache = KVCache(layers, capacity, windows)
    for i in range(layers):
        cache.update(*kv(tokens, seed=i), i)
    return cache


def test_update_writes_in_place_and_returns_every_position_held():
    cache = KVCache(1, 16)
    first_k, first_v = kv(10, seed=0)
    keys, values = cache.update(first_k, first_v, 0)
    assert torch.equal(keys, first_k) and torch.equal(values, first_v)
    more_k, more_v = kv(3, seed=1)
    keys, values = cache.update(more_k, more_v, 0)
    assert keys.shape[2] == values.shape[2] == cache.length == cache.get_seq_length() == 13
    assert torch.equal(keys, torch.cat([first_k, more_k], 2)) and torch.equal(values, torch.cat([first_v, more_v], 2))
    assert keys.untyped_storage().data_ptr() == cache.layers[0].key_buffer.untyped_storage().data_ptr()  # no copy


def test_rollback_forgets_the_answer_and_keeps_the_document_bit_for_bit():
    cache = filled(tokens=10)
    document = [(k.clone(), v.clone()) for k, v in cache.tensors()]
    for i in range(2):
        cache.update(*kv(5, seed=10 + i), i)  # a question and its answer in the reserve
    assert cache.length == 15
    cache.rollback(10)
    assert cache.length == 10 and all(layer.length == 10 for layer in cache.layers)
    for (keys, values), (k, v) in zip(cache.tensors(), document):
        assert torch.equal(keys, k) and torch.equal(values, v)
    other_k, other_v = kv(2, seed=20)  # the next question lands where the last one was, after the document
    keys, _ = cache.update(other_k, other_v, 0)
    assert torch.equal(keys[:, :, :10], document[0][0]) and torch.equal(keys[:, :, 10:], other_k)


@pytest.mark.parametrize("length", [0, 4, 10])
def test_rollback_to_any_earlier_length_and_never_past_the_end(length):
    cache = filled(tokens=10)
    cache.rollback(length)
    assert cache.length == length and [k.shape[2] for k, _ in cache.tensors()] == [length, length]
    with pytest.raises(AssertionError):
        cache.rollback(length + 1)
    with pytest.raises(AssertionError):
        cache.rollback(-1)


def test_crop_removes_tokens_from_the_end():
    cache = filled(tokens=10)
    for layer in cache.layers:
        layer.crop(3)
    assert cache.length == 7
    for layer in cache.layers:
        layer.crop(-2)  # transformers passes a negative count too
    assert cache.length == 5


def test_the_reserve_is_never_overrun():
    cache = filled(capacity=12, tokens=10)
    with pytest.raises(AssertionError, match="overflow"):
        cache.update(*kv(3, seed=5), 0)
    with pytest.raises(AssertionError, match="overflow"):
        cache.advance(3)
    cache.update(*kv(2, seed=5), 0)  # exactly full is fine
    assert cache.layers[0].length == 12
    other = filled(capacity=12, tokens=10)
    other.advance(2)  # so is a step that fills it exactly
    assert other.length == 12


def test_nbytes_counts_the_whole_capacity_and_kv_bytes_the_formula():
    cache = filled(capacity=16, tokens=10)
    assert cache.nbytes == 2 * 2 * HEADS * 16 * DIM * 4  # layers x (keys, values) x heads x capacity x dim x 4 bytes
    assert KVCache(2, 16).nbytes == 0  # nothing allocated before the first update
    assert kv_bytes(layers=3, kv_heads=2, head_dim=8, itemsize=2) == 2 * 3 * 2 * 8 * 2
    config = LlamaConfig(num_hidden_layers=3, hidden_size=64, num_attention_heads=8, num_key_value_heads=2)
    assert bytes_per_token(config, torch.bfloat16) == 2 * 3 * 2 * (64 // 8) * 2
    plain = GPT2Config(n_layer=2, n_embd=16, n_head=4)  # no key/value heads of its own, no head_dim: the fallbacks
    per_token = bytes_per_token(plain, torch.float32)
    assert per_token == 2 * 2 * 4 * (16 // 4) * 4 and isinstance(per_token, int)


def test_cache_bytes_is_what_the_cache_holds_and_its_filled_part_what_the_store_writes():
    config = LlamaConfig(num_hidden_layers=2, hidden_size=8, num_attention_heads=2, num_key_value_heads=HEADS)
    cache = cache_from_tensors(config, [kv(10, seed=i) for i in range(2)], capacity=10 + 6)
    assert cache_bytes(config, torch.float32, 10, 6) == cache.nbytes == 2 * 2 * HEADS * 16 * DIM * 4
    assert cache_bytes(config, torch.float32, 10, 0) == sum(k.nbytes + v.nbytes for k, v in cache.tensors())
    assert cache_bytes(config, torch.bfloat16, 10, 6) == cache.nbytes // 2


def test_a_sliding_window_layer_hands_attention_only_what_its_tokens_see():
    window = 4
    cache = KVCache(1, 16, [window])
    keys_in, values_in = kv(10, seed=0)
    keys, _ = cache.update(keys_in, values_in, 0)  # the first chunk: every key (the mask hides what it must)
    assert keys.shape[2] == 10
    assert cache.layers[0].get_mask_sizes(2) == (window - 1 + 2, 10 - window + 1)
    more_k, more_v = kv(2, seed=1)
    keys, values = cache.update(more_k, more_v, 0)
    assert keys.shape[2] == window - 1 + 2  # the W - 1 before the new tokens, and themselves
    assert torch.equal(keys, torch.cat([keys_in[:, :, 7:], more_k], 2))
    assert torch.equal(values[:, :, -2:], more_v)
    cache.rollback(10)  # every position is kept: rolling back a window layer is free too
    assert torch.equal(cache.layers[0].keys, keys_in)
    assert KVCache(1, 16, [None]).layers[0].window_start == 0
    assert [layer.is_sliding for layer in KVCache(2, 8, [window, None]).layers] == [True, False]  # read by the masks


def test_pickling_keeps_the_filled_part_once_and_the_capacity():
    cache = filled(capacity=4096, tokens=10)
    cache.update(*kv(3, seed=9), 0)
    cache.rollback(10)
    data = pickle.dumps(cache)
    filled_bytes = 2 * 2 * HEADS * 10 * DIM * 4  # layers x (keys, values) x heads x tokens x dim x 4 bytes
    assert len(data) < filled_bytes + 4096  # the reserve (64x more) is not sent, nor any view of the buffers
    back = pickle.loads(data)
    assert back.capacity == 4096 and back.length == 10 and back.nbytes == cache.nbytes
    for (k, v), (k2, v2) in zip(cache.tensors(), back.tensors()):
        assert torch.equal(k, k2) and torch.equal(v, v2)
    back.update(*kv(4086, seed=3), 0)  # the whole reserve is usable again
    assert back.layers[0].length == 4096


def test_cache_from_tensors_copies_bit_for_bit_and_checks_the_layers():
    config = LlamaConfig(num_hidden_layers=2, hidden_size=8, num_attention_heads=2, num_key_value_heads=HEADS)
    source = filled(tokens=10)
    copy = cache_from_tensors(config, source.tensors(), capacity=20)
    assert copy.capacity == 20 and copy.length == 10
    for (k, v), (k2, v2) in zip(source.tensors(), copy.tensors()):
        assert torch.equal(k, k2) and torch.equal(v, v2)
        assert k.data_ptr() != k2.data_ptr()
    with pytest.raises(AssertionError, match="layers"):
        cache_from_tensors(config, source.tensors()[:1], capacity=20)


def test_static_view_shares_the_buffers_and_zeroes_the_reserve():
    cache = filled(capacity=16, tokens=10)
    cache.layers[0].key_buffer[:, :, 10:] = float("nan")  # what an unwritten reserve may hold
    view = cache.static_view()
    static = view.layers[0]
    assert static.keys.data_ptr() == cache.layers[0].key_buffer.data_ptr()
    assert torch.count_nonzero(static.keys[:, :, 10:]) == 0 and not torch.isnan(static.keys).any()
    assert int(static.cumulative_length) == 10
    new_k, new_v = kv(1, seed=7)
    keys, values = static.update(new_k, new_v)  # what a compiled decode step does: writes after the document
    assert keys.shape == cache.layers[0].key_buffer.shape and static.keys.shape[-1] == static.k_head_dim == DIM
    assert torch.equal(cache.layers[0].key_buffer[:, :, 10:11], new_k) and torch.equal(values[:, :, 10:11], new_v)
    cache.advance(1)
    assert cache.length == 11 and int(cache.static_view().layers[1].cumulative_length) == 11
    with pytest.raises(AssertionError, match="prefill"):
        KVCache(1, 8).static_view()
    assert pickle.loads(pickle.dumps(cache))._static is None  # rebuilt after crossing a process boundary


def test_new_cache_follows_the_models_layers():
    llama = LlamaConfig(num_hidden_layers=3, hidden_size=8, num_attention_heads=2)
    assert windows(llama) == [None, None, None] and unsupported_reason(llama) is None
    gemma = Gemma3TextConfig(num_hidden_layers=6, sliding_window=32, sliding_window_pattern=6)
    assert windows(gemma) == [32] * 5 + [None]  # five local layers, then one global
    assert [layer.window for layer in new_cache(gemma, 8).layers] == windows(gemma)
    assert unsupported_reason(gemma) is None
    chunked = LlamaConfig(num_hidden_layers=3, hidden_size=8, num_attention_heads=2)
    chunked.layer_types = ["linear_attention", "chunked_attention", "full_attention"]
    chunked.attention_chunk_size = 4
    reason = unsupported_reason(chunked)
    assert reason is not None and reason.key == "model.layers_not_full"
    assert "chunked_attention, linear_attention layers" in str(reason)  # each kind named once, sorted
    unknown = LlamaConfig(num_hidden_layers=2, hidden_size=8, num_attention_heads=2)
    unknown.layer_types = ["chunked_attention", "full_attention"]  # without the chunk size transformers needs
    reason = unsupported_reason(unknown)
    assert reason.key == "model.layout_unknown" and "attention_chunk_size" in str(reason)  # transformers' words
