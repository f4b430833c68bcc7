"""Generation as free functions, gpt-fast style: prefill, decode and drafting, which the engines call (the local
engine in this process, the ZeroGPU engine inside its GPU functions). Prefill reads the document's prompt prefix once,
in chunks, into a KVCache with a reserve for one question and its answer (prefill, prefill_steps, run_chunks). Decode
appends the question's ids to that cache and chooses the answer one token at a time, feeding each back
(decode_n_tokens, decode_one_token); answer_on_cache() rolls the cache back to the document when the answer ends,
also when it is closed early (Stop, a client gone) or the model fails, so the next question sees exactly the
document, while answer_from_scratch() is the usual approach, measured for comparison: the whole prompt in one
forward, decoded through the same decode_n_tokens(), so greedy answers are comparable token for token. Drafting
(Drafter: prompt lookup) guesses the next tokens from the prompt and the answer so far, and one forward keeps those
the model itself would have chosen (kvqa.generation.decode holds the decode loop and its parts). This module imports
no engine: engines own the model and the settings, and call these functions.
"""

from __future__ import annotations

from collections.abc import Callable, Generator, Iterator
from contextlib import contextmanager
from dataclasses import replace

import torch

from kvqa.config import PLAIN, Config, Decoding
from kvqa.documents.reading import Document
from kvqa.errors import BusyError, DocumentTooLong, OutOfMemory, QuestionError
from kvqa.generation.activity import answering
from kvqa.generation.decode import DecodePlan, decode_n_tokens, stops_for
from kvqa.generation.rerank import quoted
from kvqa.memory import release_memory
from kvqa.messages import Message
from kvqa.model.kv_cache import KVCache, cache_bytes
from kvqa.model.loading import LoadedModel
from kvqa.prompt import Prompt, prompt_for
from kvqa.results import Answer, AnswerStream, PrefilledDocument, QuestionTurn
from kvqa.timing import now

MAX_CHARS_PER_TOKEN = 32  # no tokenizer packs more than this on average: longer texts cannot fit


# ---- prefill ------------------------------------------------------------------------------------------------------

def check_fits(lm: LoadedModel, tokens: int, reserve: int) -> None:
    """Raise DocumentTooLong when a prefix of `tokens` plus the reserve exceeds the model's context."""
    limit = lm.context_length - reserve
    if tokens > limit:
        raise DocumentTooLong("too_long.tokens", tokens=tokens, limit=limit, context=lm.context_length,
                              reserve=reserve, over=tokens - limit)


def prefill(
    lm: LoadedModel,
    document: Document,
    *,
    config: Config = Config(),
    progress: Callable[[float], None] | None = None,
    admit: Callable[[int], None] | None = None,
    prefix: tuple[Prompt, list[int]] | None = None,
) -> PrefilledDocument:
    """Tokenize the document's prefix once and run it through the model in chunks; progress(fraction) after each.
    admit(bytes), if given, is called before the cache is allocated and may refuse it by raising. prefix: see
    prefill_steps."""
    steps = prefill_steps(lm, document, config=config, admit=admit, prefix=prefix)
    while True:
        try:
            fraction = next(steps)
        except StopIteration as done:
            return done.value
        if progress is not None:
            progress(fraction)


def prefix_of(lm: LoadedModel, document: Document, *, config: Config) -> tuple[Prompt, list[int]]:
    """The document's prompt and prefix ids, tokenized once; raises DocumentTooLong when they cannot fit."""
    if len(document.text) > MAX_CHARS_PER_TOKEN * lm.context_length:  # refuse before spending time tokenizing
        raise DocumentTooLong("too_long.characters", chars=len(document.text), context=lm.context_length,
                              approx=4 * lm.context_length, limit=lm.context_length - config.limits.reserve_tokens)
    prompt = prompt_for(lm.tokenizer)
    ids = prompt.prefix_ids(document.text)
    check_fits(lm, len(ids), config.limits.reserve_tokens)
    return prompt, ids


def prefill_steps(lm: LoadedModel, document: Document, *, config: Config = Config(),
                  admit: Callable[[int], None] | None = None,
                  prefix: tuple[Prompt, list[int]] | None = None) -> Generator[float, None, PrefilledDocument]:
    """prefill() as a generator: yields the fraction read after each chunk, returns the PrefilledDocument.
    `prefix`: prefix_of()'s result when the caller has it already (ZeroGPU tokenizes on the CPU side)."""
    prompt, ids = prefix or prefix_of(lm, document, config=config)
    reserve = config.limits.reserve_tokens
    nbytes = cache_bytes(lm.config, lm.kv_dtype, len(ids), reserve)
    if admit is not None:
        admit(nbytes)
    started = now(lm.device)
    with out_of_memory_as_error("doing.reading"):
        cache = lm.new_cache(len(ids) + reserve)
        for start in range(0, len(ids), config.chunk_size):
            run_chunks(lm, ids[start: start + config.chunk_size], cache, chunk_size=config.chunk_size)
            yield min(start + config.chunk_size, len(ids)) / len(ids)
    prefill_s = now(lm.device) - started
    assert cache.length == len(ids) and cache.nbytes == nbytes
    return PrefilledDocument(
        document=document, prompt=prompt, ids=tuple(ids), cache=cache, cache_bytes=cache.nbytes,
        prefill_s=prefill_s, model_name=lm.name, max_question_tokens=config.limits.max_question_tokens,
        max_new_tokens=config.limits.max_new_tokens,
    )


@torch.no_grad()
def run_chunks(
    lm: LoadedModel,
    ids: list[int],
    cache: KVCache,
    *,
    chunk_size: int,
) -> torch.Tensor:
    """Feed ids through the model in chunks on top of the cache; returns the logits of the last position, (1, vocab)."""
    assert ids, "nothing to prefill"
    logits = None
    for start in range(0, len(ids), chunk_size):
        chunk = torch.tensor([ids[start: start + chunk_size]], device=lm.device)  # (1, T)
        logits = lm.model(input_ids=chunk, cache=cache, use_cache=True, logits_to_keep=1).logits[:, -1]
    return logits


@contextmanager
def out_of_memory_as_error(doing: str) -> Iterator[None]:
    """Turn an out-of-memory error inside the model into OutOfMemory, after freeing what can be freed. doing: the
    message id of what was being done ("doing.answering"), checked on entry: a wrong id fails every time, not only
    when memory runs out."""
    what = Message(doing)
    try:
        yield
    except (MemoryError, torch.OutOfMemoryError):
        release_memory()
        raise OutOfMemory("memory.out", doing=what) from None


# ---- decode -------------------------------------------------------------------------------------------------------

def answer_on_cache(lm: LoadedModel, doc: PrefilledDocument, question: QuestionTurn, options: Decoding = PLAIN, *,
           should_stop: Callable[[], bool] | None = None) -> AnswerStream:
    """Answer from the prefilled cache, streaming; the cache is left as it was. The question's turn quotes its
    passages (options.quote_passages, reranked first when options.rerank_passages) after its earlier turns
    (question.history, read after the document and, like the question, never kept in its cache). should_stop() is
    checked before each new token; when it says so the answer ends with stop_reason "stopped". The Answer has no
    sources: kvqa.session.ask gives them. Bad questions raise here, at once."""
    max_new_tokens = doc.max_new_tokens if question.max_new_tokens is None else question.max_new_tokens
    if not 1 <= max_new_tokens <= doc.max_new_tokens:
        raise QuestionError("question.max_new_tokens", most=doc.max_new_tokens, asked=max_new_tokens)
    with out_of_memory_as_error("doing.answering"):
        quotes, order, ranked_s = quoted(lm, question, options)
    ids = doc.prompt.question_ids(question.text, limit=doc.max_question_tokens, history=question.history,
                                  quotes=quotes)
    asked = DecodePlan(question=question.text, question_tokens=len(ids), max_new_tokens=max_new_tokens,
                  used_cache=True, context=(*doc.ids, *ids),
                  stop_ids=stops_for(lm, doc.prompt), should_stop=should_stop, order=tuple(order) if order else None,
                  quote_ids=quote_ids(doc.prompt, quotes, options))
    return AnswerStream(_decode_on_cache(lm, doc, ids, options, asked, ranked_s=ranked_s))


def quote_ids(prompt: Prompt, quotes: list[str], options: Decoding) -> tuple[int, ...]:
    """The quoted passages' tokens, for copy-biased decoding (options.copy_bias; none when it is off)."""
    if options.copy_bias <= 0:
        return ()
    return tuple(token for quote in quotes for token in prompt.text_ids(quote))


def _decode_on_cache(lm: LoadedModel, doc: PrefilledDocument, ids: list[int], options: Decoding, asked: DecodePlan, *,
                     ranked_s: float) -> Iterator[str | Answer]:
    """The question's ids on top of the document's cache, then the answer; holds doc.lock, rolls back at the end.
    ranked_s: the time spent choosing the quoted passages, counted in the answer's times."""
    if not doc.lock.acquire(blocking=False):
        raise BusyError("busy.document")
    try:
        asked = replace(asked, started=now(lm.device) - ranked_s)
        # no torch.no_grad() here: grad mode is per thread, and a generator may resume in another
        with answering(), out_of_memory_as_error("doing.answering"):
            logits = run_chunks(lm, ids, doc.cache, chunk_size=len(ids))
            yield from decode_n_tokens(lm, logits, doc.cache, options, asked)
    finally:
        doc.cache.rollback(doc.tokens)
        doc.lock.release()


def answer_from_scratch(lm: LoadedModel, document: Document, question: QuestionTurn, options: Decoding = PLAIN, *,
                         config: Config = Config(), prompt: Prompt | None = None,
                         should_stop: Callable[[], bool] | None = None, same_schedule: bool = False) -> AnswerStream:
    """The baseline users have today: the whole prompt (document and question) computed again for this question, in
    one forward. same_schedule=True recomputes it the way the cached path does instead (the document in
    config.chunk_size chunks, then the question): bit-identical to a cached answer in every precision."""
    max_new_tokens = config.limits.max_new_tokens if question.max_new_tokens is None else question.max_new_tokens
    prompt = prompt or prompt_for(lm.tokenizer)
    with out_of_memory_as_error("doing.answering"):
        quotes, order, ranked_s = quoted(lm, question, options)
    prefix = prompt.prefix_ids(document.text)
    ids = prefix + prompt.question_ids(question.text, limit=config.limits.max_question_tokens, history=question.history,
                                       quotes=quotes)
    check_fits(lm, len(ids), max_new_tokens)
    chunks = [ids]
    if same_schedule:
        chunks = [prefix[i: i + config.chunk_size] for i in range(0, len(prefix), config.chunk_size)]
        chunks.append(ids[len(prefix):])
    # as a prefilled cache's: a compiled step sees the same shapes
    capacity = len(prefix) + config.limits.reserve_tokens
    asked = DecodePlan(question=question.text, question_tokens=len(ids), max_new_tokens=max_new_tokens,
                  used_cache=False, context=tuple(ids),
                  stop_ids=stops_for(lm, prompt), should_stop=should_stop, order=tuple(order) if order else None,
                  quote_ids=quote_ids(prompt, quotes, options))
    return AnswerStream(_decode_from_scratch(lm, chunks, options, asked, capacity=capacity, ranked_s=ranked_s))


def _decode_from_scratch(lm: LoadedModel, chunks: list[list[int]], options: Decoding, asked: DecodePlan, *,
                         capacity: int, ranked_s: float) -> Iterator[str | Answer]:
    asked = replace(asked, started=now(lm.device) - ranked_s)
    with answering(), out_of_memory_as_error("doing.answering"):
        cache = lm.new_cache(max(capacity, asked.question_tokens + asked.max_new_tokens))
        for chunk in chunks:  # by default one forward over the whole prompt
            logits = run_chunks(lm, chunk, cache, chunk_size=len(chunk))
        yield from decode_n_tokens(lm, logits, cache, options, asked)


# ---- the promise --------------------------------------------------------------------------------------------------

def guarantee(dtype: str, *, compiled: bool = False, weights: str = "fp32", kv_cache: str = "model") -> Message:
    """What kvqa promises about greedy answers in this precision, as tests/test_exactness.py (and, for the compiled
    decode step, tests/test_compile.py; for int8 weights, tests/test_weights.py; for an int8 cache,
    tests/test_int8_cache.py) prove it."""
    if compiled:  # test_compile.py proves the same-chunks promise only
        return Message("promise.compiled")
    if kv_cache == "int8":  # keys and values rounded to int8 as they are written: the same-chunks promise only
        return Message("promise.int8_cache")
    if weights == "int8":  # products round their inputs to bfloat16 (kvqa.model.weights): the same-chunks promise only
        return Message("promise.int8")
    if dtype == "float32":
        return Message("promise.float32")
    return Message("promise.half", dtype=dtype)
