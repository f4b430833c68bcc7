"""The whole bench: the document cut to each context length, every method run on it, and `python -m kvqa bench`."""

from __future__ import annotations

import argparse
import datetime as dt
import gc
import json
import os
import platform
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import torch

from kvqa.documents.reading import Document, document_from_text, load_document
from kvqa.model.loading import LoadedModel, load_model

from ..config import Config
from ..prompt import Prompt, prompt_for
from .errors import BenchError
from .memory import Bandwidth, read_bandwidth
from .methods import METHODS, RUNNERS, decode_floor
from .models import config_path, random_init_model
from .provenance import cpu_name
from .report import format_table, write_plot
from .store import format_store_table, run_store_bench

DEFAULT_CONTEXTS = (512, 1024, 2048, 4096)
DEFAULT_QUESTIONS = 3
DEFAULT_MAX_NEW_TOKENS = 32
SAMPLE_DOCUMENT = Path(__file__).resolve().parent.parent.parent / "assets" / "declaration-of-independence.md"
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


# ---------------------------------------------------------------------------------------------------------------
# The document cut to a length in tokens


def long_text(text: str, tokenizer, tokens: int) -> str:
    """The text repeated (blank line between copies) until it holds at least `tokens` tokens."""
    n = len(tokenizer(text, add_special_tokens=False)["input_ids"])
    copies = max(1, -(-tokens // max(n, 1)))
    return "\n\n".join([text] * copies)


def cut_document(prompt: Prompt, text_ids: Sequence[int], target: int, *, name: str) -> tuple[Document, list[int]]:
    """The longest head of the text (in tokens) whose whole prompt prefix is at most `target` tokens.

    Returns the Document and its prefix ids: len(ids) is the exact context length every method then reads."""
    tokenizer = prompt.tokenizer

    def head(k: int) -> tuple[Document, list[int]]:
        document = document_from_text(tokenizer.decode(list(text_ids[:k])).rstrip("\ufffd") or ".", name=name)
        return document, prompt.prefix_ids(document.text)

    best = head(1)
    if len(best[1]) > target:
        raise BenchError("bench.context_too_short", target=target, around=len(best[1]))
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
# The whole bench


def machine_info(lm: LoadedModel, bandwidth: Bandwidth) -> dict:
    import transformers

    cuda = lm.device.type == "cuda"
    return {
        "cpu": cpu_name(),
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
        "bandwidth_gb_s": bandwidth.gb_s,  # memory read bandwidth in 1e9 bytes/s (memory.read_bandwidth)
        "bandwidth_tensor_bytes": bandwidth.tensor_bytes,
        "bandwidth_runs": bandwidth.runs,
    }


def run_bench(
    lm: LoadedModel,
    text: str,
    *,
    contexts: Sequence[int] = DEFAULT_CONTEXTS,
    questions: Sequence[str] = QUESTIONS[:DEFAULT_QUESTIONS],
    config: Config = Config.of(max_new_tokens=DEFAULT_MAX_NEW_TOKENS),
    methods: Sequence[str] = METHODS,
    document_name: str = "document",
    warm_up: bool = True,
    say: Callable[[str], None] = lambda message: None,
) -> dict:
    """Run every method at every context length on `text` cut to that length; returns the --json object."""
    if not contexts or any(n < 1 for n in contexts):
        raise BenchError("bench.no_contexts")
    if not questions:
        raise BenchError("bench.no_questions")
    unknown = [m for m in methods if m not in RUNNERS]
    if unknown:
        raise BenchError("bench.unknown_methods", unknown=", ".join(unknown), methods=", ".join(METHODS))
    limit = lm.context_length - config.limits.reserve_tokens
    if max(contexts) > limit:
        raise BenchError("bench.context_too_long", context=max(contexts), model=lm.name, limit=limit,
                         length=lm.context_length, reserve=config.limits.reserve_tokens)
    prompt = prompt_for(lm.tokenizer)
    text = long_text(text, lm.tokenizer, max(contexts) + 64)
    text_ids = lm.tokenizer(text, add_special_tokens=False)["input_ids"]
    cuts = {n: cut_document(prompt, text_ids, n, name=document_name) for n in contexts}
    warm_up_s = {}
    if warm_up:  # first calls pay for lazy initialisation (kernels, allocator, thread pools, compiling the decode
        document, prefix_ids = cuts[min(contexts)]  # step): not part of any method's figures
        small = config.replaced(max_new_tokens=4)
        say("warming up" + (" (compiling the decode step)" if lm.decode_step is not None else "") + " ...")
        for method in methods:
            started = time.perf_counter()
            RUNNERS[method](lm, document, prompt, prefix_ids, questions[:1], small)
            warm_up_s[method] = time.perf_counter() - started
    say("measuring memory read bandwidth ...")
    bandwidth = read_bandwidth(lm.device)  # once per run: the floor of every decode step below
    results = []
    for n in contexts:
        document, prefix_ids = cuts[n]
        reference: list[tuple[int, ...]] | None = None
        for method in methods:
            say(f"{method} at {len(prefix_ids):,} tokens ...")
            gc.collect()
            row, ids = RUNNERS[method](lm, document, prompt, prefix_ids, questions, config)
            reference = ids if reference is None else reference
            if method == "kvqa":
                row.update(decode_floor(row, lm, bandwidth))
            row = {**row, "target_context_tokens": n, "questions": len(questions),
                   "max_new_tokens": config.limits.max_new_tokens, "same_answers": ids == reference}
            results.append(row)
    return {"machine": machine_info(lm, bandwidth), "model": lm.name, "compiled_decode": lm.decode_step is not None,
            "weights": lm.weights, "weight_bytes": lm.weight_bytes, "quote_chars": config.decoding.quote_chars,
            "warm_up_s": warm_up_s, "results": results}


# ---------------------------------------------------------------------------------------------------------------
# The command line


def _counts(value: str, *, least: int, message: str) -> list[int]:
    """'512,1024' -> [512, 1024], each at least `least`, duplicates dropped; BenchError(message) on anything else."""
    try:
        counts = [int(part) for part in value.replace(" ", "").split(",") if part]
    except ValueError:
        counts = []
    if not counts or any(n < least for n in counts):
        raise BenchError(message, value=value)
    return list(dict.fromkeys(counts))


def parse_contexts(value: str) -> list[int]:
    """'512,1024' -> [512, 1024]: positive token counts."""
    return _counts(value, least=1, message="bench.bad_contexts")


def parse_quote_chars(value: str) -> list[int]:
    """'0,120' -> [0, 120]: quote lengths in characters, 0 for whole."""
    return _counts(value, least=0, message="bench.bad_quote_chars")


def parse_weights(value: str) -> list[str]:
    """'fp32,int8' -> ['fp32', 'int8'] (each checked when its model loads)."""
    forms = list(dict.fromkeys(part.strip() for part in value.split(",") if part.strip()))
    if not forms:
        raise BenchError("bench.bad_weights", value=value)
    return forms


def side_by_side(runs: list[dict]) -> dict:
    """One result from several runs, each with its weights' form and quote length: every row names both (`weights`,
    `quote_chars`), and each kvqa row says whether its answers are the first run's, text for text
    (`same_as_first_run`)."""
    first = {r["context_tokens"]: r for r in runs[0]["results"] if r["method"] == "kvqa"}
    results = []
    for run in runs:
        for row in run["results"]:
            row = {**row, "weights": run["weights"], "quote_chars": run["quote_chars"]}
            if row["method"] == "kvqa" and row["context_tokens"] in first:
                row["same_as_first_run"] = row["answers"] == first[row["context_tokens"]]["answers"]
            results.append(row)
    return {**runs[0], "weights": list(dict.fromkeys(run["weights"] for run in runs)),
            "quote_chars": list(dict.fromkeys(run["quote_chars"] for run in runs)),
            "runs": [{"weights": run["weights"], "quote_chars": run["quote_chars"]} for run in runs],
            "results": results}


def _store_bench(lm: LoadedModel, text: str, name: str, contexts: list[int], args, config: Config, say) -> int:
    """`bench --store`: restoring each context's cache from the disk tier against prefilling it."""
    prompt = prompt_for(lm.tokenizer)
    text_ids = lm.tokenizer(long_text(text, lm.tokenizer, max(contexts) + 64), add_special_tokens=False)["input_ids"]
    documents = [cut_document(prompt, text_ids, n, name=name) for n in sorted(contexts)]
    rows = run_store_bench(lm, documents, questions=QUESTIONS[: args.questions], config=config, say=say)
    bandwidth = Bandwidth(bytes_per_s=0.0, tensor_bytes=0, runs=0)  # not measured for this job
    machine = machine_info(lm, bandwidth)
    print(json.dumps({"machine": machine, "model": lm.name, "store": rows}) if args.json else
          f"{lm.name} on {machine['device']} ({machine['cpu']}, {machine['cores']} cores, {machine['dtype']}, "
          f"torch {machine['torch']}), {machine['date']}\n" + format_store_table(rows))
    return 0


def run_from_args(args: argparse.Namespace, config: Config) -> int:
    """`python -m kvqa bench`: check the flags, load the model, run, print a table or JSON, maybe plot."""
    contexts = parse_contexts(args.contexts)
    if not 1 <= args.questions <= len(QUESTIONS):
        raise BenchError("bench.bad_questions", most=len(QUESTIONS), asked=args.questions)
    if args.plot:
        plot = Path(args.plot)
        if not plot.parent.is_dir():
            raise BenchError("bench.no_plot_folder", plot=plot, folder=plot.parent)
    if args.doc:
        document = load_document(args.doc, config=config)
        text, name = document.text, document.name
    else:
        if not SAMPLE_DOCUMENT.is_file():
            raise BenchError("bench.no_sample", path=SAMPLE_DOCUMENT)
        text, name = SAMPLE_DOCUMENT.read_text(encoding="utf-8"), SAMPLE_DOCUMENT.name
    if args.random_init:
        config_path(args.random_init)  # a bad path fails before anything is loaded
    forms = parse_weights(args.weights or config.weights)
    quotes = parse_quote_chars(args.quote_chars) if args.quote_chars else [config.decoding.quote_chars]
    say = (lambda message: None) if args.json else (lambda message: print(message, file=sys.stderr, flush=True))
    runs = []
    for form in forms:
        form_config = config.replaced(weights=form)
        say(f"loading {args.random_init + ' (random weights)' if args.random_init else config.model} "
            f"({form} weights) ...")
        lm = random_init_model(args.random_init, form_config) if args.random_init else load_model(form_config)
        say(f"loaded {lm.name} on {lm.device} ({str(lm.dtype).removeprefix('torch.')}, {lm.weights} weights, "
            f"{lm.weight_bytes / 2**20:,.0f} MiB) in {lm.load_s:.1f} s")
        if getattr(args, "store", False):
            return _store_bench(lm, text, name, contexts, args, config, say)  # with the first form only
        for chars in quotes:
            if len(quotes) > 1:
                say(f"quoted passages cut to {chars} characters ..." if chars else "quoted passages whole ...")
            runs.append(run_bench(lm, text, contexts=contexts, questions=QUESTIONS[: args.questions],
                                  config=form_config.replaced(quote_chars=chars), document_name=name,
                                  warm_up=chars == quotes[0], say=say))  # one warm-up per model loaded
    result = side_by_side(runs)
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        print(format_table(result))
    if args.plot:
        write_plot(result, args.plot)
        say(f"plot written to {args.plot}")
    return 0

