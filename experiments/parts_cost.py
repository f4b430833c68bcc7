"""What reading a long document in parts costs, against one read of the same document's tokens.

A long document is built from a public set in SQuAD's JSON layout (as scripts/routing.py builds them) and cut into
parts as kvqa cuts it for the model (Session.load: each part with its own prompt, neighbours sharing a paragraph).
Each part is read with the engine's prefill, then the whole document is read once as a single prefix of its tokens
(through the same prompt and chunked forward; longer than the model's context, so only for its time: its answers
would not be trusted past the context the model was trained on). The two are read in turns, --rounds times, and
the medians compared. One model process; the local engine, default model and settings.

    .venv/bin/python experiments/parts_cost.py --squad 200423_covidQA.json
"""

from __future__ import annotations

import argparse
import statistics
import time
from pathlib import Path

from kvqa.bench.squad import long_documents
from kvqa.config import Config
from kvqa.documents.parts import select
from kvqa.documents.reading import document_from_text
from kvqa.engines.local import LocalEngine
from kvqa.generation.generate import run_chunks
from kvqa.prompt import prompt_for
from kvqa.session.session import Session


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--squad", type=Path, required=True, help="a public set in SQuAD's JSON layout")
    parser.add_argument("--min-tokens", type=int, default=20_000, help="the long document's least tokens")
    parser.add_argument("--rounds", type=int, default=2, help="how many times each way is timed, in turns")
    args = parser.parse_args(argv)

    config = Config()
    engine = LocalEngine(config)
    info = engine.load()
    lm = engine.lm
    ((text, _),) = long_documents(args.squad, engine.count_tokens, args.min_tokens, 1)
    document = document_from_text(text, name=f"{args.squad.stem}-long")
    session = Session(engine)
    session.load(document)  # cuts it as the app does; reads part 1
    parts = list(session.parts)
    session.close()
    ids = prompt_for(lm.tokenizer).prefix_ids(text)
    print(f"{len(ids):,} tokens as one prefix; {len(parts)} parts of {[t for _, _, t in parts]} tokens "
          f"({sum(t for _, _, t in parts) / len(ids):.3f}x the tokens)", flush=True)

    def read_parts() -> float:
        return sum(engine.prefill(select(document, first, last)).prefill_s for first, last, _ in parts)

    def read_whole() -> float:
        cache = lm.new_cache(len(ids))
        started = time.perf_counter()
        run_chunks(lm, ids, cache, chunk_size=config.chunk_size)
        return time.perf_counter() - started

    rows = []
    for n in range(args.rounds):
        ways = [read_parts, read_whole] if n % 2 == 0 else [read_whole, read_parts]
        timed = {way.__name__: way() for way in ways}
        rows.append((timed["read_parts"], timed["read_whole"]))
        print(f"round {n + 1}: every part {rows[-1][0]:.2f} s, the whole at once {rows[-1][1]:.2f} s "
              f"({rows[-1][0] / rows[-1][1]:.3f}x)", flush=True)
    parts_s, whole_s = statistics.median(r[0] for r in rows), statistics.median(r[1] for r in rows)
    print(f"{info.model}, {info.dtype}, {info.device}: reading all {len(parts)} parts took {parts_s:.2f} s against "
          f"{whole_s:.2f} s for one read of the same {len(ids):,} tokens (median of {len(rows)}; "
          f"{parts_s / whole_s:.3f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
