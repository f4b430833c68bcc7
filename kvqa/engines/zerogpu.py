"""Hugging Face ZeroGPU: CUDA exists only inside @spaces.GPU functions, which run in another process (a fork of
this one, on the same machine and disk) that receives pickled arguments and returns pickled results.

So the prefill and each answer run inside such functions, with a duration derived from their token counts; the
prefilled cache comes back to the CPU and stays in the session's state between calls. With a store (kvqa.cache.store),
this
side writes the cache to its file after the prefill, and each answer is handed the file's key instead of the cache
(StoredDocument): the GPU function reads and checks the file itself, which is several times faster than pickling the
cache across (docs/deploy.md, "ZeroGPU: pickling vs a file"). Without a store, or when the file is not written yet,
gone or damaged, the answer gets a pickled copy of the session's cache. Either way the GPU function moves the cache to
the GPU, and nothing that crosses the boundary is a CUDA tensor. Progress and answers cross as they are produced: the
GPU functions are generators whose last item is the result.
"""

from __future__ import annotations

import logging
import threading
import time
import weakref
from collections.abc import Callable, Generator, Iterator, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace

import torch

from kvqa.cache.restore import cache_key, restore
from kvqa.cache.store import CacheKey, KVStore, text_sha256, weights_fingerprint
from kvqa.documents.reading import Document
from kvqa.errors import ModelError
from kvqa.generation.generate import (
    answer_from_scratch,
    answer_on_cache,
    guarantee,
    out_of_memory_as_error,
    prefill_steps,
    prefix_of,
)
from kvqa.model.kv_cache import cache_bytes, cache_from_tensors
from kvqa.model.loading import LoadedModel, load_model
from kvqa.model.offline import Stages

from ..config import Config
from ..prompt import Prompt, prompt_for
from ..results import Answer, AnswerStream, PrefilledDocument, QuestionTurn, close_events
from ..timing import Timings
from .base import EngineInfo
from .local import LocalEngine

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class StoredDocument:
    """What an answer's GPU function is handed instead of the cache when the store holds it: the document without
    its cache or tokenizer, and which file holds the cache. Kilobytes to pickle, whatever the cache's size."""

    doc: PrefilledDocument  # without_tokenizer(), cache=None
    folder: str  # the store's folder: the GPU process is a fork on the same disk
    key: CacheKey
    capacity: int  # the session's cache's: the document plus the reserve

    def load(self, lm: LoadedModel) -> PrefilledDocument | None:
        """The document with its cache read from the file onto lm's device; None when the file is gone or fails a
        check (the store's checks: header, key, checksum, lengths; then the prefix ids and date line)."""
        stored = KVStore(self.folder, limit_bytes=0).get(self.key, device=lm.device)  # only read: no limit needed
        if stored is None or stored.ids != self.doc.ids or stored.date_string != self.doc.prompt.date_string:
            return None
        with out_of_memory_as_error("doing.restoring"):
            cache = cache_from_tensors(lm.config, stored.tensors, self.capacity, lm.kv_scales)
        return replace(self.doc, cache=cache)

    @classmethod
    def of(cls, doc: PrefilledDocument, store: KVStore, key: CacheKey) -> StoredDocument:
        return cls(without_tokenizer(doc, cache=None), str(store.folder), key, doc.cache.capacity)


def without_tokenizer(doc: PrefilledDocument, **changes) -> PrefilledDocument:
    """The document as it crosses to an answer's GPU function, whose model has its own tokenizer: pickling
    SmolLM2's costs 1.5 MB and 0.13 s a question on this project's CPU, Llama 3.x's is larger. Same cache object."""
    return replace(doc, prompt=replace(doc.prompt, tokenizer=None), **changes)


class FileMissed:
    """An answer's GPU function yields this first, and nothing else, when it could not use the store's file."""


def prefill_seconds(document: Document, config: Config, *args) -> int:
    """A generous GPU time for a prefill: start-up plus ~1 s per 2,000 tokens (a token is ~3 characters or more)."""
    return int(min(300, 20 + len(document.text) / 3 / 2000))


def answer_seconds(source: PrefilledDocument | StoredDocument, question: QuestionTurn, config: Config, *args) -> int:
    """A generous GPU time for one answer: moving the cache, the question, and up to max_new_tokens at ~20/s."""
    doc = source.doc if isinstance(source, StoredDocument) else source
    return int(min(300, 15 + doc.cache_bytes / 2**30 + doc.max_new_tokens / 20))


def baseline_seconds(document: Document, question: QuestionTurn, config: Config, *args) -> int:
    return prefill_seconds(document, config) + 15 + config.limits.max_new_tokens // 20


def _prefill_on_gpu(document: Document, config: Config, prefix: tuple[Prompt, list[int]],
                    keyed: bool) -> Generator[float | CacheKey | PrefilledDocument, None, None]:
    lm = load_model(config)
    doc = yield from prefill_steps(lm, document, config=config, prefix=prefix)  # progress crosses as it happens
    if keyed:  # the store's key for these bits, from the model that computed them: its weights, dtype, attention
        yield cache_key(lm, document, weights=weights_fingerprint(lm.model))
    yield _to(doc, "cpu")


def _stream_on_gpu(source: PrefilledDocument | StoredDocument, question: QuestionTurn,
                   config: Config) -> Generator[str | Answer | FileMissed, None, None]:
    lm = load_model(config)
    if isinstance(source, StoredDocument):
        doc = source.load(lm)
        if doc is None:  # the caller hands the cache over itself
            yield FileMissed()
            return
    else:
        doc = _to(source, lm.device)  # this process's own copy of the cache: the session's stays on the CPU
    doc = replace(doc, prompt=replace(doc.prompt, tokenizer=lm.tokenizer))
    yield from answer_on_cache(lm, doc, question, config.decoding).events()


def _answer_without_cache_on_gpu(document: Document, question: QuestionTurn, config: Config, prompt: Prompt) -> Answer:
    lm = load_model(config)
    return answer_from_scratch(lm, document, question, config.decoding, config=config, prompt=prompt).answer


def _to(doc: PrefilledDocument, device) -> PrefilledDocument:
    doc.cache.to(device)
    return doc


@dataclass(frozen=True)
class _File:
    """A prefilled document's file in the store."""

    key: CacheKey
    written: Future[bool] | None  # the background write (None: the file was there already)

    @property
    def ready(self) -> bool:
        """Written (a write still going on, or one that failed, is not: the store logs the failure)."""
        return self.written is None or (self.written.done() and self.written.result())


class ZeroGPUEngine:
    """kvqa.generation.generate's functions inside @spaces.GPU calls; the model also sits on the CPU here (a
    LocalEngine) for
    tokenizing. With `store`, caches go through its files (module docstring)."""

    kind = "zerogpu"

    def __init__(self, config: Config, spaces, *, store: KVStore | None = None):
        self.config = config
        self.options = config.decoding
        self.local = LocalEngine(config)  # the CPU copy: tokenizer, prompt checks, token counts
        self.store = store
        self._files: weakref.WeakKeyDictionary[PrefilledDocument, _File] = weakref.WeakKeyDictionary()
        self._gpu_key: CacheKey | None = None  # the last key the GPU side gave: its model, weights, dtype, attention
        self._lock = threading.Lock()
        self._prefill_on_gpu = spaces.GPU(duration=prefill_seconds)(_prefill_on_gpu)
        self._stream_on_gpu = spaces.GPU(duration=answer_seconds)(_stream_on_gpu)
        self._answer_without_cache_on_gpu = spaces.GPU(duration=baseline_seconds)(_answer_without_cache_on_gpu)

    @property
    def loaded(self) -> bool:
        return self.local.loaded

    def load(self, *, progress: Stages | None = None) -> EngineInfo:
        self.local.load(progress=progress)
        return self.info

    @property
    def info(self) -> EngineInfo:
        local = self.local.info
        dtype = str(_gpu_dtype(self.config)).removeprefix("torch.")
        return EngineInfo(kind=self.kind, model=local.model, device="cuda (ZeroGPU)", dtype=dtype,
                          context_tokens=local.context_tokens, load_s=local.load_s,
                          cache_device="cpu", exact_vs_recompute=dtype == "float32", guarantee=guarantee(dtype))

    def prefill(self, document: Document, *, progress: Callable[[float], None] | None = None,
                admit: Callable[[int], None] | None = None) -> PrefilledDocument:
        lm = self.local.lm
        prefix = prefix_of(lm, document, config=self.config)  # once, here: a bad document never reaches the GPU
        if admit is not None:  # the GPU's cache has the model's dtype there; bf16 on ZeroGPU's H200
            admit(cache_bytes(lm.config, _gpu_dtype(self.config), len(prefix[1]), self.config.limits.reserve_tokens))
        restored = self._restore(document, prefix)
        if restored is not None:
            return restored
        key = None
        for item in self._prefill_on_gpu(document, self.config, prefix, self.store is not None):
            if isinstance(item, CacheKey):
                key = item
            elif isinstance(item, PrefilledDocument):
                if key is not None:
                    self._put(item, key)
                return item
            elif progress is not None:
                progress(item)
        raise RuntimeError("the ZeroGPU prefill returned no document")

    def _put(self, doc: PrefilledDocument, key: CacheKey) -> None:
        """Write the prefilled cache to the store from this side, in the background (the GPU process may end as
        soon as its function returns; this process's disk is certain to be the store's)."""
        self._gpu_key = key
        written = self.store.put(key, doc.ids, doc.prompt.date_string, doc.cache.tensors(), read_s=doc.prefill_s)
        self._remember(doc, _File(key, written))

    def _restore(self, document: Document, prefix: tuple[Prompt, list[int]]) -> PrefilledDocument | None:
        """The document's cache from the store, onto the CPU, without a GPU call; None when the store is off or has
        no valid file for it. The key is known once the GPU side has given one (its first prefill in this process):
        it depends on the GPU's model, which this process cannot look at."""
        if self.store is None or self._gpu_key is None:
            return None
        key = replace(self._gpu_key, text_sha256=text_sha256(document.text))
        doc = restore(self.local.lm, document, self.store, key, prefix=prefix, config=self.config,
                      device=torch.device("cpu"))
        if doc is not None:
            self._remember(doc, _File(key, written=None))
        return doc

    def _remember(self, doc: PrefilledDocument, file: _File | None) -> None:
        with self._lock:
            if file is None:
                self._files.pop(doc, None)
            else:
                self._files[doc] = file

    def _source(self, doc: PrefilledDocument) -> PrefilledDocument | StoredDocument:
        """What an answer's GPU function is handed: the store's file when it holds this cache, else the cache."""
        with self._lock:
            file = self._files.get(doc)
        if file is None or not file.ready:
            return without_tokenizer(doc)
        if not self.store.path(file.key).exists():
            self._missed(doc)
            return without_tokenizer(doc)
        return StoredDocument.of(doc, self.store, file.key)

    def _missed(self, doc: PrefilledDocument) -> None:
        log.warning("kvqa zerogpu: the store's file for this document is gone or failed its checks (evicted, removed "
                    "or damaged); its cache crosses by pickling from now on")
        self._remember(doc, None)

    def answer_turn(self, doc: PrefilledDocument, question: QuestionTurn, *,
               should_stop: Callable[[], bool] | None = None) -> AnswerStream:
        question_tokens = len(doc.prompt.question_ids(question.text, limit=doc.max_question_tokens,
                                                      history=question.history))  # fail here, not on the GPU
        return AnswerStream(self._pieces(doc, question, question_tokens, should_stop))

    def _events(self, doc: PrefilledDocument, question: QuestionTurn) -> Generator[str | Answer, None, None]:
        """The answer's GPU events, from the store's file when it holds the cache; from a pickled copy of the cache
        when not, or when the GPU side could not use the file (a second call)."""
        events = self._stream_on_gpu(self._source(doc), question, self.config)
        try:
            first = next(events, None)
            if isinstance(first, FileMissed):
                self._missed(doc)
                close_events(events)
                events = self._stream_on_gpu(without_tokenizer(doc), question, self.config)
                first = next(events, None)
            if first is not None:
                yield first
            yield from events
        finally:
            close_events(events)

    def _pieces(self, doc, question, question_tokens, should_stop) -> Iterator[str | Answer]:
        started, first, text = time.perf_counter(), None, ""
        events = self._events(doc, question)
        try:
            for event in events:
                yield event
                if isinstance(event, Answer):
                    return
                first, text = first or time.perf_counter() - started, text + event
                if should_stop is not None and should_stop():
                    # the GPU process cannot be told to stop: end here, with the figures seen from this side
                    timings = Timings(question_tokens=question_tokens, new_tokens=self.count_tokens(text),
                                      ttft_s=first or 0.0, answer_s=time.perf_counter() - started)
                    yield Answer(question=question.text, text=text, token_ids=(), timings=timings,
                                 stop_reason="stopped", used_cache=True)
                    return
            raise RuntimeError("the ZeroGPU answer ended without its figures")
        finally:
            events.close()

    def answer_turn_without_cache(self, document: Document, question: QuestionTurn, *, prompt: Prompt | None = None,
                             should_stop: Callable[[], bool] | None = None) -> AnswerStream:
        prompt = prompt or prompt_for(self.local.lm.tokenizer)
        prompt.question_ids(question.text, limit=self.config.limits.max_question_tokens, history=question.history)

        def pieces() -> Iterator[str | Answer]:
            answer = self._answer_without_cache_on_gpu(document, question, self.config, prompt)
            yield answer.text
            yield answer

        return AnswerStream(pieces())

    def count_tokens(self, text: str) -> int:
        return self.local.count_tokens(text)

    def remembered(self, doc: PrefilledDocument, history: Sequence[tuple[str, str]], question: str) -> int:
        return self.local.remembered(doc, history, question)

    def cut(self, read, spans):
        """Not here: a ZeroGPU answer's caches cross to the GPU as store files, one document each (info.composes
        is False)."""
        raise ModelError("model.not_composable", model=self.info.model)

    def compose(self, like, runs, document):
        """Not here (cut)."""
        raise ModelError("model.not_composable", model=self.info.model)


def _gpu_dtype(config: Config):
    """The dtype the model gets on ZeroGPU's GPU: bfloat16 unless one is named."""
    from kvqa.model.loading import choose_dtype

    return torch.bfloat16 if config.dtype == "auto" else choose_dtype(config.dtype, torch.device("cuda"))
