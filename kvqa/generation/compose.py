"""Composed caches: a question answered from the caches of two or more parts of a long document at once, without
reading the parts again.

Each part was read as its own prompt: the template's head, the part's text, the template's tail (the end of the
system turn). The composed cache keeps the first part's head and text, appends each next part's text with its keys
moved to their new positions through their rotation (rotary position embeddings: a key computed at position p and
rotated by d is the key at p + d, what llama.cpp's context shift does), and reads the tail again on top, so its few
tokens see every part. A later part's text never saw the parts before it (it was read alone): the composed cache is
close to reading the parts together, not equal to it (experiments/composed.py measures how close). Only caches of
full-attention layers with plain rotary embeddings are composed (SmolLM2, Llama 3.x); a model with sliding-window
layers (Gemma 3) is refused with ModelError.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from kvqa.config import Config
from kvqa.documents.reading import Document
from kvqa.errors import ModelError
from kvqa.generation.generate import check_fits, out_of_memory_as_error, run_chunks
from kvqa.model.kv_cache import new_cache, windows
from kvqa.model.loading import LoadedModel
from kvqa.results import PrefilledDocument
from kvqa.timing import now


def composable(lm: LoadedModel) -> bool:
    """Whether the model's caches can be composed: full attention in every layer, rotary embeddings that scale
    nothing (rotating twice is then rotating once by the sum)."""
    rotary = getattr(getattr(lm.model, "model", None), "rotary_emb", None)
    return (rotary is not None and getattr(rotary, "attention_scaling", 1.0) == 1.0
            and all(window is None for window in windows(lm.config)))


@torch.no_grad()
def shift_keys(lm: LoadedModel, keys: torch.Tensor, by: int) -> torch.Tensor:
    """Keys (batch, heads, tokens, head_dim) computed at positions p..p+tokens, as they are at p+by..: each rotated by
    `by` positions (apply_rotary_pos_emb with the angle of position `by`), in float32, returned in keys' dtype."""
    rotary = lm.model.model.rotary_emb
    probe = torch.zeros(1, dtype=torch.float32, device=keys.device)
    cos, sin = rotary(probe, torch.tensor([[by]], device=keys.device))  # (1, 1, head_dim) each
    k = keys.float()
    half = k.shape[-1] // 2
    turned = torch.cat((-k[..., half:], k[..., :half]), dim=-1)  # rotate_half
    return (k * cos + turned * sin).to(keys.dtype)


def compose(lm: LoadedModel, parts: Sequence[PrefilledDocument], document: Document, *,
            config: Config = Config()) -> PrefilledDocument:
    """One cache holding every part's text, in order, from their own caches (see the module); `document` is what it
    holds (the parts' text, joined). Raises ModelError when the model's caches cannot be composed, DocumentTooLong
    when the parts together do not fit the model."""
    if not composable(lm):
        raise ModelError("model.not_composable", model=lm.name)
    started = now(lm.device)
    ids = [list(part.ids) for part in parts]
    head = _common(ids)
    tail = _common([list(reversed(i)) for i in ids])
    tail = min(tail, min(len(i) for i in ids) - head)
    bodies = [i[head: len(i) - tail] for i in ids]
    composed = ids[0][:head] + [t for body in bodies for t in body] + (ids[0][len(ids[0]) - tail:] if tail else [])
    reserve = config.limits.reserve_tokens
    check_fits(lm, len(composed), reserve)
    with out_of_memory_as_error("doing.reading"):
        cache = new_cache(lm.config, len(composed) + reserve, lm.kv_dtype)
        for layer in range(len(cache.layers)):
            keys, values, at = [], [], head
            for n, (part, body) in enumerate(zip(parts, bodies)):
                start = 0 if n == 0 else head  # the first part keeps its head
                k, v = part.cache.layers[layer].keys, part.cache.layers[layer].values
                k, v = k[:, :, start: head + len(body)], v[:, :, start: head + len(body)]
                keys.append(k if n == 0 else shift_keys(lm, k, at - head))
                values.append(v)
                at += len(body)
            cache.update(torch.cat(keys, dim=2), torch.cat(values, dim=2), layer)
        if tail:
            run_chunks(lm, composed[len(composed) - tail:], cache, chunk_size=config.chunk_size)
    assert cache.length == len(composed)
    first = parts[0]
    return PrefilledDocument(
        document=document, prompt=first.prompt, ids=tuple(composed), cache=cache, cache_bytes=cache.nbytes,
        prefill_s=now(lm.device) - started, model_name=lm.name, max_question_tokens=first.max_question_tokens,
        max_new_tokens=first.max_new_tokens, origin="composed")


def _common(sequences: list[list[int]]) -> int:
    """How many leading items every sequence shares."""
    shortest = min(len(s) for s in sequences)
    return next((i for i in range(shortest) if len({s[i] for s in sequences}) > 1), shortest)
