"""The offline Qwen models' speed on this CPU, and llama.cpp's server on the same GGUF beside them, in one run
(docs/performance.md, "Qwen2.5-Coder-1.5B-Instruct"). kvqa: the sample document once and twice over (about 1.7k and
3.3k tokens), read once, two questions with and without drafting, 48 new tokens; the decode step beside its floor
(the weights and the cache over the memory read bandwidth measured here). llama.cpp (with --llama-server and --gguf):
the same document in the same chat prompt read into its prompt cache, then the two questions on it, its own timings.

    .venv/bin/python experiments/qwen_speed.py Qwen2.5-Coder-1.5B-Instruct [Qwen2.5-Coder-0.5B-Instruct]
    .venv/bin/python experiments/qwen_speed.py Qwen2.5-Coder-1.5B-Instruct --llama-server build/bin/llama-server \\
        --gguf qwen2.5-coder-1.5b-instruct.gguf    # kvqa.model.offline.assemble(QWEN_15B, folder) writes the GGUF
"""

from __future__ import annotations

import argparse
import json
import subprocess
import time
from pathlib import Path

import httpx
import torch

import kvqa
from kvqa.config import Config
from kvqa.model.loading import model_source
from kvqa.model.weights import decode_bytes
from kvqa.prompt import system_text

SAMPLE = Path(__file__).resolve().parent.parent / "assets" / "declaration-of-independence.md"
QUESTIONS = ("Who is the Declaration addressed to?", "What does it say about the King of Great Britain?")


def bandwidth() -> float:
    """Bytes a second that summing 1 GiB of float32 reads here."""
    x = torch.ones(256 * 2**20)
    x.sum()
    started = time.perf_counter()
    x.sum()
    return 2**30 / (time.perf_counter() - started)


def kvqa_rows(name: str, read_bandwidth: float) -> None:
    lm = kvqa.load_model(Config.of(model=name))
    print(f"# {name}: {lm.weights}, {lm.weight_bytes / 2**20:,.0f} MiB, cache {lm.kv_dtype}, "
          f"loaded in {lm.load_s:.1f} s")
    for copies in (1, 2):
        document = kvqa.document_from_text("\n\n".join([SAMPLE.read_text()] * copies))
        started = time.perf_counter()
        doc = kvqa.prefill(lm, document, config=Config.of(model=name))
        seconds = time.perf_counter() - started
        row = dict(engine="kvqa", model=name, tokens=doc.tokens, first_read_tps=round(doc.tokens / seconds, 1),
                   floor_ms=round((decode_bytes(lm.model) + doc.cache_bytes) / read_bandwidth * 1000, 1))
        for draft in (6, 0):
            answers = [kvqa.answer(lm, doc, q, max_new_tokens=48, repeat_stop=0, draft_tokens=draft) for q in QUESTIONS]
            row[f"draft{draft}"] = dict(ttft_s=[round(a.timings.ttft_s, 2) for a in answers],
                                        decode_tps=[round(a.timings.decode_tokens_per_s, 1) for a in answers],
                                        step_ms=[round(1000 * a.timings.single_step_s, 1) for a in answers])
        print(json.dumps(row), flush=True)


def llama_rows(name: str, server: str, gguf: str, port: int = 8089) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_source(name, Config().cache_dir))
    command = [server, "-m", gguf, "-t", "2", "-tb", "2", "-c", "8192", "--port", str(port), "-np", "1"]
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(120):
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(1)
        for copies in (1, 2):
            text = "\n\n".join([SAMPLE.read_text()] * copies)

            def prompt(question: str) -> str:
                messages = [{"role": "system", "content": system_text(text)}, {"role": "user", "content": question}]
                return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

            head = prompt("x")[: prompt("x").index("<|im_start|>user")]
            timings = httpx.post(f"{url}/completion", json={"prompt": head, "n_predict": 0, "cache_prompt": True},
                                 timeout=900).json()["timings"]
            row = dict(engine="llama.cpp", tokens_read=timings["prompt_n"],
                       first_read_tps=round(timings["prompt_per_second"], 1), turns=[])
            for question in QUESTIONS:
                t = httpx.post(f"{url}/completion", json={"prompt": prompt(question), "n_predict": 48,
                                                          "cache_prompt": True, "temperature": 0},
                               timeout=900).json()["timings"]
                row["turns"].append(dict(prompt_n=t["prompt_n"], ttft_s=round(t["prompt_ms"] / 1000, 2),
                                         decode_tps=round(t["predicted_per_second"], 1),
                                         step_ms=round(t["predicted_ms"] / max(t["predicted_n"], 1), 1)))
            print(json.dumps(row), flush=True)
    finally:
        process.terminate()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help="offline models, e.g. Qwen2.5-Coder-1.5B-Instruct")
    parser.add_argument("--llama-server", help="a llama-server binary (built natively) to run beside the first model")
    parser.add_argument("--gguf", help="the first model's GGUF for llama-server")
    args = parser.parse_args()
    read_bandwidth = bandwidth()
    print(f"# memory read bandwidth {read_bandwidth / 1e9:.1f} GB/s")
    if args.llama_server and args.gguf:
        llama_rows(args.models[0], args.llama_server, args.gguf)
    for name in args.models:
        kvqa_rows(name, read_bandwidth)


if __name__ == "__main__":
    main()
