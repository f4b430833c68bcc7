"""Decode: the answer chosen one token at a time on top of the question's turn, in small parts an answer builds once.

decode_n_tokens runs the loop and nothing else: `Chooser` picks each token (greedy or sampled, the repetition penalty,
no end before the answer says something), `Stops` says when the answer ends (Stop pressed, EOS or a line end, a span
or a sentence said again), `Detokenizer` turns the tokens into text as they come (decoding only the last few, so the
text work grows with the answer's length, not its square), and each step is plain (decode_one_token) or drafted
(draft_step: prompt-lookup guesses checked in one forward, Drafter). Every kept token is the model's own choice, as in
plain decoding: drafting changes only the forwards' shapes, so greedy answers equal a recompute's token for token.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

import torch

from kvqa.config import Decoding
from kvqa.generation.repeats import SentenceRepeats
from kvqa.model.kv_cache import KVCache
from kvqa.model.loading import LoadedModel
from kvqa.model.vocabulary import line_end_tokens, number_tokens
from kvqa.prompt import Prompt
from kvqa.results import Answer
from kvqa.timing import Timings, now


@dataclass(frozen=True)
class DecodePlan:
    """What one answer is asked for, beside the model, its cache and the settings: the question (for the Answer), how
    many tokens its turn took, the most new tokens, whether the document's cache was used, the prompt's ids (what
    drafting may copy from), the tokens that end the answer besides EOS, a check for Stop, and the passage order the
    model chose (for the Answer's sources)."""
    question: str
    question_tokens: int
    max_new_tokens: int
    used_cache: bool
    context: Sequence[int] = ()
    stop_ids: frozenset[int] = frozenset()
    should_stop: Callable[[], bool] | None = None
    order: tuple[int, ...] | None = None
    quote_ids: tuple[int, ...] = ()  # the quoted passages' tokens, which options.copy_bias favours
    started: float = 0.0  # set as the answer begins (kvqa.generation.generate): its times count from here


@dataclass
class Counts:
    """What the steps did, for the Answer's timings."""
    steps: int = 0
    drafted: int = 0
    rejected: int = 0
    single_s: float = 0.0  # the one-token steps' time: what a step costs without drafting
    singles: int = 0


def decode_n_tokens(lm: LoadedModel, logits: torch.Tensor, cache: KVCache, options: Decoding,
                    asked: DecodePlan) -> Iterator[str | Answer]:
    """Choose up to asked.max_new_tokens tokens from logits (1, vocab), feeding them back; yields text, then the
    Answer. With options.draft_tokens > 0, greedy decoding and where it pays (drafting_pays) each step also checks
    guesses (draft_step); with options.repeat_stop > 0 a span or a sentence said again ends the answer (Stops), before
    the repeat; stop_ids (a completion prompt's line ends) end it as EOS does, once it holds more than whitespace
    (Chooser)."""
    stops, counts, text = Stops(lm, options, asked), Counts(), Detokenizer(lm.tokenizer, strip=bool(asked.stop_ids))
    pick = Chooser(lm, options, stops.ends, quote=asked.quote_ids)
    drafting = options.draft_tokens > 0 and options.temperature <= 0 and drafting_pays(lm)
    drafter = Drafter(list(asked.context)) if drafting else None
    tokens: list[int] = []
    pending = [pick(logits, tokens, blank=bool(asked.stop_ids))]
    ttft = now(lm.device) - asked.started
    while True:
        for token in pending:
            if stops.before(token):
                break
            tokens.append(token)
            if drafter is not None:
                drafter.add(token)
            if stops.after(tokens, text.add(token)) or len(tokens) == asked.max_new_tokens:
                break
        yield from stops.shown(text.text)
        if stops.reason != "length" or len(tokens) == asked.max_new_tokens:
            break
        counts.steps += 1
        blank = bool(asked.stop_ids) and not text.text
        room = min(options.draft_tokens, asked.max_new_tokens - len(tokens) - 1)
        guesses = drafter.propose(room) if drafter is not None and not blank else []
        pending = (draft_step(lm, cache, tokens, guesses, pick, counts) if guesses
                   else plain_step(lm, cache, tokens, pick, counts, blank=blank))
    final, kept = stops.end(text.whole(), tokens)
    yield from stops.shown(final, last=True)
    timings = Timings(question_tokens=asked.question_tokens, new_tokens=len(tokens), ttft_s=ttft,
                      answer_s=now(lm.device) - asked.started, decode_steps=counts.steps,
                      drafted_tokens=counts.drafted, rejected_tokens=counts.rejected,
                      single_step_s=counts.single_s / counts.singles if counts.singles else 0.0)
    yield Answer(question=asked.question, text=final, token_ids=tuple(kept), timings=timings,
                 stop_reason=stops.reason, used_cache=asked.used_cache, order=asked.order)


def plain_step(lm: LoadedModel, cache: KVCache, tokens: list[int], pick: Chooser, counts: Counts, *,
               blank: bool) -> list[int]:
    """One token through the model on top of the cache, and the next one chosen."""
    started = time.perf_counter()
    chosen = pick(decode_one_token(lm, tokens[-1], cache), tokens, blank=blank)
    counts.single_s, counts.singles = counts.single_s + time.perf_counter() - started, counts.singles + 1
    return [chosen]


def draft_step(lm: LoadedModel, cache: KVCache, tokens: list[int], guesses: list[int], pick: Chooser,
               counts: Counts) -> list[int]:
    """One forward over [last token, guesses]: the model's own (greedy) choice after each; the guesses it agrees
    with are kept with its choice after them, and the cache is rolled back past the others."""
    with torch.no_grad():
        ids = torch.tensor([[tokens[-1], *guesses]], device=lm.device)  # (1, 1 + k)
        rows = lm.model(input_ids=ids, cache=cache, use_cache=True).logits[0]  # (1 + k, vocab)
    choices = [pick(rows[j: j + 1], [*tokens, *guesses[:j]], blank=False) for j in range(len(rows))]
    agreed = 0
    while agreed < len(guesses) and guesses[agreed] == choices[agreed]:
        agreed += 1
    cache.rollback(cache.length - (len(guesses) - agreed))  # forget the guesses the model did not make
    counts.drafted, counts.rejected = counts.drafted + agreed, counts.rejected + len(guesses) - agreed
    return guesses[:agreed] + [choices[agreed]]


def drafting_pays(lm: LoadedModel) -> bool:
    """Whether checking guesses in one forward beats the one-token steps it saves: not where the written-out step
    says its own steps are cheaper (kvqa.model.architectures.llama: its layers in C)."""
    return lm.decode_step is not None or getattr(lm.step, "drafting_pays", True)


def decode_one_token(lm: LoadedModel, token: int, cache: KVCache) -> torch.Tensor:
    """Feed one chosen token through the model on top of the cache; returns the next logits, (1, vocab).
    With a compiled step (Config.compile), on the cache's fixed-shape view: the same graph for every token; else
    the step written out where the model has one (kvqa.model.architectures: the same logits as the model's forward)."""
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


# ---- choosing a token ---------------------------------------------------------------------------------------------

class Chooser:
    """A token from logits (1, vocab), the answer's tokens so far made less likely (options.repetition_penalty), the
    quote's tokens more likely (Copying, options.copy_bias), the tokens that end the answer impossible while it says
    nothing yet (blank), greedy at temperature 0, else sampled (seeded by options.seed). A choice depends on the logits
    and what was said only, so a cached answer and a recompute choose alike."""

    def __init__(self, lm: LoadedModel, options: Decoding, ends: frozenset[int], *, quote: Sequence[int] = ()):
        self.temperature, self.penalty, self.ends = options.temperature, options.repetition_penalty, ends
        self.copying = Copying(quote, options.copy_bias, ends=ends)
        seeded = options.seed is not None and options.temperature > 0
        self.generator = torch.Generator(device=lm.device).manual_seed(options.seed) if seeded else None

    def __call__(self, logits: torch.Tensor, said: Sequence[int], *, blank: bool) -> int:
        logits = self.copying(penalise(logits, said, self.penalty), said)
        return choose(unsaid(logits, self.ends) if blank else logits, self.temperature, self.generator)


class Copying:
    """Copy-biased decoding: `bias` added to the logits of the tokens that copy the quoted passages. Where the answer's
    last token is one of the quote's, the tokens that follow it there (the answer goes on copying a run of the
    passage: "64 PCIe" then " 4"); elsewhere any of the quote's tokens (a copy may start); once the answer says
    something, also the tokens that end it (`ends`: EOS, a completion prompt's line end), so stopping competes with
    copying on equal terms (without them, measured, a copy ran on past its answer: docs/quality.md). A bias, not a
    rule: a token the model prefers by more than `bias` still wins. bias 0 or no quote: logits unchanged."""

    def __init__(self, quote: Sequence[int], bias: float, *, ends: frozenset[int] = frozenset()):
        self.bias = bias if quote else 0.0
        self.ends = sorted(ends)
        self.anywhere = sorted(set(quote))
        after: dict[int, set[int]] = {}
        for token, following in zip(quote, quote[1:]):
            after.setdefault(token, set()).add(following)
        self.after = {token: sorted(following) for token, following in after.items()}

    def favoured(self, said: Sequence[int]) -> list[int]:
        """The tokens favoured after `said`: those that copy the quote, and once something is said those that end."""
        if said and said[-1] in self.after:
            return self.after[said[-1]] + self.ends
        return self.anywhere + self.ends if said else self.anywhere

    def __call__(self, logits: torch.Tensor, said: Sequence[int]) -> torch.Tensor:
        if self.bias == 0:
            return logits
        out = logits.clone()
        out[0, self.favoured(said)] += self.bias
        return out


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


def unsaid(logits: torch.Tensor, ids: frozenset[int]) -> torch.Tensor:
    """logits (1, vocab) with `ids` made impossible (an answer that may not end yet)."""
    out = logits.clone()
    out[0, sorted(ids)] = float("-inf")
    return out


def choose(logits: torch.Tensor, temperature: float, generator: torch.Generator | None) -> int:
    """Greedy argmax at temperature 0, else a sample from softmax(logits / temperature)."""
    if temperature <= 0:
        return int(logits[0].argmax())
    probs = torch.softmax(logits[0].float() / temperature, dim=-1)
    return int(torch.multinomial(probs, 1, generator=generator))


# ---- the answer's text --------------------------------------------------------------------------------------------

class Detokenizer:
    """An answer's text as its tokens come, the same as decoding them all at once: each token decodes only a window
    of the last few (from the last point where the text was whole, as vLLM's incremental detokenizer does), so the
    work per token does not grow with the answer. `text`: what the tokens say so far, half a UTF-8 character at its
    end included (as "\\ufffd"); strip: leading whitespace left out (a completion prompt's answer)."""

    def __init__(self, tokenizer, *, strip: bool = False):
        self.tokenizer, self.strip = tokenizer, strip
        self.tokens: list[int] = []
        self.done = ""  # the text of tokens[:read], whole characters
        self.prefix = self.read = 0  # the window: tokens[prefix:read] decoded as context, tokens[read:] as new
        self.before = ""  # the text of the window's context, decoded once for every step until the window moves
        self.text = ""

    def add(self, token: int) -> str:
        self.tokens.append(token)
        window = self._decode(self.tokens[self.prefix:])
        if not window.startswith(self.before):  # the new token changed the text before it: decode from the start
            self.done, self.prefix, self.read, self.before = "", 0, 0, ""
            window = self._decode(self.tokens)
        new = window[len(self.before):]
        if new and not new.endswith("\ufffd"):
            self.done, self.prefix, self.read, new = self.done + new, self.read, len(self.tokens), ""
            self.before = self._decode(self.tokens[self.prefix:self.read])
        self.text = (self.done + new).lstrip() if self.strip else self.done + new
        return self.text

    def _decode(self, tokens: list[int]) -> str:
        return self.tokenizer.decode(tokens, skip_special_tokens=True) if tokens else ""

    def whole(self) -> str:
        """All the tokens decoded at once, at the end (the Answer's text is exactly the tokenizer's)."""
        text = self._decode(self.tokens)
        return text.lstrip() if self.strip else text


# ---- when the answer ends -----------------------------------------------------------------------------------------

class Stops:
    """When the answer ends and what of it is shown: `reason` ("length" while it goes on; "stopped", "eos",
    "repeating"). before(token): Stop was pressed, or the token ends the answer; after(tokens, text): the token taken
    made the answer repeat (a span said again whole, is_looping; or a sentence with small changes, SentenceRepeats,
    held back from the stream while it could still prove one)."""

    def __init__(self, lm: LoadedModel, options: Decoding, asked: DecodePlan):
        self.should_stop, self.repeat_stop = asked.should_stop, options.repeat_stop
        self.ends = lm.eos_ids | asked.stop_ids
        self.digits = number_tokens(lm.tokenizer) if options.repeat_stop > 0 else frozenset()
        self.repeats = SentenceRepeats() if options.repeat_stop > 0 else None
        self.reason, self.shown_text = "length", ""

    def before(self, token: int) -> bool:
        if self.should_stop is not None and self.should_stop():
            self.reason = "stopped"
        elif token in self.ends:
            self.reason = "eos"
        return self.reason != "length"

    def after(self, tokens: list[int], text: str) -> bool:
        repeated = self.repeats is not None and self.repeats.add(text)  # read every token, looping or not
        if repeated or is_looping(tokens, self.repeat_stop, digits=self.digits):
            self.reason = "repeating"
        return self.reason != "length"

    def shown(self, text: str, *, last: bool = False) -> Iterator[str]:
        """The text not yet shown: while the answer goes on, all but half a UTF-8 character at its end and a sentence
        that may still prove a repeat; last: the rest of its final text."""
        if not last and self.repeats is not None:
            text = text[:self.repeats.said]
        if text != self.shown_text and text.startswith(self.shown_text) and (last or not text.endswith("\ufffd")):
            piece, self.shown_text = text[len(self.shown_text):], text
            yield piece

    def end(self, final: str, tokens: list[int]) -> tuple[str, list[int]]:
        """The answer's final text (all its tokens decoded) and the tokens it keeps: cut before a sentence said again
        (judged once more at the end, the last sentence whole), and at its last whole character unless EOS ended it."""
        if self.repeats is not None and self.reason != "stopped" and self.repeats.finish(final):
            self.reason = "repeating"
        if self.repeats is not None and self.repeats.end is not None:  # said again with small changes: end before
            tokens, final = tokens[:self.repeats.tokens()], final[:self.repeats.end]
        if self.reason != "eos":  # cut by the limit (or a stop): end at the last whole character, not half of one
            final = final.rstrip("\ufffd")
        return final, tokens


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
    Tokens in `digits` (a tokenizer's number tokens: kvqa.model.vocabulary.number_tokens) count as one and the same,
    so a list that counts up ("2. It takes ... 3. It takes ...") repeats too."""
    if min_run <= 0 or len(tokens) < min_run:
        return False
    if digits:
        tokens = [-1 if t in digits else t for t in tokens]
    period, run = repeated_tail(tokens)
    return run >= max(period, min_run)


def stops_for(lm: LoadedModel, prompt: Prompt) -> frozenset[int]:
    """What ends an answer besides the model's EOS ids, for a prompt's layout: a line end, or nothing."""
    return line_end_tokens(lm.tokenizer) if prompt.stops_at_line_end else frozenset()


# ---- drafting -----------------------------------------------------------------------------------------------------

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
