"""Hugging Face ZeroGPU: CUDA exists only inside @spaces.GPU functions, which run in another process that receives
pickled arguments and returns pickled results.

So the prefill and each answer run inside such functions, with a duration derived from their token counts; the
prefilled cache comes back to the CPU and stays in the session's state between calls, and each answer gets a
(pickled) copy of it that it moves to the GPU. Nothing that crosses the boundary is a CUDA tensor. Progress and
answers cross as they are produced: the GPU functions are generators whose last item is the result.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Sequence

from ..cache import bytes_per_token
from ..config import Config
from ..documents import Document
from ..model import load_model
from ..prompt import ChatPrompt
from ..results import Answer, AnswerStream, PrefilledDocument
from ..timing import Timings
from .base import EngineInfo
from .local import LocalEngine, guarantee, prefill_steps, prefix_of, stream, stream_without_cache


def prefill_seconds(document: Document, config: Config, *args) -> int:
    """A generous GPU time for a prefill: start-up plus ~1 s per 2,000 tokens (a token is ~3 characters or more)."""
    return int(min(300, 20 + len(document.text) / 3 / 2000))


def answer_seconds(doc: PrefilledDocument, question: str, config: Config, *args) -> int:
    """A generous GPU time for one answer: moving the cache, the question, and up to max_new_tokens at ~20/s."""
    return int(min(300, 15 + doc.cache_bytes / 2**30 + doc.max_new_tokens / 20))


def baseline_seconds(document: Document, question: str, config: Config, *args) -> int:
    return prefill_seconds(document, config) + 15 + config.max_new_tokens // 20


def _prefill_on_gpu(document: Document, config: Config,
                    prefix: tuple[ChatPrompt, list[int]]) -> Generator[float | PrefilledDocument, None, None]:
    lm = load_model(config)
    doc = yield from prefill_steps(lm, document, config=config, prefix=prefix)  # progress crosses as it happens
    yield _to(doc, "cpu")


def _stream_on_gpu(doc: PrefilledDocument, question: str, config: Config, max_new_tokens: int | None,
                   history: tuple = ()) -> Generator[str | Answer, None, None]:
    lm = load_model(config)
    doc = _to(doc, lm.device)  # this process's own copy of the cache: the session's stays on the CPU
    pieces = stream(lm, doc, question, max_new_tokens=max_new_tokens, temperature=config.temperature, seed=config.seed,
                    repeat_stop=config.repeat_stop, draft=config.draft_tokens, history=history)
    yield from pieces
    yield pieces.answer


def _answer_without_cache_on_gpu(document: Document, question: str, config: Config, prompt: ChatPrompt,
                                 max_new_tokens: int | None, history: tuple = ()) -> Answer:
    lm = load_model(config)
    return stream_without_cache(lm, document, question, config=config, prompt=prompt, max_new_tokens=max_new_tokens,
                                temperature=config.temperature, seed=config.seed, repeat_stop=config.repeat_stop,
                                draft=config.draft_tokens, history=history).answer


def _to(doc: PrefilledDocument, device) -> PrefilledDocument:
    doc.cache.to(device)
    return doc


class ZeroGPUEngine:
    """The local engine's functions inside @spaces.GPU calls; the model also sits on the CPU here for tokenizing."""

    kind = "zerogpu"

    def __init__(self, config: Config, spaces):
        self.config = config
        self.local = LocalEngine(config)  # the CPU copy: tokenizer, prompt checks, token counts
        self._prefill_on_gpu = spaces.GPU(duration=prefill_seconds)(_prefill_on_gpu)
        self._stream_on_gpu = spaces.GPU(duration=answer_seconds)(_stream_on_gpu)
        self._answer_without_cache_on_gpu = spaces.GPU(duration=baseline_seconds)(_answer_without_cache_on_gpu)

    def load(self) -> EngineInfo:
        self.local.load()
        return self.info

    @property
    def info(self) -> EngineInfo:
        local = self.local.info
        dtype = str(_gpu_dtype(self.config)).removeprefix("torch.")
        return EngineInfo(kind=self.kind, model=local.model, device="cuda (ZeroGPU)", dtype=dtype,
                          attention="sdpa", context_tokens=local.context_tokens, load_s=local.load_s,
                          cache_device="cpu", exact_vs_recompute=dtype == "float32", guarantee=guarantee(dtype))

    def prefill(self, document: Document, *, progress: Callable[[float], None] | None = None,
                admit: Callable[[int], None] | None = None) -> PrefilledDocument:
        lm = self.local.lm
        prefix = prefix_of(lm, document, config=self.config)  # once, here: a bad document never reaches the GPU
        if admit is not None:  # the GPU's cache has the model's dtype there; bf16 on ZeroGPU's H200
            admit(bytes_per_token(lm.config, _gpu_dtype(self.config)) * (len(prefix[1]) + self.config.reserve_tokens))
        for item in self._prefill_on_gpu(document, self.config, prefix):
            if isinstance(item, PrefilledDocument):
                return item
            if progress is not None:
                progress(item)
        raise RuntimeError("the ZeroGPU prefill returned no document")

    def stream(self, doc: PrefilledDocument, question: str, *, max_new_tokens: int | None = None,
               should_stop: Callable[[], bool] | None = None, history: Sequence[tuple[str, str]] = ()) -> AnswerStream:
        history = tuple(history)
        question_tokens = len(doc.prompt.question_ids(question, limit=doc.max_question_tokens,
                                                      history=history))  # fail here, not on the GPU
        return AnswerStream(self._pieces(doc, question, question_tokens, max_new_tokens, should_stop, history))

    def _pieces(self, doc, question, question_tokens, max_new_tokens, should_stop,
                history) -> Generator[str, None, Answer]:
        events = self._stream_on_gpu(doc, question, self.config, max_new_tokens, history)
        started, first, text = time.perf_counter(), None, ""
        try:
            for event in events:
                if isinstance(event, Answer):
                    return event
                first, text = first or time.perf_counter() - started, text + event
                yield event
                if should_stop is not None and should_stop():
                    # the GPU process cannot be told to stop: end here, with the figures seen from this side
                    timings = Timings(question_tokens=question_tokens, new_tokens=self.count_tokens(text),
                                      ttft_s=first or 0.0, answer_s=time.perf_counter() - started)
                    return Answer(question=question, text=text, token_ids=(), timings=timings,
                                  stop_reason="stopped", used_cache=True)
            raise RuntimeError("the ZeroGPU answer ended without its figures")
        finally:
            close = getattr(events, "close", None)
            if close is not None:
                close()

    def stream_without_cache(self, document: Document, question: str, *, prompt: ChatPrompt | None = None,
                             max_new_tokens: int | None = None, should_stop: Callable[[], bool] | None = None,
                             history: Sequence[tuple[str, str]] = ()) -> AnswerStream:
        prompt = prompt or ChatPrompt.for_tokenizer(self.local.lm.tokenizer)
        history = tuple(history)
        prompt.question_ids(question, limit=self.config.max_question_tokens, history=history)

        def pieces() -> Generator[str, None, Answer]:
            answer = self._answer_without_cache_on_gpu(document, question, self.config, prompt, max_new_tokens,
                                                       history)
            yield answer.text
            return answer

        return AnswerStream(pieces())

    def count_tokens(self, text: str) -> int:
        return self.local.count_tokens(text)

    def remembered(self, doc: PrefilledDocument, history: Sequence[tuple[str, str]], question: str) -> int:
        return self.local.remembered(doc, history, question)


def _gpu_dtype(config: Config):
    """The dtype the model gets on ZeroGPU's GPU: bfloat16 unless one is named."""
    import torch

    from ..model import choose_dtype

    return torch.bfloat16 if config.dtype == "auto" else choose_dtype(config.dtype, torch.device("cuda"))
