"""The int8 cache against the model's own cache form (docs/performance.md, "The int8 cache"): one model loaded both
ways, the sample document COPIES times over read once by each, then two questions asked alternately on both, ROUNDS
times (the order flipped each round); the medians of the first token and the decode step, and each form's read.

    .venv/bin/python experiments/kv_cache_speed.py Qwen2.5-Coder-1.5B-Instruct --copies 4 --rounds 4
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

import kvqa
from kvqa.config import Config

SAMPLE = Path(__file__).resolve().parent.parent / "assets" / "declaration-of-independence.md"
QUESTIONS = ("Who is the Declaration addressed to?", "What does it say about the King of Great Britain?")
FORMS = ("model", "int8")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model")
    parser.add_argument("--copies", type=int, default=4, help="the sample this many times over")
    parser.add_argument("--rounds", type=int, default=4, help="each question asked this many times on each form")
    args = parser.parse_args()
    document = kvqa.document_from_text("\n\n".join([SAMPLE.read_text()] * args.copies))
    lms, docs = {}, {}
    for form in FORMS:
        config = Config.of(model=args.model, kv_cache=form)
        lms[form] = kvqa.load_model(config)
        started = time.perf_counter()
        docs[form] = kvqa.prefill(lms[form], document, config=config)
        print(json.dumps(dict(form=form, cache=str(lms[form].kv_dtype), tokens=docs[form].tokens,
                              read_s=round(time.perf_counter() - started, 1),
                              cache_mib=round(docs[form].cache.nbytes / 2**20, 1))), flush=True)
    ttft, step = {form: [] for form in FORMS}, {form: [] for form in FORMS}
    for round_ in range(args.rounds):
        for question in QUESTIONS:
            for form in FORMS if round_ % 2 == 0 else FORMS[::-1]:
                answer = kvqa.answer(lms[form], docs[form], question, max_new_tokens=24, repeat_stop=0)
                ttft[form].append(answer.timings.ttft_s)
                step[form].append(1000 * answer.timings.single_step_s)
    for form in FORMS:
        print(json.dumps(dict(form=form, ttft_median_s=round(statistics.median(ttft[form]), 3),
                              step_median_ms=round(statistics.median(step[form]), 1),
                              ttft_s=[round(t, 3) for t in ttft[form]], step_ms=[round(s, 1) for s in step[form]])),
              flush=True)


if __name__ == "__main__":
    main()
