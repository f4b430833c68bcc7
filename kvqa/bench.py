"""`python -m kvqa bench`: kvqa against the two usual ways of answering questions about one document.

One process, one model, the same document text and the same questions for every method, at several context lengths:

- `recompute`: the whole prompt (document and question) run from scratch for every question
  (kvqa.answer_without_cache, what `kvqa ask --no-cache` does).
- `seed`: the cache reuse shown in transformers' documentation: the document prefilled once into a DynamicCache by
  one forward, then for every question `copy.deepcopy` of that cache and `model.generate(...)` on top of the copy.
- `kvqa`: kvqa.prefill once, then kvqa.stream for every question, exactly as the CLI and the app use them. Its rows
  also carry `floor_ttft_s` (one bare forward of the question's tokens on the prefilled cache: what TTFT cannot go
  below) and `unchunked_prefill_s` (the same prefill as one forward instead of chunks).

Every figure is measured in this process, with the device synchronised before each clock read (kvqa.timing).
Greedy answers must be the same token ids for every method: each row says whether they are (`same_answers`).
"""

from __future__ import annotations

import argparse
import copy
import datetime as dt
import gc
import json
import os
import platform
import re
import statistics
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import replace
from pathlib import Path

import torch

from .answer import Answer, answer_without_cache, question_ids, stream
from .cache import bytes_per_token, new_cache
from .config import DEFAULT_MODEL, Config
from .documents import Document, document_from_text, load_document
from .errors import KvqaError
from .model import LoadedModel, choose_attention, choose_device, choose_dtype, default_model_dir, load_model, prepare
from .prefill import prefill, run_chunks
from .prompt import ChatPrompt
from .timing import now

METHODS = ("recompute", "seed", "kvqa")
DEFAULT_CONTEXTS = (512, 1024, 2048, 4096)
DEFAULT_QUESTIONS = 3
DEFAULT_MAX_NEW_TOKENS = 32
SAMPLE_DOCUMENT = Path(__file__).resolve().parent.parent / "assets" / "declaration-of-independence.md"
CONFIGS = Path(__file__).resolve().parent / "configs"
QUESTIONS = (  # varied in length and kind; the first ones are answered by the sample document's opening
    "What rights are unalienable?",
    "Who is the history of repeated injuries about?",
    "According to the document, why are governments instituted among men, and from where do they derive their "
    "just powers?",
    "When does the document say a people may alter or abolish a government?",
    "Name one grievance the document lists about trade or taxes.",
    "What do the signers pledge to each other?",
    "Summarise the document in one sentence.",
    "Quelle est la date du document ?",
)


class BenchError(KvqaError):
    """A bench flag or input that cannot be used."""


# ---------------------------------------------------------------------------------------------------------------
# The document cut to a length in tokens


def long_text(text: str, tokenizer, tokens: int) -> str:
    """The text repeated (blank line between copies) until it holds at least `tokens` tokens."""
    n = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    copies = max(1, -(-tokens // max(n, 1)))
    return "\n\n".join([text] * copies)


def cut_document(prompt: ChatPrompt, text_ids: Sequence[int], target: int, *, name: str) -> tuple[Document, list[int]]:
    """The longest head of the text (in tokens) whose whole prompt prefix is at most `target` tokens.

    Returns the Document and its prefix ids: len(ids) is the exact context length every method then reads."""
    tokenizer = prompt.tokenizer

    def head(k: int) -> tuple[Document, list[int]]:
        document = document_from_text(tokenizer.decode(list(text_ids[:k])).rstrip("\ufffd") or ".", name=name)
        return document, prompt.prefix_ids(document.text)

    best = head(1)
    if len(best[1]) > target:
        raise BenchError(f"A context of {target:,} tokens is too short: the prompt around the document alone takes "
                         f"{len(best[1]):,} tokens. Use --contexts with lengths above that.")
    lo, hi = 1, min(len(text_ids), target)
    while lo < hi:  # the prefix grows (almost) monotonically with the head: the largest k that fits
        mid = (lo + hi + 1) // 2
        candidate = head(mid)
        if len(candidate[1]) <= target:
            lo, best = mid, candidate
        else:
            hi = mid - 1
    return best


# ---------------------------------------------------------------------------------------------------------------
# Peak memory


def _proc_status_kb(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            m = re.search(rf"^{field}:\s+(\d+) kB", f.read(), re.M)
        return int(m.group(1)) if m else None
    except OSError:
        return None


def _rss() -> int:
    kb = _proc_status_kb("VmRSS")
    if kb is not None:
        return kb * 1024
    import psutil

    return psutil.Process().memory_info().rss


class PeakMemory:
    """Peak memory during a block. On CUDA: the allocator's peak (reset at the start). Elsewhere: the process's RSS
    high-water mark, reset at the start through /proc/self/clear_refs on Linux, else sampled every 2 ms.

    `total` is the peak itself, `increase` the peak above the level at the start of the block."""

    def __init__(self, device: torch.device):
        self.device = device
        self.start = self.total = 0
        self._sampler: threading.Thread | None = None
        self._stop = threading.Event()

    def __enter__(self) -> "PeakMemory":
        gc.collect()
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            torch.cuda.empty_cache()
            torch.cuda.reset_peak_memory_stats(self.device)
            self.start = torch.cuda.memory_allocated(self.device)
            return self
        self.start = _rss()
        self.total = self.start
        if not self._reset_high_water():
            self._sampler = threading.Thread(target=self._sample, daemon=True)
            self._sampler.start()
        return self

    def __exit__(self, *exc) -> None:
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
            self.total = torch.cuda.max_memory_allocated(self.device)
        elif self._sampler is not None:
            self._stop.set()
            self._sampler.join()
            self.total = max(self.total, _rss())
        else:
            self.total = max(self.start, (_proc_status_kb("VmHWM") or 0) * 1024)

    @property
    def increase(self) -> int:
        return max(0, self.total - self.start)

    @staticmethod
    def _reset_high_water() -> bool:
        try:
            with open("/proc/self/clear_refs", "w") as f:
                f.write("5")  # resets VmHWM to the current RSS (Linux 4.0+)
            return _proc_status_kb("VmHWM") is not None
        except OSError:
            return False

    def _sample(self) -> None:
        while not self._stop.wait(0.002):
            self.total = max(self.total, _rss())


# ---------------------------------------------------------------------------------------------------------------
# The three methods. Each returns a row (without same_answers) and every question's answer token ids.


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
        "new_tokens": [n for n, _, _ in runs],
        "ttft_each_s": [t for _, t, _ in runs],
        "answer_each_s": [a for _, _, a in runs],
    }
    row.update(figures)
    if row["prefill_s"] > 0:
        row["prefill_tokens_per_s"] = context_tokens / row["prefill_s"]
    return row


def run_recompute(lm: LoadedModel, document: Document, prompt: ChatPrompt, prefix_ids: list[int],
                  questions: Sequence[str], config: Config) -> tuple[dict, list[tuple[int, ...]]]:
    """Every question answered from the whole prompt, computed from scratch."""
    with PeakMemory(lm.device) as memory:
        answers = [answer_without_cache(lm, document, q, config=config, prompt=prompt) for q in questions]
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


def run_seed(lm: LoadedModel, document: Document, prompt: ChatPrompt, prefix_ids: list[int],
             questions: Sequence[str], config: Config) -> tuple[dict, list[tuple[int, ...]]]:
    """transformers' documented prompt-cache reuse: one forward into a DynamicCache, then per question a deepcopy of
    it and generate() on top of the copy."""
    from transformers import DynamicCache, GenerationConfig

    model, device = lm.model, lm.device
    eos = sorted(lm.eos_ids)
    generation = GenerationConfig(max_new_tokens=config.max_new_tokens, do_sample=False, eos_token_id=eos or None,
                                  pad_token_id=eos[0] if eos else None)
    suffixes = [question_ids(prompt, q, limit=config.max_question_tokens) for q in questions]
    runs, forks, ids_all = [], [], []
    with PeakMemory(device) as memory:
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
            ended = next((i for i, t in enumerate(new) if t in lm.eos_ids), len(new))
            ids_all.append(tuple(new[:ended]))
            runs.append((len(new[:ended]), (clock.first_token_at or now(device)) - started, total))
            del fork, out
        del prompt_cache
    row = _row("seed", len(prefix_ids), runs, prefill_s=prefill_s, fork_s=_median(forks),
               peak_memory_bytes=memory.increase, peak_memory_total_bytes=memory.total, cache_bytes=cache_bytes,
               cache_tokens=cache_tokens,
               theoretical_cache_bytes=bytes_per_token(lm.config, lm.dtype) * cache_tokens,
               answers=[lm.tokenizer.decode(list(ids), skip_special_tokens=True) for ids in ids_all])
    return row, ids_all


def run_kvqa(lm: LoadedModel, document: Document, prompt: ChatPrompt, prefix_ids: list[int],
             questions: Sequence[str], config: Config) -> tuple[dict, list[tuple[int, ...]]]:
    """kvqa.prefill once, then kvqa.stream per question; around them, the floor (a bare forward of the question on
    the prefilled cache, then the rollback that forks the next question) and an unchunked prefill to compare."""
    device = lm.device
    unchunked, chunked = [], []
    with torch.no_grad():  # the prefill in chunks and as one forward, alternately, outside the memory window
        for _ in range(PREFILL_REPEATS):
            for chunk_size, times in ((len(prefix_ids), unchunked), (config.chunk_size, chunked)):
                cache = new_cache(lm.config, len(prefix_ids) + config.reserve_tokens)
                started = now(device)
                run_chunks(lm, prefix_ids, cache, chunk_size=chunk_size)
                times.append(now(device) - started)
                del cache
    unchunked_s, chunked_s = min(unchunked), min(chunked)
    answers, floors, forks = [], [], []
    with PeakMemory(device) as memory:
        doc = prefill(lm, document, config=config)
        for question in questions:
            ids = question_ids(doc.prompt, question, limit=doc.max_question_tokens)
            with torch.no_grad():
                started = now(device)
                run_chunks(lm, ids, doc.cache, chunk_size=len(ids))
                floors.append(now(device) - started)
                started = now(device)
                doc.cache.rollback(doc.tokens)
                forks.append(now(device) - started)
            result = None
            for event in stream(lm, doc, question, temperature=0.0):
                result = event
            assert isinstance(result, Answer)
            answers.append(result)
        cache_bytes, capacity, tokens = doc.cache_bytes, doc.cache.capacity, doc.tokens
        prefill_s = doc.prefill_s
        del doc
    if tokens != len(prefix_ids):  # the prompt's date line changed between the two tokenizations (midnight)
        raise BenchError("The document's prefix changed during the run (the date changed?): run the bench again.")
    runs = [(a.timings.new_tokens, a.timings.ttft_s, a.timings.answer_s) for a in answers]
    row = _row("kvqa", tokens, runs, prefill_s=prefill_s, fork_s=_median(forks), peak_memory_bytes=memory.increase,
               peak_memory_total_bytes=memory.total, cache_bytes=cache_bytes, cache_tokens=capacity,
               theoretical_cache_bytes=bytes_per_token(lm.config, lm.dtype) * capacity,
               floor_ttft_s=_median(floors), floor_each_s=floors,
               chunked_prefill_s=chunked_s, chunked_prefill_tokens_per_s=tokens / chunked_s if chunked_s > 0 else 0.0,
               unchunked_prefill_s=unchunked_s,
               unchunked_prefill_tokens_per_s=tokens / unchunked_s if unchunked_s > 0 else 0.0,
               chunk_size=config.chunk_size, answers=[a.text for a in answers])
    return row, [a.token_ids for a in answers]


PREFILL_REPEATS = 2  # the chunked/unchunked prefill comparison keeps the best of this many alternating runs

RUNNERS: dict[str, Callable] = {"recompute": run_recompute, "seed": run_seed, "kvqa": run_kvqa}


# ---------------------------------------------------------------------------------------------------------------
# The whole bench


def machine_info(lm: LoadedModel) -> dict:
    import transformers

    cpu = platform.processor() or platform.machine()
    try:
        with open("/proc/cpuinfo") as f:
            m = re.search(r"^model name\s*:\s*(.+)$", f.read(), re.M)
        cpu = m.group(1).strip() if m else cpu
    except OSError:
        pass
    cuda = lm.device.type == "cuda"
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
        "gpu": torch.cuda.get_device_name(lm.device) if cuda else None,
        "gpu_memory_bytes": torch.cuda.get_device_properties(lm.device).total_memory if cuda else None,
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "python": platform.python_version(),
        "platform": platform.platform(),
        "device": str(lm.device),
        "dtype": str(lm.dtype).removeprefix("torch."),
        "attn_implementation": lm.attn_implementation,
        "date": dt.datetime.now().astimezone().isoformat(timespec="seconds"),
    }


def run_bench(
    lm: LoadedModel,
    text: str,
    *,
    contexts: Sequence[int] = DEFAULT_CONTEXTS,
    questions: Sequence[str] = QUESTIONS[:DEFAULT_QUESTIONS],
    config: Config = Config(max_new_tokens=DEFAULT_MAX_NEW_TOKENS),
    methods: Sequence[str] = METHODS,
    document_name: str = "document",
    warm_up: bool = True,
    say: Callable[[str], None] = lambda message: None,
) -> dict:
    """Run every method at every context length on `text` cut to that length; returns the --json object."""
    if not contexts or any(n < 1 for n in contexts):
        raise BenchError("Give at least one context length, each a positive number of tokens.")
    if not questions:
        raise BenchError("Give at least one question.")
    unknown = [m for m in methods if m not in RUNNERS]
    if unknown:
        raise BenchError(f"Unknown method(s) {', '.join(unknown)}: use {', '.join(METHODS)}.")
    limit = lm.context_length - config.reserve_tokens
    if max(contexts) > limit:
        raise BenchError(f"A context of {max(contexts):,} tokens does not fit {lm.name}: it reads at most {limit:,} "
                         f"({lm.context_length:,} of context, {config.reserve_tokens:,} kept for the question and "
                         "answer). Use shorter --contexts.")
    prompt = ChatPrompt.for_tokenizer(lm.tokenizer)
    text = long_text(text, lm.tokenizer, max(contexts) + 64)
    text_ids = lm.tokenizer(text, add_special_tokens=False)["input_ids"]
    cuts = {n: cut_document(prompt, text_ids, n, name=document_name) for n in contexts}
    if warm_up:  # first calls pay for lazy initialisation (kernels, allocator, thread pools): not part of any method
        document, prefix_ids = cuts[min(contexts)]
        small = replace(config, max_new_tokens=2)
        say("warming up ...")
        for method in methods:
            RUNNERS[method](lm, document, prompt, prefix_ids, questions[:1], small)
    results = []
    for n in contexts:
        document, prefix_ids = cuts[n]
        reference: list[tuple[int, ...]] | None = None
        for method in methods:
            say(f"{method} at {len(prefix_ids):,} tokens ...")
            gc.collect()
            row, ids = RUNNERS[method](lm, document, prompt, prefix_ids, questions, config)
            reference = ids if reference is None else reference
            row = {**row, "target_context_tokens": n, "questions": len(questions),
                   "max_new_tokens": config.max_new_tokens, "same_answers": ids == reference}
            results.append(row)
    return {"machine": machine_info(lm), "model": lm.name, "results": results}


# ---------------------------------------------------------------------------------------------------------------
# Reading the results


def _mib(n: int | None) -> str:
    return "-" if not n else f"{n / 2**20:,.1f}"


def _s(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x * 1000:,.1f} ms" if x < 1 else f"{x:,.2f} s"


def format_table(result: dict) -> str:
    """The results as a readable table, followed by the target checks at the longest context."""
    m = result["machine"]
    head = (f"{result['model']} on {m['device']} ({m['gpu'] or m['cpu']}, {m['cores']} cores, {m['dtype']}, "
            f"torch {m['torch']}), {m['date']}")
    columns = ("method", "context", "prefill", "prefill tok/s", "TTFT", "floor TTFT", "answer", "decode tok/s",
               "fork", "peak MiB", "cache MiB", "theory MiB", "same")
    rows = []
    for r in result["results"]:
        rows.append((r["method"], f"{r['context_tokens']:,}", _s(r["prefill_s"]) if r["prefill_s"] else "-",
                     f"{r['prefill_tokens_per_s']:,.0f}" if r["prefill_s"] else "-", _s(r["ttft_s"]),
                     _s(r["floor_ttft_s"]), _s(r["answer_s"]), f"{r['decode_tokens_per_s']:,.1f}",
                     _s(r["fork_s"]) if r["fork_s"] else "0", _mib(r["peak_memory_bytes"]), _mib(r["cache_bytes"]),
                     _mib(r["theoretical_cache_bytes"]), "yes" if r["same_answers"] else "NO"))
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(columns)]
    line = lambda cells: "  ".join(c.ljust(w) if i < 1 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))
    out = [head, "", line(columns), line(["-" * w for w in widths])]
    last = None
    for r, cells in zip(result["results"], rows):
        if last is not None and r["context_tokens"] != last:
            out.append("")
        last = r["context_tokens"]
        out.append(line(cells))
    prefills = [r for r in result["results"] if r["method"] == "kvqa"]
    if prefills:
        out += ["", "prefill, chunked (as kvqa does) vs one forward:"]
        for r in prefills:
            out.append(f"  {r['context_tokens']:>6,} tokens: {r['chunked_prefill_tokens_per_s']:,.0f} tok/s in chunks of "
                       f"{r['chunk_size']} vs {r['unchunked_prefill_tokens_per_s']:,.0f} tok/s unchunked "
                       f"({r['chunked_prefill_tokens_per_s'] / max(r['unchunked_prefill_tokens_per_s'], 1e-9):.2f}x, "
                       f"best of {PREFILL_REPEATS} each)")
    checks = target_checks(result)
    if checks:
        out += ["", f"targets at {max(r['context_tokens'] for r in result['results']):,} tokens:"]
        out += [f"  [{'ok' if ok else 'MISSED'}] {text}" for ok, text in checks]
    return "\n".join(out)


def target_checks(result: dict) -> list[tuple[bool, str]]:
    """The project's speed targets, checked at the longest context where all three methods ran."""
    by = {}
    for r in result["results"]:
        by.setdefault(r["context_tokens"], {})[r["method"]] = r
    full = [n for n, rows in by.items() if set(METHODS) <= set(rows)]
    if not full:
        return []
    rows = by[max(full)]
    k, rc, sd = rows["kvqa"], rows["recompute"], rows["seed"]
    ratio = lambda a, b: a / b if b > 0 else float("inf")
    return [
        (k["ttft_s"] <= 1.15 * k["floor_ttft_s"],
         f"kvqa TTFT {_s(k['ttft_s'])} <= 1.15 x floor {_s(k['floor_ttft_s'])} ({ratio(k['ttft_s'], k['floor_ttft_s']):.2f}x)"),
        (rc["ttft_s"] >= 30 * k["ttft_s"],
         f"kvqa TTFT >= 30x lower than recompute ({ratio(rc['ttft_s'], k['ttft_s']):.1f}x)"),
        (k["ttft_s"] <= sd["ttft_s"], f"kvqa TTFT {_s(k['ttft_s'])} <= seed {_s(sd['ttft_s'])}"),
        (k["answer_s"] <= sd["answer_s"], f"kvqa answer {_s(k['answer_s'])} <= seed {_s(sd['answer_s'])}"),
        (k["fork_s"] < 0.02 * k["ttft_s"],
         f"kvqa fork {_s(k['fork_s'])} < 2% of TTFT ({100 * ratio(k['fork_s'], k['ttft_s']):.3f}%)"),
        (k["decode_tokens_per_s"] >= sd["decode_tokens_per_s"],
         f"kvqa decode {k['decode_tokens_per_s']:,.1f} tok/s >= seed {sd['decode_tokens_per_s']:,.1f} tok/s"),
        (k["chunked_prefill_tokens_per_s"] >= 0.9 * k["unchunked_prefill_tokens_per_s"],
         f"chunked prefill {k['chunked_prefill_tokens_per_s']:,.0f} tok/s >= 0.9 x unchunked "
         f"{k['unchunked_prefill_tokens_per_s']:,.0f} tok/s"),
        (all(r["same_answers"] for r in rows.values()), "same greedy answers for every method"),
    ]


def write_plot(result: dict, path: str | Path) -> None:
    """TTFT against context length for every method (log-log), with kvqa's floor dashed; written as a PNG."""
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend
    from matplotlib.ticker import NullLocator

    fig = Figure(figsize=(7.5, 4.8), dpi=120)
    ax = fig.add_subplot()
    styles = {"recompute": ("tab:red", "o"), "seed": ("tab:orange", "s"), "kvqa": ("tab:blue", "^")}
    for method in METHODS:
        rows = sorted((r for r in result["results"] if r["method"] == method), key=lambda r: r["context_tokens"])
        if rows:
            color, marker = styles[method]
            ax.plot([r["context_tokens"] for r in rows], [r["ttft_s"] for r in rows], marker=marker, color=color,
                    label=method)
            if method == "kvqa":
                ax.plot([r["context_tokens"] for r in rows], [r["floor_ttft_s"] for r in rows], linestyle="--",
                        color=color, alpha=0.6, label="floor: the question's forward alone")
    m = result["machine"]
    ax.set_xscale("log", base=2)
    contexts = sorted({r["context_tokens"] for r in result["results"]})
    ax.set_xticks(contexts, [f"{n:,}" for n in contexts])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_yscale("log")
    ax.set_xlabel("context (document prompt tokens)")
    ax.set_ylabel("time to first token (s, median)")
    ax.set_title(f"{result['model']} on {m['gpu'] or m['cpu']} ({m['dtype']})", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(str(path), format="png")


# ---------------------------------------------------------------------------------------------------------------
# Building a model with random weights from a config


class FoldedTokenizer:
    """A tokenizer whose ids are taken modulo a smaller model vocabulary: arbitrary but valid ids for a model with
    random weights (timing does not depend on which ids they are). Everything else is the wrapped tokenizer's."""

    def __init__(self, tokenizer, vocab_size: int):
        self._tokenizer = tokenizer
        self._vocab_size = vocab_size

    def __getattr__(self, name):
        return getattr(self._tokenizer, name)

    def __len__(self) -> int:
        return self._vocab_size

    def _fold(self, ids):
        if isinstance(ids, int):
            return ids % self._vocab_size
        return [self._fold(i) for i in ids]

    def __call__(self, *args, **kwargs):
        encoded = self._tokenizer(*args, **kwargs)
        encoded["input_ids"] = self._fold(encoded["input_ids"])
        return encoded

    def convert_tokens_to_ids(self, tokens):
        ids = self._tokenizer.convert_tokens_to_ids(tokens)
        return None if ids is None else self._fold(ids)

    def get_vocab(self) -> dict[str, int]:
        return {token: i % self._vocab_size for token, i in self._tokenizer.get_vocab().items()}


def config_path(name: str) -> Path:
    """A config JSON: a path, or the name of one shipped in kvqa/configs (with or without .json)."""
    path = Path(name)
    if path.is_file():
        return path
    shipped = CONFIGS / (name if name.endswith(".json") else f"{name}.json")
    if shipped.is_file():
        return shipped
    names = ", ".join(sorted(p.stem for p in CONFIGS.glob("*.json")))
    raise BenchError(f"No config file '{name}': give a path to a model config JSON, or one of: {names}.")


def random_init_model(path: str | Path, config: Config) -> LoadedModel:
    """A model with random weights from a config JSON, on the chosen device and dtype, with the tokenizer of
    config.model (the default model's unless --model says otherwise), folded into the vocabulary if it is smaller."""
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    path = config_path(str(path))
    try:
        settings = json.loads(path.read_text())
        settings = {k: v for k, v in settings.items() if not k.startswith("_")}
        model_type = settings.pop("model_type")
        settings.pop("torch_dtype", None)
        settings.pop("dtype", None)
        model_config = AutoConfig.for_model(model_type, **settings)
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise BenchError(f"Cannot use {path} as a model config: {type(e).__name__}: {e}. Give a config.json with "
                         "a model_type (for example kvqa/configs/llama-3.2-3b.json).") from None
    device = choose_device(config.device)
    dtype = choose_dtype(config.dtype, device)
    source = str(default_model_dir(config.cache_dir)) if config.model == DEFAULT_MODEL else config.model
    try:
        tokenizer = AutoTokenizer.from_pretrained(source)
    except (OSError, ValueError) as e:
        raise BenchError(f"Cannot load the tokenizer of '{config.model}' for the random model: {e}") from None
    started = time.perf_counter()
    torch.manual_seed(0)
    with torch.device(device):  # initialise the weights where they will run: seconds on a GPU for 3B parameters
        model = AutoModelForCausalLM.from_config(model_config, dtype=dtype,
                                                 attn_implementation=choose_attention(config.attn_implementation,
                                                                                      device))
    vocab = model.config.get_text_config(decoder=True).vocab_size
    if vocab < len(tokenizer):
        tokenizer = FoldedTokenizer(tokenizer, vocab)
    return prepare(model, tokenizer, name=f"random-init {path.stem}", device=device, load_started=started)


# ---------------------------------------------------------------------------------------------------------------
# The command line


def parse_contexts(value: str) -> list[int]:
    """'512,1024' -> [512, 1024]; raises BenchError on anything but positive integers."""
    try:
        contexts = [int(part) for part in value.replace(" ", "").split(",") if part]
    except ValueError:
        contexts = []
    if not contexts or any(n < 1 for n in contexts):
        raise BenchError(f"--contexts takes positive token counts separated by commas, like 512,1024: got '{value}'.")
    return list(dict.fromkeys(contexts))


def run_from_args(args: argparse.Namespace, config: Config) -> int:
    """`python -m kvqa bench`: check the flags, load the model, run, print a table or JSON, maybe plot."""
    contexts = parse_contexts(args.contexts)
    if not 1 <= args.questions <= len(QUESTIONS):
        raise BenchError(f"--questions must be between 1 and {len(QUESTIONS)}: got {args.questions}.")
    if args.plot:
        plot = Path(args.plot)
        if not plot.parent.is_dir():
            raise BenchError(f"Cannot write the plot to {plot}: folder {plot.parent} does not exist.")
    if args.doc:
        document = load_document(args.doc, config=config)
        text, name = document.text, document.name
    else:
        if not SAMPLE_DOCUMENT.is_file():
            raise BenchError(f"The sample document {SAMPLE_DOCUMENT} is missing: give one with --doc.")
        text, name = SAMPLE_DOCUMENT.read_text(encoding="utf-8"), SAMPLE_DOCUMENT.name
    if args.random_init:
        config_path(args.random_init)  # a bad path fails before anything is loaded
    say = (lambda message: None) if args.json else (lambda message: print(message, file=sys.stderr, flush=True))
    say(f"loading {args.random_init + ' (random weights)' if args.random_init else config.model} ...")
    lm = random_init_model(args.random_init, config) if args.random_init else load_model(config)
    say(f"loaded {lm.name} on {lm.device} ({str(lm.dtype).removeprefix('torch.')}) in {lm.load_s:.1f} s")
    result = run_bench(lm, text, contexts=contexts, questions=QUESTIONS[: args.questions], config=config,
                       document_name=name, say=say)
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        print(format_table(result))
    if args.plot:
        write_plot(result, args.plot)
        say(f"plot written to {args.plot}")
    return 0
