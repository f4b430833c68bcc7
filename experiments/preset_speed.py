#!/usr/bin/env python
"""How fast each preset reads and answers on this machine: its real architecture with random weights (speed does not
depend on the weights' values), through kvqa's engine in float32 on the CPU (or --dtype).

    .venv/bin/python experiments/preset_speed.py --tokens 2048 qwen2.5-0.5b smollm2-360m

Per preset: prefill tokens/s, the first token after a 16-token question on the cached document (TTFT), and decode
tokens/s over 32 new tokens (greedy, no drafting, no end-of-answer token: random weights would stop anywhere).
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import replace


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("configs", nargs="+", help="names in kvqa/model/configs (e.g. qwen2.5-0.5b)")
    parser.add_argument("--tokens", type=int, default=2048, help="the document's length in tokens")
    parser.add_argument("--dtype", default="auto")
    args = parser.parse_args(argv)

    import kvqa
    from kvqa.bench.models import random_init_model

    config = kvqa.Config.of(dtype=args.dtype, max_new_tokens=32, repeat_stop=0, draft_tokens=0, quote_passages=0)
    for name in args.configs:
        lm = random_init_model(name, config)
        lm = replace(lm, eos_ids=frozenset())
        words = " ".join(f"word{i % 997}" for i in range(args.tokens * 2))
        ids = lm.tokenizer(words, add_special_tokens=False)["input_ids"][: args.tokens]
        document = kvqa.document_from_text(lm.tokenizer.decode(ids))
        engine = kvqa.LocalEngine(config, lm=lm)
        doc = engine.prefill(document)
        question = "What does the document say about word12 and word40?"
        answers = [kvqa.ask(engine, doc, question).answer for _ in range(2)]
        t = answers[-1].timings
        row = {"config": name, "dtype": str(lm.dtype).removeprefix("torch."), "tokens": doc.tokens,
               "prefill_tokens_per_s": round(doc.tokens_per_s, 1), "ttft_s": round(t.ttft_s, 3),
               "decode_tokens_per_s": round(t.decode_tokens_per_s, 2), "new_tokens": t.new_tokens}
        print(json.dumps(row), flush=True)
        del engine, doc, lm
    return 0


if __name__ == "__main__":
    sys.exit(main())
