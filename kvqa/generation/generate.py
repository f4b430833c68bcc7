"""Generation as free functions, gpt-fast style: prefill, decode and drafting, which the engines call (the local
engine in this process, the ZeroGPU engine inside its GPU functions). Prefill reads the document's prompt prefix once,
in chunks, into a KVCache with a reserve for one question and its answer (prefill, prefill_steps, run_chunks). Decode
appends the question's ids to that cache and chooses the answer one token at a time, feeding each back
(decode_n_tokens, decode_one_token); stream() rolls the cache back to the document when the answer ends, also when it
is closed early (Stop, a client gone) or the model fails, so the next question sees exactly the document, while
stream_without_cache() is the usual approach, measured for comparison: the whole prompt in one forward, decoded through
the same decode_n_tokens(), so greedy answers are comparable token for token. Drafting (Drafter: prompt lookup)
guesses the next tokens from the prompt and the answer so far, and one forward keeps those the model itself would have
chosen. This module imports no engine: engines own the model and the settings, and call these functions.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Generator, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace

import torch

from kvqa.config import PLAIN, Config, Decoding
from kvqa.documents.reading import Document
from kvqa.errors import BusyError, DocumentTooLong, OutOfMemory, QuestionError
from kvqa.generation.repeats import SentenceRepeats
from kvqa.generation.rerank import quoted
from kvqa.memory import release_memory
from kvqa.messages import Message
from kvqa.model.kv_cache import KVCache, bytes_per_token, new_cache
from kvqa.model.loading import LoadedModel
from kvqa.prompt import Prompt, prompt_for
from kvqa.results import Answer, AnswerStream, PrefilledDocument, Question, close_events
from kvqa.timing import Timings, now

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
                              approx=4 * lm.context_length, limit=lm.context_length - config.reserve_tokens)
    prompt = prompt_for(lm.tokenizer)
    ids = prompt.prefix_ids(document.text)
    check_fits(lm, len(ids), config.reserve_tokens)
    return prompt, ids


def prefill_steps(lm: LoadedModel, document: Document, *, config: Config = Config(),
                  admit: Callable[[int], None] | None = None,
                  prefix: tuple[Prompt, list[int]] | None = None) -> Generator[float, None, PrefilledDocument]:
    """prefill() as a generator: yields the fraction read after each chunk, returns the PrefilledDocument.
    `prefix`: prefix_of()'s result when the caller has it already (ZeroGPU tokenizes on the CPU side)."""
    prompt, ids = prefix or prefix_of(lm, document, config=config)
    reserve = config.reserve_tokens
    if admit is not None:
        admit(bytes_per_token(lm.config, lm.kv_dtype) * (len(ids) + reserve))
    started = now(lm.device)
    with out_of_memory_as_error("doing.reading"):
        cache = new_cache(lm.config, len(ids) + reserve, lm.kv_dtype)
        for start in range(0, len(ids), config.chunk_size):
            run_chunks(lm, ids[start: start + config.chunk_size], cache, chunk_size=config.chunk_size)
            yield min(start + config.chunk_size, len(ids)) / len(ids)
    prefill_s = now(lm.device) - started
    assert cache.length == len(ids) and cache.nbytes == bytes_per_token(lm.config, lm.kv_dtype) * cache.capacity
    return PrefilledDocument(
        document=document, prompt=prompt, ids=tuple(ids), cache=cache, cache_bytes=cache.nbytes,
        prefill_s=prefill_s, model_name=lm.name, max_question_tokens=config.max_question_tokens,
        max_new_tokens=config.max_new_tokens,
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

def stream(lm: LoadedModel, doc: PrefilledDocument, question: Question, options: Decoding = PLAIN, *,
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
    return AnswerStream(_ordered(_answer_on_cache(lm, doc, question.text, ids, options, max_new_tokens=max_new_tokens,
                                                  should_stop=should_stop, ranked_s=ranked_s), order))


def _answer_on_cache(lm, doc, question, ids, options, *, max_new_tokens, should_stop,
                     ranked_s: float) -> Iterator[str | Answer]:
    """The question's ids on top of the document's cache, then the answer; holds doc.lock, rolls back at the end.
    ranked_s: the time spent choosing the quoted passages, counted in the answer's times."""
    if not doc.lock.acquire(blocking=False):
        raise BusyError("busy.document")
    try:
        started = now(lm.device) - ranked_s
        with out_of_memory_as_error("doing.answering"):  # no torch.no_grad() here: grad mode is per thread, and
            logits = run_chunks(lm, ids, doc.cache, chunk_size=len(ids))  # a generator may resume in another
            yield from decode_n_tokens(lm, logits, doc.cache, options, question=question, question_tokens=len(ids),
                                       max_new_tokens=max_new_tokens, started=started, used_cache=True,
                                       context=[*doc.ids, *ids], stop_ids=stops_for(lm, doc.prompt),
                                       should_stop=should_stop)
    finally:
        doc.cache.rollback(doc.tokens)
        doc.lock.release()


def stream_without_cache(lm: LoadedModel, document: Document, question: Question, options: Decoding = PLAIN, *,
                         config: Config = Config(), prompt: Prompt | None = None,
                         should_stop: Callable[[], bool] | None = None, same_schedule: bool = False) -> AnswerStream:
    """The baseline users have today: the whole prompt (document and question) computed again for this question, in
    one forward. same_schedule=True recomputes it the way the cached path does instead (the document in
    config.chunk_size chunks, then the question): bit-identical to a cached answer in every precision."""
    max_new_tokens = config.max_new_tokens if question.max_new_tokens is None else question.max_new_tokens
    prompt = prompt or prompt_for(lm.tokenizer)
    with out_of_memory_as_error("doing.answering"):
        quotes, order, ranked_s = quoted(lm, question, options)
    prefix = prompt.prefix_ids(document.text)
    ids = prefix + prompt.question_ids(question.text, limit=config.max_question_tokens, history=question.history,
                                       quotes=quotes)
    check_fits(lm, len(ids), max_new_tokens)
    chunks = [ids]
    if same_schedule:
        chunks = [prefix[i: i + config.chunk_size] for i in range(0, len(prefix), config.chunk_size)]
        chunks.append(ids[len(prefix):])
    capacity = len(prefix) + config.reserve_tokens  # as a prefilled cache's: a compiled step sees the same shapes
    pieces = _answer_from_scratch(lm, chunks, question.text, options, capacity=capacity, max_new_tokens=max_new_tokens,
                                  should_stop=should_stop, ranked_s=ranked_s, stop_ids=stops_for(lm, prompt))
    return AnswerStream(_ordered(pieces, order))


def _answer_from_scratch(lm, chunks, question, options, *, capacity, max_new_tokens, should_stop, ranked_s,
                         stop_ids) -> Iterator[str | Answer]:
    started = now(lm.device) - ranked_s
    tokens = sum(len(c) for c in chunks)
    with out_of_memory_as_error("doing.answering"):
        cache = new_cache(lm.config, max(capacity, tokens + max_new_tokens), lm.kv_dtype)
        for chunk in chunks:  # by default one forward over the whole prompt
            logits = run_chunks(lm, chunk, cache, chunk_size=len(chunk))
        yield from decode_n_tokens(lm, logits, cache, options, question=question, question_tokens=tokens,
                                   max_new_tokens=max_new_tokens, started=started, used_cache=False,
                                   context=[t for chunk in chunks for t in chunk], stop_ids=stop_ids,
                                   should_stop=should_stop)


def _ordered(events: Iterator[str | Answer], order: Sequence[int] | None) -> Iterator[str | Answer]:
    """The answer's events, its Answer noting the passage order the model chose (kvqa.generation.rerank), for its
    sources."""
    try:
        for event in events:
            yield replace(event, order=tuple(order)) if isinstance(event, Answer) and order else event
    finally:
        close_events(events)  # the answer's own clean-up (the rollback) runs now, not when collected


def decode_one_token(lm: LoadedModel, token: int, cache: KVCache) -> torch.Tensor:
    """Feed one chosen token through the model on top of the cache; returns the next logits, (1, vocab).
    With a compiled step (Config.compile), on the cache's fixed-shape view: the same graph for every token; else
    the step written out where the model has one (kvqa.model.llama_step: the same logits as the model's forward)."""
    if lm.decode_step is None and lm.step is not None:
        return lm.step(token, cache)
    ids = torch.tensor([[token]], device=lm.device)  # (1, 1)
    with torch.no_grad():
        if lm.decode_step is None:
            return lm.model(input_ids=ids, cache=cache, use_cache=True).logits[:, -1]
        position = torch.tensor([[cache.length]], device=lm.device)  # (1, 1)
        logits = lm.decode_step(ids, position, cache.static_view()).clone()  # a CUDA graph reuses its output
        cache.advance(1)
        return logits


def repeated_tail(tokens: list[int], *, max_period: int = 64) -> tuple[int, int]:
    """(period, run) of the longest repetition at the end of tokens: the last `run` tokens each equal the token
    `period` places before it. (0, 0) when the tail does not repeat."""
    best = (0, 0)
    for period in range(1, min(max_period, len(tokens) // 2) + 1):
        run = 0
        while run + period < len(tokens) and tokens[-1 - run] == tokens[-1 - run - period]:
            run += 1
        if run > best[1]:
            best = (period, run)
    return best


def is_looping(tokens: list[int], min_run: int, *, digits: frozenset[int] = frozenset()) -> bool:
    """True when the answer ends by saying something again: a span repeated whole, over at least min_run tokens.
    Tokens in `digits` (a tokenizer's number tokens: see number_tokens) count as one and the same, so a list that
    counts up ("2. It takes ... 3. It takes ...") repeats too."""
    if min_run <= 0 or len(tokens) < min_run:
        return False
    if digits:
        tokens = [-1 if t in digits else t for t in tokens]
    period, run = repeated_tail(tokens)
    return run >= max(period, min_run)


_number_tokens: dict[int, frozenset[int]] = {}


def number_tokens(tokenizer) -> frozenset[int]:
    """The ids of the tokenizer's tokens that are digits only (with a leading space or not); computed once per
    tokenizer."""
    key = id(tokenizer)
    if key not in _number_tokens:
        vocab = tokenizer.get_vocab()
        ids = [i for token, i in vocab.items() if tokenizer.convert_tokens_to_string([token]).strip().isdigit()]
        _number_tokens[key] = frozenset(ids)
    return _number_tokens[key]


class Drafter:
    """Prompt lookup (Saxena, 2023): guess the next tokens by finding the answer's last n tokens earlier in the
    document, the question or the answer itself, and proposing what followed there (the latest occurrence; the
    longest n first, from `ngram` down to `min_ngram`).

    On a CPU a forward over 7 tokens costs about twice one over 1 (SmolLM2-135M, 2 cores: 95 against 45 ms), so a
    wrong guess is expensive: matching at least 3 tokens drafts less often but is right more often. Measured on
    the labelled set (20 questions, 2026-11-30), median decode speedup: 1.07x with n >= 1 (3 guesses), 1.02x
    (6 guesses), 0.93x (10 guesses); 1.11x with n >= 2; 1.17x with n >= 3 (up to 4, 6 guesses); 1.15x with n >= 4."""

    def __init__(self, context: list[int], *, ngram: int = 4, min_ngram: int = 3):
        self.ngram, self.min_ngram = ngram, min_ngram
        self.seq: list[int] = []
        self.follows: dict[tuple[int, ...], int] = {}  # n-gram -> where its latest continuation starts in seq
        for token in context:
            self.add(token)

    def add(self, token: int) -> None:
        end = len(self.seq)  # the n-grams ending just before `token` now have a continuation: it
        for n in range(self.min_ngram, min(self.ngram, end) + 1):  # only the lengths propose() looks up
            self.follows[tuple(self.seq[end - n: end])] = end
        self.seq.append(token)

    def propose(self, k: int) -> list[int]:
        for n in range(min(self.ngram, len(self.seq)), self.min_ngram - 1, -1):
            start = self.follows.get(tuple(self.seq[-n:]))
            if start is not None:
                return self.seq[start: start + k]
        return []


def decode_n_tokens(lm: LoadedModel, logits: torch.Tensor, cache: KVCache, options: Decoding, *, question: str,
                    question_tokens: int, max_new_tokens: int, started: float, used_cache: bool,
                    context: Sequence[int] = (), stop_ids: frozenset[int] = frozenset(),
                    should_stop: Callable[[], bool] | None = None) -> Iterator[str | Answer]:
    """Choose up to max_new_tokens tokens from logits (1, vocab), feeding them back; yields text, then the Answer.

    With options.draft_tokens > 0 and greedy decoding, each step also checks up to that many tokens guessed from
    `context` (the prompt's ids) and the answer so far: one forward over [last token, guesses] gives the model's own
    choice after each of them, the guesses it agrees with are kept, and the cache is rolled back past the others.
    Every kept token is the model's argmax, as in plain decoding; only the forwards' shapes change. Sampling never
    drafts. With options.repeat_stop > 0, an answer that repeats a span whole over that many tokens ends
    ("repeating"), and so does one that says a sentence again with small changes, before that sentence (held back
    from the stream while it looks like a repeat: kvqa.generation.repeats); its token_ids are then those kept, its
    timings
    count all it made. With options.repetition_penalty > 1, each token the answer already holds is made less likely
    (see penalise), guesses included.
    stop_ids (a completion prompt's line ends, kvqa.prompt.CompletionPrompt): tokens that end the answer as EOS does;
    until the answer holds something other than whitespace they and EOS cannot be chosen (an answer is never empty),
    and leading whitespace is not said."""
    temperature, penalty, draft = options.temperature, options.repetition_penalty, options.draft_tokens
    seed = options.seed
    generator = torch.Generator(device=lm.device).manual_seed(seed) if seed is not None and temperature > 0 else None
    tokens: list[int] = []
    text, stop_reason, steps, drafted, rejected = "", "length", 0, 0, 0
    single_s, singles = 0.0, 0  # the one-token steps' time: what a step costs without drafting
    ends = lm.eos_ids | stop_ids
    blank = bool(stop_ids)  # nothing but whitespace said yet, where that matters (line-ended answers)
    pending = [choose(unsaid(logits, ends) if blank else logits, temperature, generator)]  # chosen, not yet taken
    ttft = now(lm.device) - started
    drafter = Drafter(list(context)) if draft > 0 and temperature <= 0 else None  # indexed after the first token
    digits = number_tokens(lm.tokenizer) if options.repeat_stop > 0 else frozenset()
    repeats = SentenceRepeats() if options.repeat_stop > 0 else None

    def said(tokens: list[int]) -> str:
        decoded = lm.tokenizer.decode(tokens, skip_special_tokens=True)
        return decoded.lstrip() if stop_ids else decoded

    while stop_reason == "length" and len(tokens) < max_new_tokens:
        for token in pending:
            if should_stop is not None and should_stop():
                stop_reason = "stopped"
            elif token in ends:
                stop_reason = "eos"
            else:
                tokens.append(token)
                if drafter is not None:
                    drafter.add(token)
                repeated = repeats is not None and repeats.add(said(tokens))  # read every token, looping or not
                if repeated or is_looping(tokens, options.repeat_stop, digits=digits):
                    stop_reason = "repeating"
            if stop_reason != "length" or len(tokens) == max_new_tokens:
                break
        decoded = said(tokens)
        if stop_ids:
            blank = not decoded
        if repeats is not None:
            decoded = decoded[:repeats.said]  # a sentence that so far says an earlier one again waits
        if not decoded.endswith("\ufffd") and decoded.startswith(text):  # hold back half a UTF-8 character
            piece, text = decoded[len(text):], decoded
            if piece:
                yield piece
        if stop_reason != "length" or len(tokens) == max_new_tokens:
            break
        steps += 1
        guesses = drafter.propose(min(draft, max_new_tokens - len(tokens) - 1)) if drafter and not blank else []
        if guesses:
            with torch.no_grad():
                ids = torch.tensor([[tokens[-1], *guesses]], device=lm.device)  # (1, 1 + k)
                rows = lm.model(input_ids=ids, cache=cache, use_cache=True).logits[0]  # (1 + k, vocab)
            choices = [choose(penalise(rows[j: j + 1], [*tokens, *guesses[:j]], penalty), 0.0, None)
                       for j in range(len(rows))]
            agreed = 0
            while agreed < len(guesses) and guesses[agreed] == choices[agreed]:
                agreed += 1
            cache.rollback(cache.length - (len(guesses) - agreed))  # forget the guesses the model did not make
            pending, drafted = guesses[:agreed] + [choices[agreed]], drafted + agreed
            rejected += len(guesses) - agreed
        else:
            step_started = time.perf_counter()
            logits = penalise(decode_one_token(lm, tokens[-1], cache), tokens, penalty)
            pending = [choose(unsaid(logits, ends) if blank else logits, temperature, generator)]
            single_s, singles = single_s + time.perf_counter() - step_started, singles + 1
    total = now(lm.device) - started
    final = said(tokens)
    if repeats is not None and stop_reason != "stopped" and repeats.finish(final):
        stop_reason = "repeating"
    if repeats is not None and repeats.end is not None:  # said again with small changes: end before the repeat
        kept = tokens[:repeats.tokens()]
        final = final[:repeats.end]
    else:
        kept = tokens
    if stop_reason != "eos":  # cut by the limit (or a stop): end at the last whole character, not half of one
        final = final.rstrip("\ufffd")
    if final != text and final.startswith(text):
        yield final[len(text):]
    timings = Timings(question_tokens=question_tokens, new_tokens=len(tokens), ttft_s=ttft, answer_s=total,
                      decode_steps=steps, drafted_tokens=drafted, rejected_tokens=rejected,
                      single_step_s=single_s / singles if singles else 0.0)
    yield Answer(question=question, text=final, token_ids=tuple(kept), timings=timings,
                 stop_reason=stop_reason, used_cache=used_cache)


def unsaid(logits: torch.Tensor, ids: frozenset[int]) -> torch.Tensor:
    """logits (1, vocab) with `ids` made impossible (an answer that may not end yet)."""
    out = logits.clone()
    out[0, sorted(ids)] = float("-inf")
    return out


_line_ends: dict[int, frozenset[int]] = {}


def line_end_tokens(tokenizer) -> frozenset[int]:
    """The ids of the tokenizer's tokens whose text holds a line break: they end a completion prompt's answer.
    Computed once per tokenizer, from the vocabulary's token strings that can hold one (a literal newline as
    SentencePiece writes it, "Ċ" for byte-level BPE, the byte-fallback <0x0A>), each confirmed by decoding it."""
    key = id(tokenizer)
    if key not in _line_ends:
        candidates = [i for token, i in tokenizer.get_vocab().items()
                      if "\n" in token or "\u010a" in token or "<0x0A>" in token]
        _line_ends[key] = frozenset(i for i in candidates if "\n" in tokenizer.decode([i]))
    return _line_ends[key]


def stops_for(lm: LoadedModel, prompt: Prompt) -> frozenset[int]:
    """What ends an answer besides the model's EOS ids, for a prompt's layout: a line end, or nothing."""
    return line_end_tokens(lm.tokenizer) if prompt.stops_at_line_end else frozenset()


def penalise(logits: torch.Tensor, said: Sequence[int], penalty: float) -> torch.Tensor:
    """logits (1, vocab) with every token in `said` made less likely: a positive logit divided by penalty, a negative
    one multiplied (Keskar et al., 2019, CTRL; transformers' repetition_penalty, over the answer's tokens only, not the
    document's). penalty 1 (or nothing said) returns logits unchanged."""
    if penalty == 1.0 or not said:
        return logits
    seen = torch.tensor(sorted(set(said)), device=logits.device)
    picked = logits[0, seen]
    out = logits.clone()
    out[0, seen] = torch.where(picked > 0, picked / penalty, picked * penalty)
    return out


def choose(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> int:
    """Greedy argmax at temperature 0, else a sample from softmax(logits / temperature)."""
    if temperature <= 0:
        return int(logits[0].argmax())
    probs = torch.softmax(logits[0].float() / temperature, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))


# ---- the promise --------------------------------------------------------------------------------------------------

def guarantee(dtype: str, *, compiled: bool = False, weights: str = "fp32") -> Message:
    """What kvqa promises about greedy answers in this precision, as tests/test_exactness.py (and, for the compiled
    decode step, tests/test_compile.py; for int8 weights, tests/test_weights.py) prove it."""
    if compiled:  # test_compile.py proves the same-chunks promise only
        return Message("promise.compiled")
    if weights == "int8":  # products round their inputs to bfloat16 (kvqa.model.weights): the same-chunks promise only
        return Message("promise.int8")
    if dtype == "float32":
        return Message("promise.float32")
    return Message("promise.half", dtype=dtype)
