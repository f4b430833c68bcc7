"""Answering: each question runs on the prefilled document's cache, which is rolled back to the document afterwards.

stream() yields the answer's text in pieces as tokens are chosen, then one final Answer with the figures. Closing the
generator early (a Stop button, a client that went away) or an error inside the model still rolls the cache back,
so the next question sees exactly the document and nothing else.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch

from .cache import new_cache
from .config import Config
from .documents import Document
from .errors import BusyError, QuestionError
from .model import LoadedModel
from .prefill import PrefilledDocument, check_fits, out_of_memory_as_error, run_chunks
from .prompt import ChatPrompt
from .timing import Timings, now

MAX_QUESTION_CHARS = 20_000


@dataclass(frozen=True)
class Answer:
    """One question's answer and what it cost."""

    question: str
    text: str
    token_ids: tuple[int, ...]
    timings: Timings
    stop_reason: str  # "eos" (the model finished), "length" (max new tokens reached) or "stopped" (by the user)
    used_cache: bool


def stream(
    lm: LoadedModel,
    doc: PrefilledDocument,
    question: str,
    *,
    max_new_tokens: int | None = None,
    temperature: float = 0.0,
    seed: int | None = None,
    should_stop: Callable[[], bool] | None = None,
) -> Iterator[str | Answer]:
    """Answer from the prefilled cache: yields text pieces, then the Answer. The cache is left as it was.
    should_stop() is checked before each new token; when it says so the answer ends with stop_reason "stopped"."""
    max_new_tokens = doc.max_new_tokens if max_new_tokens is None else max_new_tokens
    if not 1 <= max_new_tokens <= doc.max_new_tokens:
        raise QuestionError(f"max new tokens must be between 1 and {doc.max_new_tokens} "
                            f"(the room kept after this document): got {max_new_tokens}.")
    ids = question_ids(doc.prompt, question, limit=doc.max_question_tokens)
    if not doc.lock.acquire(blocking=False):
        raise BusyError("This document is still answering another question: wait for it, or press Stop.")
    try:
        started = now(lm.device)
        with out_of_memory_as_error("answering"):  # no torch.no_grad() here: grad mode is per thread, and
            logits = run_chunks(lm, ids, doc.cache, chunk_size=len(ids))  # a generator may resume in another
            yield from _decode(lm, logits, doc.cache, question=question, question_tokens=len(ids),
                               max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                               started=started, used_cache=True, should_stop=should_stop)
    finally:
        doc.cache.rollback(doc.tokens)
        doc.lock.release()


def answer(lm: LoadedModel, doc: PrefilledDocument, question: str, **options) -> Answer:
    """The whole answer at once (see stream)."""
    return _last(stream(lm, doc, question, **options))


def stream_without_cache(
    lm: LoadedModel,
    document: Document,
    question: str,
    *,
    config: Config = Config(),
    prompt: ChatPrompt | None = None,
    max_new_tokens: int | None = None,
    temperature: float = 0.0,
    seed: int | None = None,
) -> Iterator[str | Answer]:
    """The baseline users have today: the whole prompt (document and question) computed again for this question."""
    max_new_tokens = config.max_new_tokens if max_new_tokens is None else max_new_tokens
    prompt = prompt or ChatPrompt.for_tokenizer(lm.tokenizer)
    ids = prompt.prefix_ids(document.text) + question_ids(prompt, question, limit=config.max_question_tokens)
    check_fits(lm, len(ids), max_new_tokens)
    started = now(lm.device)
    with out_of_memory_as_error("answering"):
        cache = new_cache(lm.config, len(ids) + max_new_tokens)
        logits = run_chunks(lm, ids, cache, chunk_size=len(ids))  # one forward over the whole prompt
        yield from _decode(lm, logits, cache, question=question, question_tokens=len(ids),
                           max_new_tokens=max_new_tokens, temperature=temperature, seed=seed,
                           started=started, used_cache=False, should_stop=None)


def answer_without_cache(lm: LoadedModel, document: Document, question: str, **options) -> Answer:
    """The whole baseline answer at once (see stream_without_cache)."""
    return _last(stream_without_cache(lm, document, question, **options))


def question_ids(prompt: ChatPrompt, question: str, *, limit: int) -> list[int]:
    """The question's suffix ids; raises QuestionError when it is empty or longer than `limit` tokens."""
    if not question or not question.strip():
        raise QuestionError("The question is empty: type a question about the document.")
    if len(question) > MAX_QUESTION_CHARS:
        raise QuestionError(f"The question is {len(question):,} characters; the limit is {MAX_QUESTION_CHARS:,}. "
                            "Ask something shorter.")
    ids = prompt.suffix_ids(question)
    if len(ids) > limit:
        raise QuestionError(f"The question is {len(ids):,} tokens; the limit is {limit:,}. Ask something shorter.")
    return ids


def _decode(lm, logits, cache, *, question, question_tokens, max_new_tokens, temperature, seed, started,
            used_cache, should_stop) -> Iterator[str | Answer]:
    """Choose tokens one at a time from logits (1, vocab), feeding each back through the model; stream its text."""
    generator = torch.Generator(device=lm.device).manual_seed(seed) if seed is not None and temperature > 0 else None
    tokens: list[int] = []
    text, ttft, stop_reason = "", 0.0, "length"
    for step in range(max_new_tokens):
        if should_stop is not None and should_stop():
            stop_reason = "stopped"
            break
        token = _choose(logits, temperature, generator)
        if step == 0:
            ttft = now(lm.device) - started
        if token in lm.eos_ids:
            stop_reason = "eos"
            break
        tokens.append(token)
        decoded = lm.tokenizer.decode(tokens, skip_special_tokens=True)
        if not decoded.endswith("\ufffd") and decoded.startswith(text):  # hold back half a UTF-8 character
            piece, text = decoded[len(text):], decoded
            if piece:
                yield piece
        if step + 1 < max_new_tokens:
            next_ids = torch.tensor([[token]], device=lm.device)  # (1, 1)
            with torch.no_grad():
                logits = lm.model(input_ids=next_ids, cache=cache, use_cache=True).logits[:, -1]
    total = now(lm.device) - started
    final = lm.tokenizer.decode(tokens, skip_special_tokens=True)
    if final != text and final.startswith(text):
        yield final[len(text):]
    timings = Timings(question_tokens=question_tokens, new_tokens=len(tokens), ttft_s=ttft, answer_s=total)
    yield Answer(question=question, text=final, token_ids=tuple(tokens), timings=timings,
                 stop_reason=stop_reason, used_cache=used_cache)


def _choose(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> int:
    """Greedy argmax at temperature 0, else a sample from softmax(logits / temperature)."""
    if temperature <= 0:
        return int(logits[0].argmax())
    probs = torch.softmax(logits[0].float() / temperature, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))


def _last(events: Iterator[str | Answer]) -> Answer:
    result = None
    for event in events:
        result = event
    assert isinstance(result, Answer)
    return result
