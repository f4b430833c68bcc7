"""Composed caches: a question answered from the caches of several parts of a long document at once, without reading
the parts again.

Each part was read as its own prompt: the template's head, the part's text, the template's tail (the end of the
system turn). A composed cache is the template's head (every part's cache holds the same), then runs of the parts'
text (`Run`s, `cut` from a part's cache: characters of its text, as the tokens its prompt holds them), each with its
keys moved to its new positions through their rotation (rotary position embeddings: a key computed at position p
and rotated by d is the key at p + d, what llama.cpp's context shift does) and its values as they are, then the tail
read again on top, so its few tokens see every run. A run never saw the runs before it (it was read in its own
part): the composed cache is close to reading the runs' text together, not equal to it (docs/quality.md measures how
close). The head and tail are the template's own tokens (where two one-character documents' prompts agree), so a
run is exactly its characters' tokens. Only caches of full-attention layers with plain rotary embeddings are
composed (SmolLM2, Llama 3.x); a model with sliding-window layers (Gemma 3) is refused with ModelError.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

import torch

from kvqa.config import Config
from kvqa.documents.reading import Document
from kvqa.errors import ModelError
from kvqa.generation.generate import check_fits, out_of_memory_as_error, run_chunks
from kvqa.model.kv_cache import windows
from kvqa.model.loading import LoadedModel
from kvqa.prompt import Prompt
from kvqa.results import PrefilledDocument
from kvqa.timing import now


@dataclass(frozen=True)
class Run:
    """Tokens taken from one read's cache (cut): their ids and text, the position their first was read at, and each
    layer's keys and values as read there."""

    ids: tuple[int, ...]
    text: str
    at: int
    layers: tuple[tuple[torch.Tensor, torch.Tensor], ...]


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


def edges(prompt: Prompt) -> tuple[int, int]:
    """How many of a prompt's prefix ids are the template's before the document's text (head) and after it (tail):
    where the prefixes of two one-character documents agree."""
    a, b = prompt.prefix_ids("x"), prompt.prefix_ids("y")
    head = _common([a, b])
    return head, _common([a[::-1], b[::-1]])


def cut(lm: LoadedModel, read: PrefilledDocument, spans: Sequence[tuple[int, int]]) -> list[Run]:
    """The runs of a read's cache that hold characters [start, end) of its text, one per span (in the order given),
    copied out of it: the tokens of its text lying wholly inside the span (the text tokenized alone, matched to the
    prefix ids between the template's head and tail; a token the template merged with its own at an edge is left out).
    A span holding no whole token gives an empty run."""
    head, tail = edges(read.prompt)
    at = _body_offsets(lm, read, head, tail)
    runs = []
    for start, end in spans:
        inside = [i for i, span in enumerate(at) if span is not None and start <= span[0] and span[1] <= end
                  and span[1] > span[0]]
        if not inside:
            runs.append(_run(read, head, head, ""))
            continue
        first, last = head + inside[0], head + inside[-1] + 1
        runs.append(_run(read, first, last, read.document.text[at[inside[0]][0]: at[inside[-1]][1]]))
    return runs


def template(read: PrefilledDocument) -> tuple[Run, tuple[int, ...]]:
    """A read's template head as a run (its cache's first tokens, before the document's text; every read with the
    same prompt holds the same), and the ids of its tail (the end of the system turn, after the text)."""
    head, tail = edges(read.prompt)
    return _run(read, 0, head, ""), tuple(read.ids[len(read.ids) - tail:]) if tail else ()


def compose(lm: LoadedModel, head: Run, runs: Sequence[Run], tail: Sequence[int], document: Document, *,
            prompt: Prompt, config: Config = Config()) -> PrefilledDocument:
    """One cache: the template's head, the runs in the order given, each moved to its new positions, and the tail's
    ids read again on top (see the module); its document is `document` holding the runs' text. Raises ModelError
    when the model's caches cannot be composed, DocumentTooLong when it all does not fit the model."""
    if not composable(lm):
        raise ModelError("model.not_composable", model=lm.name)
    started = now(lm.device)
    composed = [*head.ids, *(t for run in runs for t in run.ids), *tail]
    reserve = config.limits.reserve_tokens
    check_fits(lm, len(composed), reserve)
    with out_of_memory_as_error("doing.reading"):
        cache = lm.new_cache(len(composed) + reserve)
        for layer in range(len(cache.layers)):
            keys, values, at = [], [], 0
            for run in (head, *runs):
                k, v = run.layers[layer]
                keys.append(k if run.at == at else shift_keys(lm, k, at - run.at))
                values.append(v)
                at += len(run.ids)
            cache.update(torch.cat(keys, dim=2), torch.cat(values, dim=2), layer)
        if tail:
            run_chunks(lm, list(tail), cache, chunk_size=config.chunk_size)
    assert cache.length == len(composed)
    return PrefilledDocument(
        document=replace(document, text="".join(run.text for run in runs)), prompt=prompt, ids=tuple(composed),
        cache=cache, cache_bytes=cache.nbytes, prefill_s=now(lm.device) - started, model_name=lm.name,
        max_question_tokens=config.limits.max_question_tokens, max_new_tokens=config.limits.max_new_tokens,
        origin="composed")


def compose_reads(lm: LoadedModel, reads: Sequence[PrefilledDocument], document: Document, *,
                  config: Config = Config()) -> PrefilledDocument:
    """The reads' whole texts composed, in order (compose): the first read's template around them."""
    head, tail = template(reads[0])
    runs = [run for read in reads for run in cut(lm, read, [(0, len(read.document.text))])]
    return compose(lm, head, runs, tail, document, prompt=reads[0].prompt, config=config)


def _run(read: PrefilledDocument, first: int, end: int, text: str) -> Run:
    layers = tuple(tuple(t.clone() for t in layer.read(first, end)) for layer in read.cache.layers)  # int8: widened
    return Run(tuple(read.ids[first:end]), text, first, layers)


def _body_offsets(lm: LoadedModel, read: PrefilledDocument, head: int, tail: int) -> list[tuple[int, int] | None]:
    """For each prefix id between head and tail, the characters of the read's text it holds, or None where the text
    tokenized alone disagrees with the prefix ids (the template merged it with its own; the same tokens at both ends
    are matched, from the start and from the end)."""
    body = list(read.ids[head: len(read.ids) - tail])
    found = lm.tokenizer(read.document.text, add_special_tokens=False, return_offsets_mapping=True)
    ids, spans = list(found["input_ids"]), [tuple(s) for s in found["offset_mapping"]]
    start = _common([ids, body])
    end = min(_common([ids[::-1], body[::-1]]), min(len(ids), len(body)) - start)
    at: list[tuple[int, int] | None] = [None] * len(body)
    for i in range(start):
        at[i] = spans[i]
    for j in range(1, end + 1):
        at[len(body) - j] = spans[len(ids) - j]
    return at


def _common(sequences: list[list[int]]) -> int:
    """How many leading items every sequence shares."""
    shortest = min(len(s) for s in sequences)
    return next((i for i in range(shortest) if len({s[i] for s in sequences}) > 1), shortest)
