"""Hugging Face ZeroGPU: CUDA exists only inside @spaces.GPU functions, which run in another process that receives
pickled arguments and returns pickled results.

So, on ZeroGPU (the `spaces` package importable and SPACES_ZERO_GPU set, as ZeroGPU Spaces do), the prefill and
each answer run inside such functions, with a duration derived from their token counts; the prefilled cache is returned to the CPU and kept in the session's
state between calls, and each answer gets a (pickled) copy of it that it moves to the GPU. Nothing that crosses
the boundary is a CUDA tensor. Elsewhere (no `spaces`, or a Space with its own GPU) nothing changes.
"""

from __future__ import annotations

import importlib.util
import os
import time
from collections.abc import Callable, Iterator

from .answer import Answer, answer_without_cache, question_ids, stream
from .config import Config
from .documents import Document
from .model import LoadedModel, load_model
from .prefill import PrefilledDocument, prefill
from .timing import Timings

ACTIVE = (importlib.util.find_spec("spaces") is not None
          and os.environ.get("SPACES_ZERO_GPU", "").strip().lower() in ("1", "true", "yes"))


def prefill_seconds(document: Document, config: Config, *args, **kwargs) -> int:
    """A generous GPU time for a prefill: start-up plus ~1 s per 2,000 tokens (a token is ~3 characters or more)."""
    return int(min(300, 20 + len(document.text) / 3 / 2000))


def answer_seconds(doc: PrefilledDocument, question: str, config: Config, *args, **kwargs) -> int:
    """A generous GPU time for one answer: moving the cache, the question, and up to max_new_tokens at ~20/s."""
    return int(min(300, 15 + doc.cache_bytes / 2**30 + doc.max_new_tokens / 20))


def _gpu(duration: Callable[..., int]):
    """spaces.GPU(duration=...) on ZeroGPU, else nothing."""
    if not ACTIVE:
        return lambda fn: fn
    import spaces

    return spaces.GPU(duration=duration)


@_gpu(prefill_seconds)
def _prefill_on_gpu(document: Document, config: Config) -> PrefilledDocument:
    lm = load_model(config)
    return prefill(lm, document, config=config).to("cpu")


@_gpu(answer_seconds)
def _stream_on_gpu(doc: PrefilledDocument, question: str, config: Config,
                   temperature: float) -> Iterator[str | Answer]:
    lm = load_model(config)
    doc = doc.to(lm.device)  # this process's own copy of the cache: the session's stays on the CPU
    yield from stream(lm, doc, question, temperature=temperature)


@_gpu(lambda document, question, config, prompt, temperature: prefill_seconds(document, config) + 15)
def _answer_without_cache_on_gpu(document: Document, question: str, config: Config, prompt,
                                 temperature: float) -> Answer:
    lm = load_model(config)
    return answer_without_cache(lm, document, question, config=config, prompt=prompt, temperature=temperature)


def run_without_cache(lm: LoadedModel, document: Document, question: str, *, config: Config, prompt,
                      temperature: float = 0.0) -> Answer:
    """answer_without_cache(), inside a ZeroGPU function when on ZeroGPU (elsewhere _gpu leaves it plain)."""
    return _answer_without_cache_on_gpu(document, question, config, prompt, temperature)


def run_prefill(lm: LoadedModel, document: Document, *, config: Config, **kwargs) -> PrefilledDocument:
    """prefill(), inside a ZeroGPU function when on ZeroGPU (progress and budget hooks stay local)."""
    if not ACTIVE:
        return prefill(lm, document, config=config, **kwargs)
    admit = kwargs.get("admit")
    doc = _prefill_on_gpu(document, config)
    if admit is not None:
        admit(doc.cache_bytes)
    return doc


def run_stream(lm: LoadedModel, doc: PrefilledDocument, question: str, *, config: Config,
               should_stop: Callable[[], bool] | None = None, **kwargs) -> Iterator[str | Answer]:
    """stream(), inside a ZeroGPU function when on ZeroGPU. Stop ends the stream here after the current piece."""
    if not ACTIVE:
        yield from stream(lm, doc, question, should_stop=should_stop, **kwargs)
        return
    question_ids(doc.prompt, question, limit=doc.max_question_tokens)  # bad questions fail here, not over there
    events = _stream_on_gpu(doc, question, config, kwargs.get("temperature", 0.0))
    started, first, text = time.perf_counter(), None, ""
    try:
        for event in events:
            yield event
            if isinstance(event, str):
                first, text = first or time.perf_counter() - started, text + event
            if should_stop is not None and should_stop():
                # the GPU process cannot be told to stop: end here, with the figures seen from this side
                shown = len(lm.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0
                timings = Timings(question_tokens=len(doc.prompt.suffix_ids(question)), new_tokens=shown,
                                  ttft_s=first or 0.0, answer_s=time.perf_counter() - started)
                yield Answer(question=question, text=text, token_ids=(), timings=timings, stop_reason="stopped",
                             used_cache=True)
                return
    finally:
        close = getattr(events, "close", None)
        if close is not None:
            close()
