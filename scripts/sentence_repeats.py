#!/usr/bin/env python
"""What the sentence-repeat stop (kvqa.generation.repeats) would have done to answers already made: read evaluate.py
--json's
rows (their token ids), replay the stop on each answer as the decode loop reads it, and count the answers it ends,
the gold held before and after the cut, and the right answers it would cut. Greedy answers are the same up to the
cut, so this is exact for a run made without the stop. Loads the run's tokenizer only, no model.

    .venv/bin/python scripts/evaluate.py --squad covid.json --lang en --docs 40 --max-new-tokens 64 --json > en.json
    .venv/bin/python scripts/sentence_repeats.py en.json              # the counts, and each answer it ends
    .venv/bin/python scripts/sentence_repeats.py en.json --sweep      # also other thresholds, counts only
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from kvqa.bench.squad import gold_in


def replay(rows: list[dict], say, **options) -> list[dict]:
    """Each row the stop ends: its cut text, and whether the gold was in the answer before and after."""
    from kvqa.generation.repeats import sentence_cut

    cut = []
    for row in rows:
        found = sentence_cut(row["token_ids"], say, stop_reason=row["stop_reason"], **options)
        if found is not None:
            text = row["answer"][:found[1]]
            cut.append({**row, "cut": text, "kept_tokens": found[0],
                        "gold_after": gold_in(text, row["facts"]), "gold_before": row["gold_in_answer"]})
    return cut


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", type=Path, nargs="+", help="evaluate.py --json output (rows with token_ids)")
    parser.add_argument("--sweep", action="store_true", help="also count other n, share and least")
    args = parser.parse_args(argv)

    from transformers import AutoTokenizer

    import kvqa
    from kvqa.model.loading import model_source
    from kvqa.prompt import prompt_for

    for path in args.runs:
        run = json.loads(path.read_text(encoding="utf-8"))
        rows = run["rows"]
        tokenizer = AutoTokenizer.from_pretrained(model_source(run["settings"]["model"], kvqa.Config().cache_dir))
        strip = prompt_for(tokenizer).stops_at_line_end  # a completion prompt's answer is said without its lead

        def say(ids, tokenizer=tokenizer, strip=strip):
            text = tokenizer.decode(list(ids), skip_special_tokens=True)
            return text.lstrip() if strip else text

        cut = replay(rows, say)
        before = sum(r["gold_in_answer"] for r in rows)
        lost = [r for r in cut if r["gold_before"] and not r["gold_after"]]
        ended = ", ".join(f"{k} {sum(r['stop_reason'] == k for r in cut)}" for k in ("eos", "length", "repeating"))
        print(f"{path}: {run['settings']['model']}, {len(rows)} answers; the stop ends {len(cut)} ({ended} as they "
              f"ended); gold in answer {before} -> {before - len(lost)}; right answers cut: {len(lost)}")
        for r in cut:
            mark = "LOST" if r in lost else ("right" if r["gold_before"] else "wrong")
            print(f"  [{mark}] {r['doc']} {r['stop_reason']} {len(r['token_ids'])} -> {r['kept_tokens']} tokens; "
                  f"gold {r['facts'][0]!r}\n    before: {r['answer']!r}\n    after:  {r['cut']!r}")
        if args.sweep:
            for n in (2, 3):
                for share in (0.5, 0.6, 0.7, 0.8):
                    for least in (3, 4, 5, 6):
                        found = replay(rows, say, n=n, share=share, least=least)
                        lost_here = sum(r["gold_before"] and not r["gold_after"] for r in found)
                        print(f"  n={n} share={share} least={least}: ends {len(found)}, right answers cut {lost_here}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
