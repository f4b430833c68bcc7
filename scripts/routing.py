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
import json
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from kvqa.config import Config  # noqa: E402
from kvqa.documents.parts import plan, span_text, units  # noqa: E402
from kvqa.documents.reading import document_from_text  # noqa: E402
from kvqa.evidence.routing import also_matching, best_part, part_scores, passage_shares  # noqa: E402
from kvqa.evidence.sources import rank  # noqa: E402
from kvqa.prompt import system_text  # noqa: E402


def gold_offset(context: str, gold: str, labelled: int) -> int:
    """Where the gold answer lies: its occurrence nearest the labelled start (sets' starts are often off by a
    character or two; the first occurrence may be another mention of the same words), or -1."""
    found, at = [], context.find(gold)
    while at >= 0:
        found.append(at)
        at = context.find(gold, at + 1)
    return min(found, key=lambda a: abs(a - labelled), default=-1)


def long_documents(path: Path, count, min_tokens: int, max_docs: int, *,
                   single: bool = False) -> list[tuple[str, list[tuple[str, int, str]]]]:
    """(text, [(question, gold offset, gold), ...]) for documents of consecutive articles of at least min_tokens;
    single: each article alone, the ones of at least min_tokens (one long paper, not several)."""
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    docs, parts, asked, offset, tokens = [], [], [], 0, 0
    for article in data:
        head = f"## {article.get('title', '')}\n\n"
        offset += len(head)
        body = []
        for para in article["paragraphs"]:
            context = para["context"].strip("\n")
            lead = len(para["context"]) - len(para["context"].lstrip("\n"))
            for qa in para["qas"]:
                answers = [a for a in qa.get("answers", []) if a["text"].strip()]
                if answers and qa["question"].strip():
                    at = gold_offset(context, answers[0]["text"], answers[0].get("answer_start", 0) - lead)
                    if at >= 0:
                        asked.append((qa["question"].strip(), offset + at, answers[0]["text"]))
            body.append(context)
            offset += len(context) + 2
        text = head + "\n\n".join(body)
        parts.append(text)
        tokens += count(text)
        offset = sum(len(p) + 2 for p in parts)
        if tokens >= min_tokens:
            docs.append(("\n\n".join(parts), asked))
            if len(docs) == max_docs:
                break
        if tokens >= min_tokens or single:
            parts, asked, offset, tokens = [], [], 0, 0
    return docs


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

    from kvqa.model.loading import DEFAULT_MODEL

    config = Config()
    folder = args.tokenizer or Path(config.cache_dir) / f"{DEFAULT_MODEL}-f32"  # made by `make setup`
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
            shares = passage_shares(rank(document.text, question), document, parts)
            chosen = best_part(part_scores(shares, len(parts)))
            also = also_matching(shares, chosen)  # the other part the answer names, if any
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
