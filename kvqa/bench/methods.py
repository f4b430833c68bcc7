"""The three ways of answering that the bench compares. Each runner returns a row (without same_answers) and every
question's answer token ids; every clock read follows a device synchronisation (kvqa.timing.now)."""

from __future__ import annotations

import copy
import statistics
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import replace

import torch

from kvqa.documents.reading import Document
from kvqa.evidence.sources import rank
from kvqa.generation.decode import decode_one_token, stops_for
from kvqa.generation.generate import run_chunks
from kvqa.generation.rerank import quoted
from kvqa.model.attention import GROUPED_SDPA
from kvqa.model.kv_cache import bytes_per_token
from kvqa.model.loading import LoadedModel
from kvqa.model.weights import weight_bytes
from kvqa.session.ask import ask, ask_without_cache

from ..config import Config, Decoding
from ..engines.local import LocalEngine
from ..prompt import Prompt
from ..results import QuestionTurn
from ..timing import now
from .errors import BenchError
from .memory import Bandwidth, PeakMemory

METHODS = ("recompute", "seed", "kvqa")


def _median(values: Sequence[float]) -> float:
    return float(statistics.median(values)) if values else 0.0


def _decode_rate(runs: Sequence[tuple[int, float, float]]) -> float:
    """Tokens per second after the first one, over all answers: (new_tokens, ttft_s, answer_s) each."""
    tokens = sum(n - 1 for n, _, _ in runs if n > 1)
    seconds = sum(total - ttft for n, ttft, total in runs if n > 1)
    return tokens / seconds if seconds > 0 else 0.0


def _row(method: str, context_tokens: int, runs: list[tuple[int, float, float]], **figures) -> dict:
    row = {
        "method": method,
        "context_tokens": context_tokens,
        "prefill_s": 0.0,
        "prefill_tokens_per_s": 0.0,
        "ttft_s": _median([t for _, t, _ in runs]),
        "answer_s": _median([a for _, _, a in runs]),
        "decode_tokens_per_s": _decode_rate(runs),
        "fork_s": 0.0,
        "peak_memory_bytes": 0,
        "cache_bytes": 0,
        "theoretical_cache_bytes": 0,
        "cache_tokens": 0,
        "floor_ttft_s": None,
        "ttft_over_floor": None,  # these six: kvqa rows only (run_kvqa, decode_floor)
        "weight_bytes": None,
        "kv_bytes": None,
        "decode_floor_s": None,
        "decode_step_s": None,
        "decode_over_floor": None,
        "new_tokens": [n for n, _, _ in runs],
        "ttft_each_s": [t for _, t, _ in runs],
        "answer_each_s": [a for _, _, a in runs],
    }
    row.update(figures)
    if row["prefill_s"] > 0:
        row["prefill_tokens_per_s"] = context_tokens / row["prefill_s"]
    return row


def run_recompute(lm: LoadedModel, document: Document, prompt: Prompt, prefix_ids: list[int],
                  questions: Sequence[str], config: Config) -> tuple[dict, list[tuple[int, ...]]]:
    """Every question answered from the whole prompt, computed from scratch."""
    with PeakMemory(lm.device) as memory:
        engine = LocalEngine(config.replaced(repeat_stop=0, draft_tokens=0), lm=lm)  # the usual way: plain decoding
        answers = [ask_without_cache(engine, document, q, prompt=prompt).answer for q in questions]
    runs = [(a.timings.new_tokens, a.timings.ttft_s, a.timings.answer_s) for a in answers]
    row = _row("recompute", len(prefix_ids), runs, peak_memory_bytes=memory.increase,
               peak_memory_total_bytes=memory.total, answers=[a.text for a in answers])
    return row, [a.token_ids for a in answers]


class _FirstTokenClock:
    """A generate() streamer that notes when the first new token comes out (generate puts the prompt first)."""

    def __init__(self, device: torch.device):
        self.device = device
        self.puts = 0
        self.first_token_at: float | None = None

    def put(self, value) -> None:
        self.puts += 1
        if self.puts == 2:
            self.first_token_at = now(self.device)

    def end(self) -> None:
        pass


def run_seed(lm: LoadedModel, document: Document, prompt: Prompt, prefix_ids: list[int],
             questions: Sequence[str], config: Config) -> tuple[dict, list[tuple[int, ...]]]:
    """transformers' documented prompt-cache reuse: one forward into a DynamicCache, then per question a deepcopy of
    it and generate() on top of the copy, with transformers' own attention (not the one kvqa registers on the CPU):
    the outside reference its answers are compared with."""
    from transformers import DynamicCache, GenerationConfig

    model, device = lm.model, lm.device
    ends = lm.eos_ids | stops_for(lm, prompt)  # a completion prompt's answer also ends at its line's end
    eos = sorted(ends)
    generation = GenerationConfig(max_new_tokens=config.limits.max_new_tokens, do_sample=False,
                                  eos_token_id=eos or None,
                                  pad_token_id=eos[0] if eos else None,
                                  begin_suppress_tokens=eos if prompt.stops_at_line_end else None)
    suffixes = [prompt.question_ids(q, limit=config.limits.max_question_tokens,  # the quoted passage too, as kvqa asks
                                    quotes=_quotes(lm, document, q, config.decoding))
                for q in questions]
    runs, forks, ids_all = [], [], []
    with stock_attention(model), PeakMemory(device) as memory:
        started = now(device)
        with torch.no_grad():
            prompt_cache = DynamicCache(config=model.config)
            model(input_ids=torch.tensor([prefix_ids], device=device), cache=prompt_cache)
        prefill_s = now(device) - started
        cache_tokens = prompt_cache.get_seq_length()
        cache_bytes = sum(layer.keys.nbytes + layer.values.nbytes for layer in prompt_cache.layers)
        for suffix in suffixes:
            full = torch.tensor([prefix_ids + suffix], device=device)
            clock = _FirstTokenClock(device)
            started = now(device)
            fork = copy.deepcopy(prompt_cache)
            forks.append(now(device) - started)
            out = model.generate(full, attention_mask=torch.ones_like(full), cache=fork, generation_config=generation,
                                 streamer=clock)
            total = now(device) - started
            new = out[0, full.shape[1]:].tolist()
            ended = next((i for i, t in enumerate(new) if t in ends), len(new))
            ids_all.append(tuple(new[:ended]))
            runs.append((len(new[:ended]), (clock.first_token_at or now(device)) - started, total))
            del fork, out
        del prompt_cache
    row = _row("seed", len(prefix_ids), runs, prefill_s=prefill_s, fork_s=_median(forks),
               peak_memory_bytes=memory.increase, peak_memory_total_bytes=memory.total, cache_bytes=cache_bytes,
               cache_tokens=cache_tokens,
               theoretical_cache_bytes=bytes_per_token(lm.config, lm.dtype) * cache_tokens,
               answers=[_said(lm, ids, prompt) for ids in ids_all])
    return row, ids_all


def _said(lm: LoadedModel, ids: Sequence[int], prompt: Prompt) -> str:
    """An answer's text as kvqa says it (a line-ended answer without its leading space)."""
    text = lm.tokenizer.decode(list(ids), skip_special_tokens=True)
    return text.lstrip() if prompt.stops_at_line_end else text


def run_kvqa(lm: LoadedModel, document: Document, prompt: Prompt, prefix_ids: list[int],
             questions: Sequence[str], config: Config) -> tuple[dict, list[tuple[int, ...]]]:
    """kvqa.prefill once, then kvqa.stream per question; around them, the floor (a bare forward of the question on
    the prefilled cache, then the rollback that forks the next question) and an unchunked prefill to compare."""
    device = lm.device
    unchunked, chunked = [], []
    with torch.no_grad():  # the prefill in chunks and as one forward, alternately, outside the memory window
        for _ in range(PREFILL_REPEATS):
            for chunk_size, times in ((len(prefix_ids), unchunked), (config.chunk_size, chunked)):
                cache = lm.new_cache(len(prefix_ids) + config.limits.reserve_tokens)
                started = now(device)
                run_chunks(lm, prefix_ids, cache, chunk_size=chunk_size)
                times.append(now(device) - started)
                del cache
    unchunked_s, chunked_s = min(unchunked), min(chunked)
    answers, plain, floors, forks, asked = [], [], [], [], []
    engine = LocalEngine(config.replaced(temperature=0.0, repeat_stop=0), lm=lm)  # as the app uses it, drafting on
    undrafted = LocalEngine(engine.config.replaced(draft_tokens=0), lm=lm)  # the same without drafting
    with PeakMemory(device) as memory:
        doc = engine.prefill(document)
        for question in questions:
            ids = doc.prompt.question_ids(question, limit=doc.max_question_tokens,
                                          quotes=_quotes(lm, document, question, engine.options))
            asked.append(len(ids))  # the question's turn with its quote: the tokens its first token waits for
            with torch.no_grad():
                started = now(device)
                run_chunks(lm, ids, doc.cache, chunk_size=len(ids))
                floors.append(now(device) - started)
                started = now(device)
                doc.cache.rollback(doc.tokens)
                forks.append(now(device) - started)
            answers.append(ask(engine, doc, question).answer)
            plain.append(ask(undrafted, doc, question).answer)
        steps_compared = compare_steps(lm, doc.cache, prefix_ids[-1])
        cache_bytes, capacity, tokens = doc.cache_bytes, doc.cache.capacity, doc.tokens
        prefill_s = doc.prefill_s
        del doc
    if tokens != len(prefix_ids):  # the prompt's date line changed between the two tokenizations (midnight)
        raise BenchError("bench.prefix_changed")
    runs = [(a.timings.new_tokens, a.timings.ttft_s, a.timings.answer_s) for a in answers]
    row = _row("kvqa", tokens, runs, prefill_s=prefill_s, fork_s=_median(forks), peak_memory_bytes=memory.increase,
               peak_memory_total_bytes=memory.total, cache_bytes=cache_bytes, cache_tokens=capacity,
               theoretical_cache_bytes=bytes_per_token(lm.config, lm.kv_dtype) * capacity,
               floor_ttft_s=_median(floors), floor_each_s=floors, question_tokens=asked,
               chunked_prefill_s=chunked_s, chunked_prefill_tokens_per_s=tokens / chunked_s if chunked_s > 0 else 0.0,
               unchunked_prefill_s=unchunked_s,
               unchunked_prefill_tokens_per_s=tokens / unchunked_s if unchunked_s > 0 else 0.0,
               chunk_size=config.chunk_size, answers=[a.text for a in answers])
    row["ttft_over_floor"] = row["ttft_s"] / row["floor_ttft_s"] if row["floor_ttft_s"] > 0 else None
    steps = sum(a.timings.decode_steps for a in answers)
    plain_rate = _decode_rate([(a.timings.new_tokens, a.timings.ttft_s, a.timings.answer_s) for a in plain])
    row.update(draft_tokens=engine.config.decoding.draft_tokens,
               draft_tokens_per_step=sum(a.timings.drafted_tokens for a in answers) / steps if steps else 0.0,
               undrafted_decode_tokens_per_s=plain_rate,
               draft_speedup=row["decode_tokens_per_s"] / plain_rate if plain_rate > 0 else None,
               draft_same_answers=[a.token_ids for a in answers] == [a.token_ids for a in plain],
               sources_s=_median([a.timings.sources_s for a in answers]),  # after the answer, not in answer_s
               **steps_compared)
    return row, [a.token_ids for a in answers]


STEP_REPEATS = 9  # compare_steps times each way this many times, alternately


def compare_steps(lm: LoadedModel, cache, token: int) -> dict:
    """The decode step written out (kvqa.model.architectures: what kvqa answers with where the model has one) against
    the model's own forward for one token, alternately on the same prefilled cache, rolled back after each: the median
    of each and whether their logits are equal bit for bit. Empty where kvqa decodes through the forward anyway."""
    if lm.step is None or lm.decode_step is not None:
        return {}
    held, forward = cache.length, replace(lm, step=None)
    times: dict[str, list[float]] = {"step": [], "forward": []}
    logits = {}
    for _ in range(STEP_REPEATS):
        for name, way in (("step", lm), ("forward", forward)):
            started = now(lm.device)
            logits[name] = decode_one_token(way, token, cache)
            times[name].append(now(lm.device) - started)
            cache.rollback(held)
    step_s, forward_s = _median(times["step"]), _median(times["forward"])
    return {"written_step_s": step_s, "forward_step_s": forward_s, "written_step_speedup": forward_s / step_s,
            "written_step_same_logits": torch.equal(logits["step"], logits["forward"])}


def decode_floor(row: dict, lm: LoadedModel, bandwidth: Bandwidth) -> dict:
    """A kvqa row's decode against this machine's floor: one step reads every weight and the keys and values held at
    the row's context at least once, so it cannot take less than (weight bytes + KV bytes) / bandwidth (a little less
    for a model whose input embedding is not tied to its head: a step reads one row of it). The step measured is
    1 / decode tokens/s (None, and no ratio, when no answer had a second token)."""
    weights = weight_bytes(lm.model)
    kv = bytes_per_token(lm.config, lm.kv_dtype) * row["context_tokens"]
    floor = (weights + kv) / bandwidth.bytes_per_s
    step = 1 / row["decode_tokens_per_s"] if row["decode_tokens_per_s"] > 0 else None
    return {"weight_bytes": weights, "kv_bytes": kv, "decode_floor_s": floor, "decode_step_s": step,
            "decode_over_floor": step / floor if step is not None else None}


PREFILL_REPEATS = 2  # the chunked/unchunked prefill comparison keeps the best of this many alternating runs

RUNNERS: dict[str, Callable] = {"recompute": run_recompute, "seed": run_seed, "kvqa": run_kvqa}


@contextmanager
def stock_attention(model) -> Iterator[None]:
    """transformers' own SDPA attention while inside, where kvqa had registered its CPU attention
    (kvqa.model.attention)."""
    previous = model.config._attn_implementation
    if previous == GROUPED_SDPA:
        model.set_attn_implementation("sdpa")
    try:
        yield
    finally:
        if previous == GROUPED_SDPA:
            model.set_attn_implementation(previous)


def _quotes(lm: LoadedModel, document: Document, question: str, options: Decoding) -> list[str]:
    """What kvqa quotes in the question's turn (kvqa.session.ask, kvqa.generation.rerank), for the runs that build
    the turn themselves."""
    asked = QuestionTurn(question, passages=tuple(rank(document.text, question).candidates(options.passages)))
    return quoted(lm, asked, options)[0]
