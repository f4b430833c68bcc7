"""How soon a question on a long document's part that was read ahead starts answering, against the floor.

A long document is built from a public set in SQuAD's JSON layout (as scripts/routing.py builds them). A session of
the local engine with a disk store (a temporary folder) reads its first part, then reads the others ahead
(Session.read_ahead: each into the store, none kept in memory). Each question routed to another part is asked twice:
first with its part restored from the store (the restore's time, then the answer's first token), then again with
that part in memory: the floor for the same question on the same cache. One model process; greedy; the default
settings otherwise (the best passage quoted, so the TTFT includes its tokens).

    .venv/bin/python experiments/part_ttft.py --squad 200423_covidQA.json --questions 6
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
from pathlib import Path

from kvqa.bench.squad import long_documents
from kvqa.cache.store import KVStore
from kvqa.config import Config
from kvqa.documents.reading import document_from_text
from kvqa.engines.stored import StoredLocalEngine
from kvqa.session.session import Session


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--squad", type=Path, required=True, help="a public set in SQuAD's JSON layout")
    parser.add_argument("--min-tokens", type=int, default=20_000, help="the long document's least tokens")
    parser.add_argument("--questions", type=int, default=6, help="how many questions routed to other parts")
    parser.add_argument("--max-new-tokens", type=int, default=16)
    args = parser.parse_args(argv)

    config = Config.of(max_new_tokens=args.max_new_tokens)
    with tempfile.TemporaryDirectory() as folder:
        engine = StoredLocalEngine(config, store=KVStore(folder, 8 * 2**30))
        info = engine.load()
        ((text, asked),) = long_documents(args.squad, engine.count_tokens, args.min_tokens, 1)
        session = Session(engine)
        session.load(document_from_text(text, name=f"{args.squad.stem}-long"))
        print(f"{engine.count_tokens(text):,} tokens in {len(session.parts)} parts; part 1 read in "
              f"{session.prefilled.prefill_s:.2f} s", flush=True)
        read = session.read_ahead()
        print(f"read ahead: {read} parts into the store", flush=True)
        rows = []
        for question, _, _ in asked:
            if len(rows) == args.questions:
                break
            before = session.part_index
            restored = session.ask(question).answer
            if session.part_index == before or session.origin != "disk":
                continue  # routed to the part in memory: not a question on a part read ahead
            restore_s = session.ready_s
            again = session.ask(question).answer  # the same part, now in memory
            assert again.token_ids == restored.token_ids, "a restored part must answer as the part in memory does"
            rows.append((restore_s, restored.timings.ttft_s, again.timings.ttft_s))
            print(f"part {session.part_index + 1}: restore {restore_s:.3f} s, TTFT {restored.timings.ttft_s:.3f} s "
                  f"restored, {again.timings.ttft_s:.3f} s in memory ({restored.timings.question_tokens} question "
                  f"tokens)", flush=True)
    if not rows:
        print("no question was routed to a part read ahead")
        return 1
    ratio = statistics.median(r[1] / r[2] for r in rows)
    print(f"{info.model}, {info.dtype}, {len(rows)} questions: restore {statistics.median(r[0] for r in rows):.3f} s, "
          f"TTFT on the restored part {statistics.median(r[1] for r in rows):.3f} s against "
          f"{statistics.median(r[2] for r in rows):.3f} s with it in memory (median ratio {ratio:.2f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
