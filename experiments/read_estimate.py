"""How close the app's read estimate comes: read a document of about --short tokens, fit its cost from the read's
progress (kvqa.timing.ReadCost, as the app does), predict a read of about --long tokens, read it, and compare; then
the other way round (fit from the long read, predict the short one). Uses the default model (or KVQA_MODEL).

    .venv/bin/python experiments/read_estimate.py --short 2048 --long 7000
"""

from __future__ import annotations

import argparse
import os
import time
from pathlib import Path

import kvqa
from kvqa.timing import ReadCost

ASSETS = Path(__file__).resolve().parent.parent / "assets"


def document_of(engine, tokens: int, salt: str) -> kvqa.Document:
    """The sample's text repeated to about `tokens` tokens (salted, so no cache is shared between the reads)."""
    sample = (ASSETS / "declaration-of-independence.md").read_text()
    text = f"{salt}\n\n"
    while engine.count_tokens(text) < tokens:
        text += sample
    words = text.split(" ")
    while engine.count_tokens(" ".join(words)) > tokens:
        words = words[: int(len(words) * 0.98)]
    return kvqa.document_from_text(" ".join(words), name=f"{salt}.md")


def read(engine, document) -> tuple[float, ReadCost, int]:
    started, ticks = time.perf_counter(), []
    doc = engine.prefill(document, progress=lambda f: ticks.append((f, time.perf_counter() - started)))
    seconds = time.perf_counter() - started
    return seconds, ReadCost.fit([(f * doc.tokens, t) for f, t in ticks]), doc.tokens


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--short", type=int, default=2048)
    parser.add_argument("--long", type=int, default=7000)  # the default model reads 7,424 tokens with its reserve
    args = parser.parse_args(argv)
    config = kvqa.config.config_from_env(os.environ)
    engine = kvqa.make_engine(config)
    engine.load()
    engine.prefill(document_of(engine, 600, "warm-up"))  # the first read of a process pays for warming up
    short_s, short_cost, short_n = read(engine, document_of(engine, args.short, "short"))
    long_s, long_cost, long_n = read(engine, document_of(engine, args.long, "long"))
    for label, cost, rate, n, actual in (("short -> long", short_cost, short_s / short_n, long_n, long_s),
                                         ("long -> short", long_cost, long_s / long_n, short_n, short_s)):
        predicted, flat = cost.seconds(n), rate * n
        print(f"{label}: {n:,} tokens predicted {predicted:.2f} s ({(predicted - actual) / actual:+.0%}), "
              f"read in {actual:.2f} s; the first read's flat rate would say {flat:.2f} s "
              f"({(flat - actual) / actual:+.0%})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
