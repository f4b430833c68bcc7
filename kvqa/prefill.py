"""The prefill: the document's prompt prefix run through the model once, its keys and values kept for every question."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from .memory import release_memory
from .cache import KVCache, bytes_per_token, new_cache
from .config import Config
from .documents import Document
from .errors import DocumentTooLong, OutOfMemory
from .model import LoadedModel
from .prompt import ChatPrompt
from .timing import now


MAX_CHARS_PER_TOKEN = 32  # no tokenizer packs more than this on average: longer texts cannot fit


@dataclass(frozen=True)
class PrefilledDocument:
    """A document read once: its prefix ids and their keys/values, ready for any number of questions."""

    document: Document
    prompt: ChatPrompt  # the template split around document and question, with the date fixed at prefill
    ids: tuple[int, ...]  # the prefix token ids the cache was computed from; never re-tokenized
    cache: KVCache  # holds len(ids) tokens between answers, plus a reserve for one question and answer
    prefill_s: float
    model_name: str
    max_question_tokens: int
    max_new_tokens: int
    lock: threading.Lock = field(default_factory=threading.Lock, compare=False, repr=False)

    @property
    def tokens(self) -> int:
        return len(self.ids)

    @property
    def cache_bytes(self) -> int:
        """Bytes the cache holds, its reserve for question and answer included."""
        return self.cache.nbytes

    @property
    def tokens_per_s(self) -> float:
        return self.tokens / self.prefill_s if self.prefill_s > 0 else 0.0

    def to(self, device: torch.device | str) -> "PrefilledDocument":
        """Move the cache to `device`, in place (ZeroGPU keeps it on the CPU between calls)."""
        self.cache.to(device)
        return self

    def __getstate__(self) -> dict:  # crosses the ZeroGPU process boundary: everything but the lock
        return {f: getattr(self, f) for f in self.__dataclass_fields__ if f != "lock"}

    def __setstate__(self, state: dict) -> None:
        for name, value in {**state, "lock": threading.Lock()}.items():
            object.__setattr__(self, name, value)


def check_fits(lm: LoadedModel, tokens: int, reserve: int) -> None:
    """Raise DocumentTooLong when a prefix of `tokens` plus the reserve exceeds the model's context."""
    limit = lm.context_length - reserve
    if tokens > limit:
        raise DocumentTooLong(
            f"The document is {tokens:,} tokens; with this model kvqa reads at most {limit:,} "
            f"({lm.context_length:,} of context, {reserve:,} kept for the question and answer). "
            f"Shorten it by about {tokens - limit:,} tokens, or use a model with a longer context."
        )


@torch.no_grad()
def prefill(
    lm: LoadedModel,
    document: Document,
    *,
    config: Config = Config(),
    progress: Callable[[float], None] | None = None,
    admit: Callable[[int], None] | None = None,
) -> PrefilledDocument:
    """Tokenize the document's prefix once and run it through the model in chunks; progress(fraction) after each.
    admit(bytes), if given, is called before the cache is allocated and may refuse it by raising."""
    if len(document.text) > MAX_CHARS_PER_TOKEN * lm.context_length:  # refuse before spending time tokenizing
        raise DocumentTooLong(
            f"The document is {len(document.text):,} characters, far more than this model reads "
            f"({lm.context_length:,} tokens, roughly {4 * lm.context_length:,} characters of English). "
            "Load a shorter document or the part you need."
        )
    prompt = ChatPrompt.for_tokenizer(lm.tokenizer)
    ids = prompt.prefix_ids(document.text)
    reserve = config.reserve_tokens
    check_fits(lm, len(ids), reserve)
    if admit is not None:
        admit(bytes_per_token(lm.config, lm.dtype) * (len(ids) + reserve))
    started = now(lm.device)
    with out_of_memory_as_error("reading the document"):
        cache = new_cache(lm.config, len(ids) + reserve)
        run_chunks(lm, ids, cache, chunk_size=config.chunk_size, progress=progress)
    prefill_s = now(lm.device) - started
    assert cache.length == len(ids) and cache.nbytes == bytes_per_token(lm.config, lm.dtype) * cache.capacity
    return PrefilledDocument(
        document=document,
        prompt=prompt,
        ids=tuple(ids),
        cache=cache,
        prefill_s=prefill_s,
        model_name=lm.name,
        max_question_tokens=config.max_question_tokens,
        max_new_tokens=config.max_new_tokens,
    )


@torch.no_grad()
def run_chunks(
    lm: LoadedModel,
    ids: list[int],
    cache: KVCache,
    *,
    chunk_size: int,
    progress: Callable[[float], None] | None = None,
) -> torch.Tensor:
    """Feed ids through the model in chunks on top of the cache; returns the logits of the last position, (1, vocab)."""
    assert ids, "nothing to prefill"
    logits = None
    for start in range(0, len(ids), chunk_size):
        chunk = torch.tensor([ids[start: start + chunk_size]], device=lm.device)  # (1, T)
        logits = lm.model(input_ids=chunk, cache=cache, use_cache=True, logits_to_keep=1).logits[:, -1]
        if progress is not None:
            progress(min(start + chunk_size, len(ids)) / len(ids))
    return logits


@contextmanager
def out_of_memory_as_error(doing: str) -> Iterator[None]:
    """Turn an out-of-memory error inside the model into OutOfMemory, after freeing what can be freed."""
    try:
        yield
    except (MemoryError, torch.OutOfMemoryError):
        release_memory()
        raise OutOfMemory(f"The machine ran out of memory while {doing}: try a shorter document or question, or "
                          "fewer new tokens. Whatever was loaded before is still loaded.") from None
