"""How often a question is routed to the part of a long document that holds its answer.

Long documents are built from a public set in SQuAD's JSON layout (consecutive articles, each under its title,
until a document has --min-tokens); each is cut into parts as kvqa cuts it for the model's context
(kvqa.documents.parts.units/plan with the default model's tokenizer), and every question whose gold answer lies in the
document is routed with kvqa.evidence.routing.route. A question is routed right when the chosen part holds the gold
answer's
position. When another part matches the question too (kvqa.evidence.routing.also_matching), the answer names it; how
often, and
how often the part routed to or the one named holds the answer, is printed too. No model runs: only the tokenizer.

    .venv/bin/python scripts/routing.py --squad 200423_covidQA.json --lang en
    .venv/bin/python scripts/routing.py --squad cmrc2018_trial.json --lang zh --min-tokens 20000
"""

from __future__ import annotations

import argparse
import statistics
from pathlib import Path

from kvqa.bench.squad import long_documents
from kvqa.config import Config
from kvqa.documents.parts import plan, span_text, units
from kvqa.documents.reading import document_from_text
from kvqa.evidence.evidence import Evidence
from kvqa.prompt import system_text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--squad", type=Path, required=True, help="a public set in SQuAD's JSON layout")
    parser.add_argument("--lang", default="en", help="its language (a label for the report)")
    parser.add_argument("--min-tokens", type=int, default=20_000, help="a long document's least tokens")
    parser.add_argument("--docs", type=int, default=5, help="how many long documents")
    parser.add_argument("--single", action="store_true",
                        help="each article alone (those of at least --min-tokens), not several joined")
    parser.add_argument("--context", type=int, default=8192, help="the model's context in tokens")
    parser.add_argument("--tokenizer", default=None, help="a tokenizer folder (default: the default model's)")
    args = parser.parse_args(argv)

    from transformers import AutoTokenizer

    from kvqa.model.loading import default_model_dir

    config = Config()
    folder = args.tokenizer or default_model_dir(config.cache_dir)  # the default model's float32 copy
    tokenizer = AutoTokenizer.from_pretrained(folder)

    def count(text: str) -> int:
        return len(tokenizer(text, add_special_tokens=False)["input_ids"])

    prompt = count(system_text(""))  # what every read adds around its text: instructions, template
    room = args.context - config.limits.reserve_tokens - prompt - 32
    rows = []
    for n, (text, asked) in enumerate(long_documents(args.squad, count, args.min_tokens, args.docs,
                                                                 single=args.single), start=1):
        document = document_from_text(text, name=f"{args.squad.stem}-long-{n}")
        assert document.text == text, "the document's text must keep the gold offsets"
        assert all(text[at: at + len(gold)] == gold for _, at, gold in asked)
        spans = units(document, 1, len(text))
        parts = plan(spans, [count(span_text(document, s)) for s in spans], room)
        right = named = covered = 0
        for question, at, _ in asked:
            routed = Evidence.of(document, question, parts).route()
            chosen, also = routed.target, routed.also  # also: the other part the answer names, if any
            holds = {i for i, (first, last, _) in enumerate(parts) if first <= at + 1 <= last}
            right += chosen in holds
            named += also is not None
            covered += chosen in holds or also in holds
        # every part read once, each with its own prompt, against one read of the document's tokens and one prompt
        read = sum(tokens + prompt for _, _, tokens in parts) / (count(text) + prompt)
        rows.append({"doc": document.name, "tokens": count(text), "parts": len(parts), "questions": len(asked),
                     "routed_right": right, "named": named, "covered": covered, "read_ratio": read})
        print(f"{document.name}: {rows[-1]['tokens']:,} tokens, {len(parts)} parts ({read:.3f}x the tokens of one "
              f"read), {right}/{len(asked)} questions routed to the part holding the answer", flush=True)
    total = sum(r["questions"] for r in rows)
    right = sum(r["routed_right"] for r in rows)
    named, covered = sum(r["named"] for r in rows), sum(r["covered"] for r in rows)
    print(f"{args.lang}: {len(rows)} documents of {statistics.median(r['tokens'] for r in rows):,.0f} tokens (median), "
          f"{right}/{total} = {right / max(total, 1):.1%} routed right; another part named as matching too for "
          f"{named / max(total, 1):.1%}, and the part routed to or the one named holds the answer for "
          f"{covered / max(total, 1):.1%}; reading every part costs "
          f"{statistics.median(r['read_ratio'] for r in rows):.3f}x the tokens of one read (median; max "
          f"{max(r['read_ratio'] for r in rows):.3f}x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
