"""The GPU check: Llama-3.2-3B's shapes with random weights, in bfloat16, at 8,192 and 32,768 tokens.

Reports, per context: prefill tokens/s; time to first token against its floor (a bare forward of the question on the
prefilled cache); decode tokens/s against the bandwidth floor ((weights + keys/values) / measured read bandwidth),
eager and with the compiled decode step (torch.compile "reduce-overhead": CUDA graphs); the compile and graph
capture time; and exactness: cached answers against a recompute of the whole prompt in the same chunks, token for
token, with the document's cache bit-identical afterwards, in the same precision.

    scripts/gpu_check.sh                                  # on a GPU: python3 with kvqa on PYTHONPATH, --out $OUT
    .venv/bin/python scripts/gpu_check.py --smoke         # a tiny model on the CPU: checks the script itself

Needs kvqa's dependencies except Gradio, and a tokenizer folder (--tokenizer; default: the default model's).
Prints a summary and writes gpu_check.json to --out.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import tempfile
import time
from pathlib import Path

import torch

import kvqa
from kvqa.bench.memory import read_bandwidth
from kvqa.bench.models import random_init_model
from kvqa.bench.run import QUESTIONS, SAMPLE_DOCUMENT, cut_document, long_text, machine_info, run_bench
from kvqa.bench.store import format_store_table, run_store_bench
from kvqa.model.loading import compiled_decode_step
from kvqa.prompt import prompt_for

TINY = {"model_type": "llama", "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 49152, "max_position_embeddings": 4096,
        "tie_word_embeddings": True}


def exactness(lm: kvqa.LoadedModel, text: str, contexts: list[int], questions: list[str],
              config: kvqa.Config) -> list[dict]:
    """Per context: do cached answers equal the same-chunks recompute token for token, and is the cache unchanged?"""
    prompt = prompt_for(lm.tokenizer)
    ids = lm.tokenizer(text, add_special_tokens=False)["input_ids"]
    rows = []
    for n in contexts:
        document, _ = cut_document(prompt, ids, n, name="document")
        doc = kvqa.prefill(lm, document, config=config)
        before = [(k.clone(), v.clone()) for k, v in doc.cache.tensors()]
        same = []
        for question in questions:
            cached = kvqa.answer(lm, doc, question)
            whole = kvqa.answer_without_cache(lm, document, question, config=config, prompt=doc.prompt,
                                              same_schedule=True)
            same.append(cached.token_ids == whole.token_ids)
        unchanged = doc.cache.length == doc.tokens and all(
            torch.equal(k, k0) and torch.equal(v, v0) for (k, v), (k0, v0) in zip(doc.cache.tensors(), before))
        rows.append({"context_tokens": doc.tokens, "same_answers": all(same), "cache_unchanged": unchanged})
        del doc, before
        torch.cuda.empty_cache() if lm.device.type == "cuda" else None
    return rows


def rerank_cost(lm: kvqa.LoadedModel, text: str, question: str, *, passages: int = 5) -> float:
    """Median seconds of kvqa.generation.rerank's scoring of `passages` of the document's passages (about 320
    characters each)
    for a question: the price per question of Config.decoding.rerank_passages on this machine."""
    from kvqa.evidence.sources import passages as cut
    from kvqa.generation.rerank import question_likelihood

    chosen = [text[a:b] for a, b in cut(text)[:passages]]
    times = []
    for _ in range(6):  # the first one warms up
        started = time.perf_counter()
        question_likelihood(lm, chosen, question)
        if lm.device.type == "cuda":
            torch.cuda.synchronize()
        times.append(time.perf_counter() - started)
    return sorted(times[1:])[len(times[1:]) // 2]


def summary_lines(result: dict) -> list[str]:
    out = [f"{result['model']} on {result['machine']['gpu'] or result['machine']['cpu']}, "
           f"{result['machine']['dtype']}, torch {result['machine']['torch']}, transformers "
           f"{result['machine']['transformers']}, {result['machine']['date']}",
           f"memory read bandwidth {result['machine']['bandwidth_gb_s']:,.0f} GB/s"]
    for mode in ("eager", "compiled"):
        run = result[mode]
        out.append(f"{mode}: warm-up {', '.join(f'{k} {v:.1f} s' for k, v in run['warm_up_s'].items())}"
                   + (" (compile and graph capture included)" if mode == "compiled" else ""))
        for r in run["results"]:
            floor = r["decode_floor_s"]
            out.append(
                f"  {r['context_tokens']:>6,} tokens: prefill {r['prefill_tokens_per_s']:,.0f} tok/s; TTFT "
                f"{r['ttft_s'] * 1000:,.1f} ms (floor {r['floor_ttft_s'] * 1000:,.1f} ms, "
                f"{r['ttft_over_floor']:.2f}x); "
                f"decode {r['decode_tokens_per_s']:,.1f} tok/s, step {1000 / r['decode_tokens_per_s']:,.2f} ms vs "
                f"floor {floor * 1000:,.2f} ms ({100 * floor * r['decode_tokens_per_s']:.0f}% of the bandwidth bound)")
    if result.get("rerank_s") is not None:
        out.append(f"reranking 5 passages by question likelihood (Config.decoding.rerank_passages): "
                   f"{result['rerank_s'] * 1000:,.1f} ms per question (median of 5)")
    for r in result["exactness"]:
        out.append(f"exactness at {r['context_tokens']:,} tokens (compiled step, same chunks): answers "
                   f"{'identical' if r['same_answers'] else 'DIFFERENT'}, cache "
                   f"{'bit-identical' if r['cache_unchanged'] else 'CHANGED'}")
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", default="llama-3.2-3b", help="model config (a name in kvqa/model/configs, "
                        "or a path)")
    parser.add_argument("--contexts", default="8192,32768")
    parser.add_argument("--dtype", default="bfloat16")
    parser.add_argument("--device", default="auto")
    parser.add_argument("--tokenizer", help="a tokenizer folder (default: the default model's)")
    parser.add_argument("--questions", type=int, default=2)
    parser.add_argument("--max-new-tokens", type=int, default=64)
    parser.add_argument("--out", help="folder for gpu_check.json")
    parser.add_argument("--smoke", action="store_true", help="a tiny model on the CPU, small contexts")
    args = parser.parse_args(argv)
    config_path = args.config
    if args.smoke:
        config_path = str(Path(tempfile.mkdtemp()) / "tiny.json")
        Path(config_path).write_text(json.dumps(TINY))
        args.contexts, args.dtype, args.device, args.max_new_tokens = "200,400", "float32", "cpu", 6
    contexts = [int(c) for c in args.contexts.split(",")]
    config = kvqa.Config.of(model=args.tokenizer or kvqa.Config().model, device=args.device, dtype=args.dtype,
                         max_new_tokens=args.max_new_tokens, repeat_stop=0)
    say = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    started = time.perf_counter()
    lm = random_init_model(config_path, config)
    say(f"loaded {lm.name} on {lm.device} ({lm.dtype}) in {time.perf_counter() - started:.1f} s")
    text = long_text(SAMPLE_DOCUMENT.read_text(encoding="utf-8"), lm.tokenizer, max(contexts) + 64)
    questions = list(QUESTIONS[: args.questions])
    runs = {}
    for mode in ("eager", "compiled"):
        say(f"{mode} decode ...")
        if mode == "compiled":
            lm = dataclasses.replace(lm, decode_step=compiled_decode_step(lm.model, lm.device))
        runs[mode] = run_bench(lm, text, contexts=contexts, questions=questions, config=config, methods=("kvqa",),
                               say=say)
    say("reranking cost ...")
    rerank_s = rerank_cost(lm, text, questions[0])
    say("exactness (compiled step) ...")
    checked = exactness(lm, text, contexts, questions, config)
    say("restoring from the disk store against reading again ...")  # what a long document's parts choose between
    text_ids = lm.tokenizer(text, add_special_tokens=False)["input_ids"]
    prompt = prompt_for(lm.tokenizer)
    store_contexts = (200, 400) if args.smoke else (2048, 8192)
    store = run_store_bench(lm, [cut_document(prompt, text_ids, n, name="gpu-check") for n in store_contexts],
                            questions=questions[:1], config=config, say=say)
    result = {"model": lm.name, "machine": machine_info(lm, read_bandwidth(lm.device)), **runs,
              "rerank_s": rerank_s, "exactness": checked, "store": store}
    print("\n".join(summary_lines(result)))
    print(format_store_table(store))
    if args.out:
        Path(args.out).mkdir(parents=True, exist_ok=True)
        (Path(args.out) / "gpu_check.json").write_text(json.dumps(result, indent=1, ensure_ascii=False))
    return 0 if all(r["same_answers"] and r["cache_unchanged"] for r in result["exactness"]) and all(
        r["same_answers"] and r["same_cache"] for r in store) else 1


if __name__ == "__main__":
    sys.exit(main())
