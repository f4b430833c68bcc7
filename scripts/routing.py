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

--answer N also answers N questions of each document, evenly spread, as the app does (the default model with a
temporary disk store, every part read ahead before the first question, so that a question's passages can be composed
from every part: kvqa.session.gather), and reports how often the gold answer (its position, or its text) lies in what
the answer was read from (the part, or the composed cache's runs), in the passage quoted to it, in its first source,
and in the answer itself; how many answers were composed, and their median TTFT and composing time:

    .venv/bin/python scripts/routing.py --squad xquad.en.json --docs 2 --answer 40 [--gather-tokens 4096]
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
    parser.add_argument("--answer", type=int, default=0, metavar="N",
                        help="also answer N questions of each document with the default model (see above)")
    parser.add_argument("--gather-tokens", type=int, default=0,
                        help="with --answer: compose each question's passages of every part into one cache of about "
                             "this many tokens (kvqa.session.gather; default 0, off, as kvqa ships)")
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
    rows, answered = [], []
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
        if args.answer:
            answered += answers(document, asked[:: max(1, len(asked) // args.answer)][: args.answer],
                                gather_tokens=args.gather_tokens)
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
    if answered:
        n = len(answered)
        share = lambda key: sum(r[key] for r in answered) / n  # noqa: E731
        composed = [r for r in answered if r["composed"]]
        print(f"{args.lang}: {n} questions answered: the gold in what the answer read (part or composed runs) "
              f"{share('in_read'):.1%}, in it or the passage quoted {share('read_or_quote'):.1%}, in the first "
              f"source {share('first_source'):.1%}, in the answer {share('correct'):.1%}; composed {len(composed)} "
              f"(median TTFT {statistics.median(r['ttft_s'] for r in answered):.2f} s; composing "
              f"{statistics.median([r['composed_s'] for r in composed] or [0.0]):.2f} s)")
    return 0


def answers(document, asked: list[tuple[str, int, str]], *, gather_tokens: int = 0) -> list[dict]:
    """Each question answered as the app answers it (see the module), with where its gold answer reached."""
    import tempfile

    from kvqa.bench.squad import gold_in
    from kvqa.cache.store import store_for
    from kvqa.engines import make_engine
    from kvqa.session.session import Session

    with tempfile.TemporaryDirectory(prefix="kvqa-routing-store-") as folder:
        config = Config().replaced(store_dir=Path(folder), gather_tokens=gather_tokens)
        engine = make_engine(config, store=store_for(config))
        session = Session(engine)
        session.load(document)
        session.read_ahead()
        rows = []
        for question, at, gold in asked:
            answer = session.ask(question).answer
            turn = session.turns[-1]
            if turn.composed is not None:
                in_read = any(a <= at and at + len(gold) <= b for a, b, _ in turn.composed.held)
            else:
                start, end = session.document.span
                in_read = start <= at and at + len(gold) <= end
            quoted = gold_in(" ".join(answer.quoted), [gold])
            first = answer.sources[0] if answer.sources else None
            rows.append({"in_read": in_read, "read_or_quote": in_read or quoted,
                         "first_source": first is not None and first.start <= at < first.end,
                         "correct": gold_in(answer.text, [gold]), "composed": turn.composed is not None,
                         "ttft_s": answer.timings.ttft_s,
                         "composed_s": turn.composed.seconds if turn.composed else 0.0})
            print(f"  {'c' if rows[-1]['composed'] else 'p'} read {'y' if in_read else 'n'} quote "
                  f"{'y' if quoted else 'n'} first {'y' if rows[-1]['first_source'] else 'n'} ok "
                  f"{'y' if rows[-1]['correct'] else 'n'}  {question[:60]}", flush=True)
        return rows


if __name__ == "__main__":
    raise SystemExit(main())
