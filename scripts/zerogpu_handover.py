#!/usr/bin/env python
"""What handing an answer's GPU function the prefilled cache costs on ZeroGPU, measured on this machine's CPU:
pickling the cache across the process boundary against handing it the store's key (it reads the file itself).

Per context length: the default model (or KVQA_MODEL, KVQA_DTYPE) prefills a document cut from the sample to that
many tokens, and its cache is written to a temporary store. Then, per question and median of --repeats, each way is
timed from this side's pickle.dumps of the GPU function's arguments to a cache ready on the GPU process's device
(here the CPU: the copy to a GPU is not in these figures), with the bytes that cross:

- pickle: dumps + loads of (document with its cache, question, settings...), what kvqa.engines.zerogpu hands an
  answer without a store ("before": with the tokenizer too, as it did until 2026-11-30);
- key: dumps + loads of the same with a StoredDocument instead, then StoredDocument.load (the store's checks, SHA-256
  included, and the copy into a cache with its reserve); "cold" first drops the file from the page cache.

    .venv/bin/python scripts/zerogpu_handover.py --contexts 1024,4096,7000 --repeats 5
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import platform
import statistics
import sys
import tempfile
import time

import torch

from kvqa.bench.run import SAMPLE_DOCUMENT, cut_document, long_text, parse_contexts
from kvqa.bench.store import drop_from_page_cache
from kvqa.cache.restore import cache_key
from kvqa.cache.store import KVStore, weights_fingerprint
from kvqa.config import config_from_env
from kvqa.engines.zerogpu import StoredDocument, without_tokenizer
from kvqa.generation.generate import prefill
from kvqa.model.loading import load_model
from kvqa.prompt import prompt_for

QUESTION = "What do the signers pledge to each other?"


def crossing(source, config) -> tuple[int, object, float]:
    """(bytes, what arrives, seconds) for the answer function's arguments crossing by pickle, as spaces sends them."""
    started = time.perf_counter()
    data = pickle.dumps(((source, QUESTION, config, None, ()), {}), protocol=pickle.HIGHEST_PROTOCOL)
    (arrived, *_), _ = pickle.loads(data)
    return len(data), arrived, time.perf_counter() - started


def same_cache(a, b) -> bool:
    return all(torch.equal(x, y) for pa, pb in zip(a.cache.tensors(), b.cache.tensors(), strict=True)
               for x, y in zip(pa, pb))


def measure(lm, document, config, store: KVStore, repeats: int) -> dict:
    doc = prefill(lm, document, config=config)
    key = cache_key(lm, document, weights=weights_fingerprint(lm.model))
    assert store.put(key, doc.ids, doc.prompt.date_string, doc.cache.tensors()).result(), "the file was not written"
    before, pickled, keyed, cold, sent = [], [], [], [], {}
    for _ in range(repeats):
        sent["before"], _, seconds = crossing(doc, config)
        before.append(seconds)
        sent["pickle"], arrived, seconds = crossing(without_tokenizer(doc), config)
        pickled.append(seconds)
        for times in (cold, keyed):
            dropped = times is not cold or drop_from_page_cache(store.path(key))
            sent["key"], handle, seconds = crossing(StoredDocument.of(doc, store, key), config)
            started = time.perf_counter()
            loaded = handle.load(lm)
            if dropped:
                times.append(seconds + time.perf_counter() - started)
    assert loaded is not None and same_cache(doc, loaded) and same_cache(doc, arrived), "a cache came back different"
    return {"context_tokens": doc.tokens, "cache_bytes": doc.cache_bytes, "file_bytes": store.path(key).stat().st_size,
            "before_bytes": sent["before"], "pickle_bytes": sent["pickle"], "key_bytes": sent["key"],
            "before_s": statistics.median(before), "pickle_s": statistics.median(pickled),
            "key_s": statistics.median(keyed), "key_cold_s": statistics.median(cold) if cold else None,
            "repeats": repeats}


def table(rows: list[dict]) -> str:
    lines = ["| context | cache in memory | crosses: pickle (before) | crosses: key | pickle, before | pickle | "
             "key (read, check, rebuild) | key, cold file |", "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        cold = f"{r['key_cold_s']:.2f} s" if r["key_cold_s"] is not None else "-"
        lines.append(f"| {r['context_tokens']:,} tokens | {r['cache_bytes'] / 2**20:.0f} MiB | "
                     f"{r['pickle_bytes'] / 2**20:.0f} MiB ({r['before_bytes'] / 2**20:.0f} MiB) | "
                     f"{r['key_bytes'] / 2**10:.0f} KiB | {r['before_s']:.2f} s | {r['pickle_s']:.2f} s | "
                     f"{r['key_s']:.2f} s | {cold} |")
    return "\n".join(lines)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--contexts", default="1024,4096,7000", help="context lengths in tokens")
    parser.add_argument("--repeats", type=int, default=5, help="timings per way and context (the median is shown)")
    parser.add_argument("--json", action="store_true", help="print the rows as JSON")
    args = parser.parse_args()
    config = config_from_env(os.environ)
    lm = load_model(config)
    prompt = prompt_for(lm.tokenizer)
    contexts = sorted(parse_contexts(args.contexts))
    text = long_text(SAMPLE_DOCUMENT.read_text(encoding="utf-8"), lm.tokenizer, max(contexts) + 64)
    text_ids = lm.tokenizer(text, add_special_tokens=False)["input_ids"]
    rows = []
    with tempfile.TemporaryDirectory(prefix="kvqa-handover-") as folder:
        store = KVStore(folder, 2**40)
        for n in contexts:
            print(f"{n:,} tokens ...", file=sys.stderr, flush=True)
            document, _ = cut_document(prompt, text_ids, n, name=SAMPLE_DOCUMENT.name)
            rows.append(measure(lm, document, config, store, args.repeats))
    print(f"{lm.name} ({str(lm.dtype).removeprefix('torch.')}) on {platform.processor() or platform.machine()}, "
          f"{os.cpu_count()} cores, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}", file=sys.stderr)
    print(json.dumps(rows) if args.json else table(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
