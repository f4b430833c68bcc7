#!/usr/bin/env python
"""Score the default model on the labelled evaluation set in tests/data/eval (questions.jsonl and its documents).

Each document is prefilled once; each of its questions is answered from that cache. An answer is *correct* when it
contains one of the question's facts (see fact_in), and *looping* when its tokens repeat (see is_looping).

    .venv/bin/python scripts/evaluate.py                       # the whole set, a table row per question, a summary
    .venv/bin/python scripts/evaluate.py --limit 3 --threads 1   # a quick check
    .venv/bin/python scripts/evaluate.py --json                  # one JSON object: settings, rows, summary
    .venv/bin/python scripts/evaluate.py --squad covid-qa.json --lang en --squad cmrc2018_trial.json --lang zh

--squad reads public reading-comprehension data in SQuAD's JSON layout (SQuAD, CMRC 2018, DRCD, COVID-QA): whole
articles, or several short ones under their titles, become documents of min..max characters, and up to --per-doc
questions each, spread over the document (kvqa.bench.squad.load_squad; docs/quality.md says which files and why).

Reported for the whole set, per language (zh when the question has CJK characters, else en) and per document:
share correct, share looping, mean and median answer time, mean new tokens, the stop reasons, and, when kvqa's
Answer has `sources`, the share of answers whose first source's text contains a fact ("sources: n/a" otherwise).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import sys
import unicodedata
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvqa.bench.squad import Question, exact_match, gold_in, language, load_squad, token_f1

ROOT = Path(__file__).resolve().parent.parent
QUESTIONS = ROOT / "tests" / "data" / "eval" / "questions.jsonl"

LOOP_MIN_SPAN = 4  # tokens in the repeated span
LOOP_COPIES = 3  # copies of it, back to back

if TYPE_CHECKING:
    import kvqa


@dataclass(frozen=True)
class Reply:
    """What the scoring needs from one answer, whatever API produced it."""

    text: str
    token_ids: tuple[int, ...]
    stop_reason: str
    answer_s: float
    new_tokens: int
    sources: list[tuple[str, int | None, str]] | None  # (text, page, the answer's words found in it) of each source;
    #                                                      None when the API gives none
    decode_tokens_per_s: float = 0.0
    drafted_per_step: float = 0.0
    ttft_s: float = 0.0
    unsupported: tuple[str, ...] | None = None  # the answer's figures and names the document lacks
    unquoted: tuple[str, ...] | None = None  # its figures the document has but not the passage quoted to the model
    question_tokens: int = 0  # the question's turn, its quote included: what its first token waits for
    short: str = ""  # the answer's shortest phrase (kvqa.evidence.short), shown first; "" when none stands out


def answer_question(engine: kvqa.Engine, prefilled: kvqa.PrefilledDocument, question: str, *,
                    max_new_tokens: int) -> Reply:
    """Ask one question of a prefilled document: the only place that calls the model."""
    from kvqa import ask

    answer = ask(engine, prefilled, question, max_new_tokens=max_new_tokens).answer
    sources = getattr(answer, "sources", None)
    return Reply(
        text=answer.text, token_ids=tuple(answer.token_ids), stop_reason=str(answer.stop_reason),
        answer_s=answer.timings.answer_s, new_tokens=answer.timings.new_tokens,
        decode_tokens_per_s=answer.timings.decode_tokens_per_s, drafted_per_step=answer.timings.drafted_per_step,
        ttft_s=answer.timings.ttft_s, unsupported=getattr(answer, "unsupported", None),
        unquoted=getattr(answer, "unquoted", None), short=getattr(answer, "short", "") or "",
        question_tokens=answer.timings.question_tokens,
        sources=None if sources is None else [(_field(s, "text") or "", _field(s, "page"), _field(s, "answered") or "")
                                              for s in sources],
    )


def _field(source: Any, name: str) -> Any:
    """A source's `name`, whether the source is a dict or an object."""
    return source.get(name) if isinstance(source, dict) else getattr(source, name, None)


_THOUSANDS = re.compile(r"(?<=\d),(?=\d{3}(?!\d))")  # the comma in 11,870 (not in 1,2 or 3,1415)


def normalise(text: str) -> str:
    """NFKC, case-folded, whitespace runs as one space, thousands commas dropped:
    " 11,870\\n People" -> "11870 people"."""
    text = " ".join(unicodedata.normalize("NFKC", text).casefold().split())
    return _THOUSANDS.sub("", text)


def fact_in(text: str, fact: str) -> bool:
    """True when the normalised fact is a substring of the normalised text; a fact that starts (ends) with a digit
    must not continue a longer number there, so "12" is not found in "2012" or "120" but is in "12 March"."""
    text, fact = normalise(text), normalise(fact)
    if not fact:
        return False
    start = text.find(fact)
    while start >= 0:
        end = start + len(fact)
        digit_before = fact[0].isdigit() and start > 0 and text[start - 1].isdigit()
        digit_after = fact[-1].isdigit() and end < len(text) and text[end].isdigit()
        if not digit_before and not digit_after:
            return True
        start = text.find(fact, start + 1)
    return False


def has_fact(text: str, facts: Sequence[str]) -> bool:
    """True when the text contains any one of the facts (see fact_in)."""
    return any(fact_in(text, fact) for fact in facts)


def is_looping(token_ids: Sequence[int], *, min_span: int = LOOP_MIN_SPAN, copies: int = LOOP_COPIES) -> bool:
    """True when some span of at least `min_span` token ids occurs `copies` times back to back (by default a span of
    4+ tokens three times in a row, so 12+ tokens of pure repetition: "A B C D A B C D A B C D"). A 1- or 2-token
    repetition counts once it covers 12 tokens; a 5-token one at 15."""
    ids = list(token_ids)
    for span in range(min_span, len(ids) // copies + 1):
        for start in range(len(ids) - copies * span + 1):
            first = ids[start:start + span]
            if all(ids[start + k * span:start + (k + 1) * span] == first for k in range(1, copies)):
                return True
    return False


def load_questions(path: Path) -> list[Question]:
    """Read questions.jsonl: one {"doc", "question", "facts", "page"} object a line (blank lines skipped)."""
    questions = []
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            row = json.loads(line)
            questions.append(Question(doc=row["doc"], question=row["question"], facts=list(row["facts"]),
                                      page=row.get("page")))
    return questions


def score(question: Question, reply: Reply) -> dict[str, Any]:
    """One result row: the question, the answer and its figures."""
    first = reply.sources[0] if reply.sources else None
    return {
        "doc": question.doc, "question": question.question, "lang": language(question.question),
        "page": question.page, "facts": question.facts, "answer": reply.text,
        "correct": has_fact(reply.text, question.facts), "looping": is_looping(reply.token_ids),
        "looped_to_limit": is_looping(reply.token_ids) and reply.stop_reason == "length",
        "stop_reason": reply.stop_reason, "new_tokens": reply.new_tokens, "seconds": round(reply.answer_s, 3),
        "source_correct": None if reply.sources is None else first is not None and has_fact(first[0], question.facts),
        "source_page": first[1] if first else None,
        "gold_in_answer": gold_in(reply.text, question.facts), "f1": round(token_f1(reply.text, question.facts), 3),
        "exact": exact_match(reply.text, question.facts),
        # the phrase shown first, else the whole answer, as SQuAD would score a reply: F1, EM, the gold inside it
        "short": reply.short, "short_f1": round(token_f1(reply.short or reply.text, question.facts), 3),
        "short_exact": exact_match(reply.short or reply.text, question.facts),
        "short_gold": gold_in(reply.short or reply.text, question.facts),
        "gold_in_source": first is not None and gold_in(first[0], question.facts),
        "answer_marked": first is not None and bool(first[2]),  # its words found in the first source
        "marked_holds_gold": first is not None and bool(first[2]) and gold_in(first[2], question.facts),
        "answer_lang": language(reply.text) if reply.text.strip() else "none", "ttft_s": round(reply.ttft_s, 3),
        "question_tokens": reply.question_tokens, "token_ids": list(reply.token_ids),
        "unsupported": None if reply.unsupported is None else list(reply.unsupported),
        "unquoted": None if reply.unquoted is None else list(reply.unquoted),
    }


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """Shares correct and looping, answer time mean and median, mean new tokens, stop reasons, source share."""
    n = len(rows)
    seconds = [r["seconds"] for r in rows]
    with_sources = [r for r in rows if r["source_correct"] is not None]
    return {
        "questions": n,
        "correct": sum(r["correct"] for r in rows) / n,
        "looping": sum(r["looping"] for r in rows) / n,
        "looped_to_limit": sum(r["looped_to_limit"] for r in rows) / n,
        "mean_s": statistics.fmean(seconds),
        "median_s": statistics.median(seconds),
        "mean_new_tokens": statistics.fmean(r["new_tokens"] for r in rows),
        "stop_reasons": dict(Counter(r["stop_reason"] for r in rows)),
        "source_correct": sum(r["source_correct"] for r in with_sources) / n if with_sources else None,
        "gold_in_answer": sum(r["gold_in_answer"] for r in rows) / n,
        "f1": statistics.fmean(r["f1"] for r in rows),
        "exact": sum(r.get("exact", False) for r in rows) / n,
        "short_given": sum(bool(r.get("short")) for r in rows) / n,
        "short_f1": statistics.fmean(r.get("short_f1", r["f1"]) for r in rows),
        "short_exact": sum(r.get("short_exact", r.get("exact", False)) for r in rows) / n,
        "short_gold": sum(r.get("short_gold", r["gold_in_answer"]) for r in rows) / n,
        "gold_in_source": sum(r["gold_in_source"] for r in rows) / n,
        "answer_marked": sum(r.get("answer_marked", False) for r in rows) / n,
        "marked_holds_gold": sum(r.get("marked_holds_gold", False) for r in rows) / n,
        "answer_in_question_lang": sum(r["answer_lang"] == r["lang"] for r in rows) / n,
        "median_ttft_s": statistics.median(r["ttft_s"] for r in rows),
        "median_question_tokens": statistics.median(r.get("question_tokens", 0) for r in rows),
        **_marked(rows),
    }


def _marked(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """How many answers were marked as naming what the document lacks, and how many of those were wrong."""
    marked = [r for r in rows if r["unsupported"]]
    if not any(r["unsupported"] is not None for r in rows):
        return {"marked": None, "marked_wrong": None}
    unquoted = [r for r in rows if r.get("unquoted")]
    return {"marked": len(marked), "marked_wrong": sum(not r["gold_in_answer"] for r in marked),
            "unmarked_right": sum(r["gold_in_answer"] for r in rows if not r["unsupported"]),
            "unquoted": len(unquoted), "unquoted_wrong": sum(not r["gold_in_answer"] for r in unquoted)}


def summary(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """summarise() over all rows, per language and per document."""
    def by(key: str) -> dict[str, Any]:
        return {value: summarise([r for r in rows if r[key] == value]) for value in dict.fromkeys(r[key] for r in rows)}
    return {"all": summarise(rows), "by_language": by("lang"), "by_document": by("doc")}


def _cols(text: str) -> int:
    """Terminal columns the text takes: two for a wide (CJK) character, one for the others."""
    return sum(2 if unicodedata.east_asian_width(c) in "WF" else 1 for c in text)


def fit(text: str, cols: int) -> str:
    """The text on one line, cut (marked by ~) and padded to exactly `cols` terminal columns."""
    text = " ".join(text.split())
    if _cols(text) > cols:
        while _cols(text) > cols - 1:
            text = text[:-1]
        text += "~"
    return text + " " * (cols - _cols(text))


def row_line(row: dict[str, Any]) -> str:
    """One table row."""
    yn = {True: "y", False: "n"}
    return (f"{fit(row['doc'], 22)} {fit(row['question'], 44)} {yn[row['correct']]:>4} {yn[row['looping']]:>4} "
            f"{row['stop_reason']:>7} {row['new_tokens']:>4} {row['seconds']:>7.2f}")


HEADER = f"{'doc':<22} {'question':<44} {'ok':>4} {'loop':>4} {'stop':>7} {'tok':>4} {'s':>7}"


def summary_lines(result: dict[str, Any], *, per_document: bool = True) -> list[str]:
    """The summary as a table: all questions, then each language, then (unless per_document=False) each document.
    gold: the answer contains a gold answer (SQuAD-normalised); f1: token F1; em: exact match; short f1 / em: the
    same of the shortest phrase shown first (the whole answer where there is none); src: the first source
    contains it; lang: the answer is in the question's language; marked: answers marked as naming what the document
    lacks (of them wrong)."""
    def line(name: str, s: dict[str, Any]) -> str:
        stops = ", ".join(f"{k} {v}" for k, v in sorted(s["stop_reasons"].items()))
        marked = "n/a" if s["marked"] is None else f"{s['marked']} ({s['marked_wrong']})"
        return (f"{fit(name, 26)} {s['questions']:>3} {s['gold_in_answer']:>6.0%} {s['f1']:>5.2f} {s['exact']:>4.0%} "
                f"{s['short_f1']:>5.2f} {s['short_exact']:>4.0%} {s['gold_in_source']:>5.0%} {s['looping']:>6.0%} "
                f"{s['looped_to_limit']:>6.0%} "
                f"{s['answer_in_question_lang']:>5.0%} {s['median_ttft_s']:>6.2f} {s['median_s']:>6.2f} "
                f"{marked:>8}  {stops}")
    lines = [f"{'':<26} {'n':>3} {'gold':>6} {'f1':>5} {'em':>4} {'sf1':>5} {'sem':>4} {'src':>5} {'loop':>6} "
             f"{'limit':>6} {'lang':>5} "
             f"{'ttft':>6} {'ans s':>6} {'marked':>8}  stop reasons", line("all", result["all"])]
    lines += [line(f"language {k}", s) for k, s in result["by_language"].items()]
    if per_document:
        lines += [line(k, s) for k, s in result["by_document"].items()]
    return lines


def vary(value: str | None, config, parser) -> tuple[str, list]:
    """--vary NAME=V1,V2 -> (NAME, [V1, V2]) typed as the Config field; without it, quote_passages' own value."""
    if value is None:
        return "quote_passages", [config.decoding.quote_passages]
    name, _, values = value.partition("=")
    from kvqa.config import Decoding

    settings = [f.name for f in fields(Decoding)]
    if name not in settings or not values:
        parser.error(f"--vary takes NAME=V1,V2 with NAME one of {', '.join(settings)}")
    kind = type(config.setting(name)) if config.setting(name) is not None else int
    try:
        return name, [kind(v) for v in values.split(",")]
    except ValueError:
        parser.error(f"--vary {name}: {values} are not {kind.__name__}s")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--questions", type=Path, default=QUESTIONS, help="questions.jsonl (documents beside it)")
    parser.add_argument("--squad", type=Path, action="append", default=[],
                        help="a public set in SQuAD's JSON layout instead of --questions (repeatable; see --lang)")
    parser.add_argument("--lang", action="append", default=[], help="each --squad file's language: en or zh")
    parser.add_argument("--docs", type=int, default=None, help="only the first N documents of each --squad file")
    parser.add_argument("--doc", action="append", default=[],
                        help="only this document of the --squad files (its name, e.g. covidqa-003; repeatable)")
    parser.add_argument("--per-doc", type=int, default=4, help="questions per document of a --squad file")
    parser.add_argument("--min-chars", type=int, default=6000, help="a --squad document's least characters")
    parser.add_argument("--max-chars", type=int, default=28000, help="a --squad document's most characters")
    parser.add_argument("--zh-min-chars", type=int, default=2500, help="--min-chars for Chinese files")
    parser.add_argument("--zh-max-chars", type=int, default=5000, help="--max-chars for Chinese files")
    parser.add_argument("--max-gold-words", type=int, default=5,
                        help="--squad: keep questions whose gold answer has at most this many words")
    parser.add_argument("--vary", default=None, metavar="NAME=V1,V2",
                        help="answer every question once per value of one decoding setting (same prefill), e.g. "
                             "quote_passages=0,1 or quote_chars=0,160")
    parser.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                        help="a kvqa Config setting for this run, e.g. --set quote_passages=0 (repeatable)")
    parser.add_argument("--max-new-tokens", type=int, default=96)
    parser.add_argument("--limit", type=int, default=None, help="only the first N questions")
    parser.add_argument("--threads", type=int, default=None, help="torch.set_num_threads")
    parser.add_argument("--json", action="store_true", help="print one JSON object: settings, rows, summary")
    parser.add_argument("--show-answers", action="store_true", help="print each answer under its table row")
    parser.add_argument("--repeat-stop", type=int, default=None,
                        help="end answers that repeat over this many tokens (default: kvqa's; 0: never)")
    parser.add_argument("--dtype", default=None, help="float32 (default on a CPU), bfloat16...")
    parser.add_argument("--draft-tokens", type=int, default=None, help="tokens guessed per step (default: kvqa's)")
    parser.add_argument("--draft-compare", action="store_true",
                        help="also answer each question without drafting: per-question speedup and sameness")
    args = parser.parse_args(argv)

    import torch

    import kvqa

    if args.threads:
        torch.set_num_threads(args.threads)
    texts: dict[str, str] = {}
    if args.squad:
        if len(args.lang) != len(args.squad):
            parser.error("give one --lang for each --squad file")
        questions = []
        for path, lang in zip(args.squad, args.lang):
            docs, asked = load_squad(path, lang=lang, min_chars=args.zh_min_chars if lang == "zh" else args.min_chars,
                                     max_chars=args.zh_max_chars if lang == "zh" else args.max_chars,
                                     per_doc=args.per_doc, max_gold_words=args.max_gold_words)
            keep = [name for name in list(docs)[:args.docs] if not args.doc or name in args.doc]
            texts.update({name: docs[name] for name in keep})
            questions += [q for q in asked if q.doc in keep]
    else:
        questions = load_questions(args.questions)
    questions = questions[:args.limit]
    if not questions:
        parser.error("no questions to ask")
    overrides = dict(item.split("=", 1) for item in args.set)
    config = kvqa.config.config_from_env({kvqa.config.ENVIRONMENT[k]: v for k, v in overrides.items()},
                                         max_new_tokens=args.max_new_tokens, repeat_stop=args.repeat_stop,
                                         dtype=args.dtype, draft_tokens=args.draft_tokens)
    engine = kvqa.make_engine(config)
    info = engine.load()
    plain = kvqa.LocalEngine(config.replaced(draft_tokens=0), lm=engine.lm) if args.draft_compare else None
    varied, variants = vary(args.vary, config, parser)
    engines = {v: kvqa.LocalEngine(config.replaced(**{varied: v}), lm=engine.lm) for v in variants}
    log = sys.stderr if args.json else sys.stdout
    if not args.json:
        print(HEADER)
    rows, documents = [], []
    for doc in dict.fromkeys(q.doc for q in questions):  # each document once, in file order
        document = (kvqa.document_from_text(texts[doc], name=doc) if doc in texts
                    else kvqa.load_document(args.questions.parent / doc, config=config))
        try:
            prefilled = engine.prefill(document)
        except kvqa.DocumentTooLong as e:
            print(f"# {doc}: skipped, {e}", file=log, flush=True)
            questions = [q for q in questions if q.doc != doc]
            continue
        documents.append({"doc": doc, "tokens": prefilled.tokens, "prefill_s": round(prefilled.prefill_s, 3)})
        print(f"# {doc}: {prefilled.tokens} tokens, prefill {prefilled.prefill_s:.2f} s", file=log, flush=True)
        for question, variant in ((q, v) for q in questions if q.doc == doc for v in variants):
            reply = answer_question(engines[variant], prefilled, question.question, max_new_tokens=args.max_new_tokens)
            row = score(question, reply)
            row[varied] = variant
            row["drafted_per_step"] = round(reply.drafted_per_step, 3)
            if plain is not None:
                undrafted = answer_question(plain, prefilled, question.question, max_new_tokens=args.max_new_tokens)
                row["same_as_undrafted"] = undrafted.token_ids == reply.token_ids
                both = undrafted.decode_tokens_per_s > 0 and reply.decode_tokens_per_s > 0
                row["draft_speedup"] = (round(reply.decode_tokens_per_s / undrafted.decode_tokens_per_s, 3)
                                        if both else None)
            rows.append(row)
            if not args.json:
                print(row_line(row), flush=True)
                if args.show_answers:
                    print(f"    -> {json.dumps(row['answer'], ensure_ascii=False)}", flush=True)
    result = summary([r for r in rows if r[varied] == variants[-1]])
    if len(variants) > 1:
        result["by_variant"] = {v: summary([r for r in rows if r[varied] == v]) for v in variants}
    if plain is not None:
        speedups = [r["draft_speedup"] for r in rows if r["draft_speedup"]]
        result["drafting"] = {
            "draft_tokens": config.decoding.draft_tokens,
            "answers_identical": sum(r["same_as_undrafted"] for r in rows),
            "questions": len(rows), "mean_speedup": statistics.fmean(speedups) if speedups else None,
            "median_speedup": statistics.median(speedups) if speedups else None,
            "mean_drafted_per_step": statistics.fmean(r["drafted_per_step"] for r in rows)}
    if args.json:
        settings = {"sets": [str(p) for p in args.squad], "overrides": overrides, "model": info.model,
                    "dtype": info.dtype, "repeat_stop": config.decoding.repeat_stop,
                    "max_new_tokens": args.max_new_tokens,
                    "varied": {varied: variants},
                    "threads": torch.get_num_threads(),
                    "loop_definition": f"a span of >= {LOOP_MIN_SPAN} tokens repeated {LOOP_COPIES} times in a row"}
        print(json.dumps({"settings": settings, "documents": documents, "rows": rows, "summary": result},
                         ensure_ascii=False, indent=1))
    else:
        print()
        print(f"model {info.model} ({info.dtype}), max new tokens {args.max_new_tokens}, repeat stop "
              f"{config.decoding.repeat_stop}, torch threads {torch.get_num_threads()}; "
              f"looping: a span of >= {LOOP_MIN_SPAN} tokens repeated {LOOP_COPIES} times in a row")
        for v, part in result.get("by_variant", {variants[-1]: result}).items():
            print(f"\n{varied} = {v}:")
            print("\n".join(summary_lines(part, per_document=not args.squad)))
        if "drafting" in result:
            d = result["drafting"]
            print(f"drafting {d['draft_tokens']} tokens: answers identical to undrafted {d['answers_identical']} of "
                  f"{d['questions']}; decode speedup mean {d['mean_speedup']:.2f}x, median {d['median_speedup']:.2f}x; "
                  f"guessed tokens kept per step {d['mean_drafted_per_step']:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
