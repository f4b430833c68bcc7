"""Whether a two-hop question's two supporting paragraphs reach its answer, on public multi-hop data read as one long
document: does a question see the whole document?

The questions' paragraphs (HotpotQA's distractor setting: 2 gold paragraphs and 8 distractors each; 2WikiMultihopQA
has the same layout) are laid out as ONE document, each paragraph under its title as a heading line
("## Title\\n\\nparagraph\\n\\n"), a paragraph that repeats (same title, same text) once, the way Cache-Augmented
Generation preloads a knowledge base. Questions are taken in file order, those answered "yes"/"no" left out (neither
asked nor laid out: containing the gold cannot score them), until the paragraphs reach about --tokens of the default
model's tokenizer (each paragraph counted once; the whole document is counted again and reported). The paragraphs are
then shuffled with --seed (--order shuffled, the default: a question's two paragraphs usually land far apart, in
different parts of a long document) or kept in file order (--order file: each question's ten paragraphs together).

The document is read once as the app reads it (kvqa.session.session.Session.load with the engine of
kvqa.engines.make_engine and a disk store of parts, as `kvqa ask` does): longer than the model's context, it is cut into
parts and each question is routed to the part that matches it best, that part read (or restored from the store)
first. For each of the first --questions questions the script records:

- the part read (the cache), the passages its turn quoted (Answer.quoted) and the answer's sources (Answer.sources);
- for each gold paragraph: the parts that hold it, and whether its supporting sentence reached the answer through the
  cache, the quotes or the sources. A sentence is reached by a text when a long enough run of it appears there
  (normalised: NFKC, case-folded, whitespace runs as one space): all of a sentence of at most 40 characters, else
  40 characters, 60% of it, or 80 characters of a long one (a quote is cut to 200 characters, at clauses: see
  reached()). A paragraph is reached when one of its supporting sentences is;
- both reached (each gold paragraph reached by one of the three), at least one reached, both in the cache;
- correct (the SQuAD-normalised gold answer inside the answer: kvqa.bench.squad.gold_in), exact match, token F1;
- TTFT, the answer's time, and the read the question needed first: "prefill" (read now), "disk" (restored from the
  store), "kept"/"memory" (still in memory) or "none" (the part already read), with its seconds;
- the question's type (bridge, comparison) and level.

It prints one line per question, then the summary (all, per type, and split by whether both gold paragraphs lie in one
part), and --json writes settings, document, rows and summary.

Data (not in git; HotpotQA is CC BY-SA 4.0): 500 questions drawn at random from HotpotQA's dev set, distractor
setting (2 gold paragraphs and 8 distractors each, all of level "hard"), as the megagonlabs/RPT repository's first
commit vendors them: github.com/megagonlabs/RPT at commit cf2bc1b1b4edd0318b84179e732ec476c4e20a6e, file
data/hotpotqa/test.jsonl (Hugging Face's layout; sha256
3ab48ee61e64301dff1efbb956ca5ebdfcd1569a2e9d7381fd882e070badfb2a). HotpotQA's train file could not be had here;
nothing in kvqa was tuned on this set. Any file in HotpotQA's layout (a JSON list or JSON lines, HotpotQA's own or
Hugging Face's) or 2WikiMultihopQA's works; a question whose context lacks a gold paragraph (the fullwiki setting) is
left out. The figures were made with:

    git --git-dir=<RPT clone>/.git show cf2bc1b:data/hotpotqa/test.jsonl > hotpot_dev_distractor_rpt500.jsonl
    .venv/bin/python scripts/multihop.py --data hotpot_dev_distractor_rpt500.jsonl --tokens 25000 --json 25k-0.json
    .venv/bin/python scripts/multihop.py --data hotpot_dev_distractor_rpt500.jsonl --tokens 25000 --start 20 \\
        --json 25k-20.json   # the next questions: another document (--start 40 a third)
    .venv/bin/python scripts/multihop.py --data hotpot_dev_distractor_rpt500.jsonl --tokens 75000 --json 75k.json

--dry-run builds the document and says where each question's gold paragraphs lie and where each question would be
routed (the tokenizer only, no answers).
"""

from __future__ import annotations

import argparse
import json
import platform
import random
import statistics
import sys
import tempfile
import time
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvqa.bench.provenance import commit_of
from kvqa.bench.squad import exact_match, gold_in, token_f1

YES_NO = ("yes", "no")
SHORT_SENTENCE = 40  # a sentence this short must appear whole to be reached
SHARE = 0.6  # else at least this share of it, or
LONG_RUN = 80  # this many characters of it (a long sentence quoted only in its clause), at least SHORT_SENTENCE
EDGES = " .,;:!?\"'”’"  # left off a sentence's ends before it is matched


@dataclass(frozen=True)
class Item:
    """One multi-hop question: its paragraphs (title, sentences) and which sentences support the answer."""

    id: str
    question: str
    answer: str
    type: str
    level: str
    paragraphs: tuple[tuple[str, tuple[str, ...]], ...]
    support: dict[str, tuple[int, ...]]  # title -> supporting sentence indexes, in the order first named

    def gold(self) -> list[tuple[str, str, list[str]]]:
        """The gold paragraphs as (title, text, supporting sentences), in the order the facts name them; a fact whose
        title or sentence the context lacks is left out (a few of HotpotQA's are)."""
        found = []
        for title, indexes in self.support.items():
            sentences = next((s for t, s in self.paragraphs if t == title), None)
            if sentences is None:
                continue
            chosen = [sentences[i].strip() for i in indexes if 0 <= i < len(sentences) and sentences[i].strip()]
            if chosen:
                found.append((title, paragraph_text(sentences), chosen))
        return found


def paragraph_text(sentences: Sequence[str]) -> str:
    """A paragraph's text: its sentences as HotpotQA stores them (each after the first starts with its space)."""
    return " ".join("".join(sentences).split())


def load_items(path: Path) -> list[Item]:
    """A multi-hop set in HotpotQA's layout: a JSON list or JSON lines of {_id|id, question, answer, type, level,
    context: [[title, [sentences]], ...] or {title: [...], sentences: [[...], ...]}, supporting_facts: [[title,
    sent_id], ...] or {title: [...], sent_id: [...]}} (AMOR's copies also [title, [sent_ids], ...])."""
    raw = path.read_text(encoding="utf-8").strip()
    rows = json.loads(raw) if raw.startswith("[") else [json.loads(line) for line in raw.splitlines() if line.strip()]
    items = []
    for row in rows:
        context = row["context"]
        if isinstance(context, dict):
            context = list(zip(context["title"], context["sentences"]))
        facts = row["supporting_facts"]
        if isinstance(facts, dict):
            facts = list(zip(facts["title"], facts["sent_id"]))
        support: dict[str, tuple[int, ...]] = {}
        for fact in facts:
            title, ids = fact[0], fact[1]
            ids = tuple(ids) if isinstance(ids, (list, tuple)) else (ids,)
            support[title] = support.get(title, ()) + tuple(i for i in ids if i not in support.get(title, ()))
        answer = row["answer"][0] if isinstance(row["answer"], list) else row["answer"]
        items.append(Item(id=str(row.get("_id", row.get("id", len(items)))), question=row["question"],
                          answer=str(answer), type=row.get("type", "?"), level=row.get("level", "?"),
                          paragraphs=tuple((t, tuple(s)) for t, s in context), support=support))
    return items


@dataclass
class Built:
    """The document: its text, the questions laid out in it, and where each paragraph's text starts."""

    text: str
    items: list[Item]
    at: dict[tuple[str, str], int] = field(default_factory=dict)  # (title, paragraph text) -> offset of the text
    counted: int = 0  # tokens, each paragraph counted once


def block(title: str, text: str) -> str:
    return f"## {title}\n\n{text}\n\n"


def build_document(items: Sequence[Item], count: Callable[[str], int], tokens: int, *, order: str = "shuffled",
                   seed: int = 0, skip_yes_no: bool = True) -> Built:
    """Questions in file order (yes/no ones left out), their paragraphs once each, until about `tokens`; then
    shuffled with `seed` (order="shuffled") or kept in file order (order="file")."""
    chosen: list[Item] = []
    blocks: dict[tuple[str, str], None] = {}
    total = 0
    for item in items:
        if total >= tokens:
            break
        if (skip_yes_no and item.answer.strip().lower() in YES_NO) or len(item.gold()) < 2:
            continue
        chosen.append(item)
        for title, sentences in item.paragraphs:
            key = (title, paragraph_text(sentences))
            if key[1] and key not in blocks:
                blocks[key] = None
                total += count(block(*key))
    keys = list(blocks)
    if order == "shuffled":
        random.Random(seed).shuffle(keys)
    elif order != "file":
        raise ValueError(f"order is 'shuffled' or 'file', not {order!r}")
    pieces, at, offset = [], {}, 0
    for title, text in keys:
        piece = block(title, text)
        at[(title, text)] = offset + len(f"## {title}\n\n")
        pieces.append(piece)
        offset += len(piece)
    return Built("".join(pieces).rstrip("\n") + "\n", chosen, at, total)


def normal(text: str) -> str:
    """NFKC, case-folded, whitespace runs as one space."""
    return " ".join(unicodedata.normalize("NFKC", text).casefold().split())


def longest_run(sentence: str, text: str) -> int:
    """The length of the longest run of `sentence`'s characters that appears in `text` (both already normal())."""
    if not sentence or not text:
        return 0
    low, high = 0, len(sentence)  # a run of `low` appears; one of high + 1 does not
    while low < high:
        k = (low + high + 1) // 2
        if any(sentence[i:i + k] in text for i in range(len(sentence) - k + 1)):
            low = k
        else:
            high = k - 1
    return low


def needed(sentence: str) -> int:
    """How long a run of a (normal) sentence must appear for it to count as reached: all of a short one, else 40
    characters, 60% of it, or 80 characters of a long one (quotes are cut to 200 characters, at clauses)."""
    n = len(sentence)
    return min(n, max(SHORT_SENTENCE, min(int(SHARE * n + 0.999), LONG_RUN)))


def reached(sentence: str, texts: str | Sequence[str]) -> bool:
    """Whether a supporting sentence reached one of these texts (see needed())."""
    sentence = normal(sentence).strip(EDGES)  # a quote cut at a clause drops the sentence's end
    if not sentence:
        return False
    texts = [texts] if isinstance(texts, str) else texts
    return any(longest_run(sentence, normal(t)) >= needed(sentence) for t in texts)


def paragraph_reached(sentences: Sequence[str], texts: str | Sequence[str]) -> bool:
    """A gold paragraph reached a text when one of its supporting sentences did."""
    return any(reached(s, texts) for s in sentences)


def score(answer: str, gold: str) -> dict[str, Any]:
    """SQuAD's scoring of an answer against the gold: contained (correct), exact match, token F1."""
    return {"correct": gold_in(answer, [gold]), "exact": exact_match(answer, [gold]),
            "f1": round(token_f1(answer, [gold]), 3)}


def parts_holding(start: int, end: int, spans: Sequence[tuple[int, int]]) -> list[int]:
    """The parts (1-based) whose [start, end) holds all of [start, end)."""
    return [n for n, (a, b) in enumerate(spans, start=1) if a <= start and end <= b]


# ---- the run ------------------------------------------------------------------------------------------------------


def summarise(rows: list[dict[str, Any]]) -> dict[str, Any]:
    n = len(rows)
    if not n:
        return {"questions": 0}
    share = lambda key: sum(bool(r[key]) for r in rows) / n  # noqa: E731
    reads = {}
    for kind in ("prefill", "disk"):
        seconds = [r["read_s"] for r in rows if r["read"] == kind]
        reads[kind] = {"count": len(seconds), "median_s": statistics.median(seconds) if seconds else None}
    return {"questions": n, "both_reached": share("both_reached"), "one_reached": share("one_reached"),
            "both_in_cache": share("both_in_cache"), "both_in_cache_or_quote": share("both_in_cache_or_quote"),
            "gold_para_in_quote": (sum(g["in_quote"] for r in rows for g in r["gold"])
                                   / sum(len(r["gold"]) for r in rows)),
            "same_part": share("same_part"), "correct": share("correct"), "exact": share("exact"),
            "f1": statistics.fmean(r["f1"] for r in rows),
            "correct_when_both": (sum(r["correct"] for r in rows if r["both_reached"])
                                  / max(1, sum(r["both_reached"] for r in rows))),
            "correct_when_not_both": (sum(r["correct"] for r in rows if not r["both_reached"])
                                      / max(1, sum(not r["both_reached"] for r in rows))),
            "median_ttft_s": statistics.median(r["ttft_s"] for r in rows),
            "median_answer_s": statistics.median(r["answer_s"] for r in rows),
            "median_wall_s": statistics.median(r["wall_s"] for r in rows), "reads": reads,
            "median_question_tokens": statistics.median(r.get("question_tokens", 0) for r in rows),
            "composed": share("composed_parts") if all("composed_parts" in r for r in rows) else 0.0,
            "median_composed_s": statistics.median([r["composed_s"] for r in rows if r.get("composed_s")] or [0.0]),
            "median_load_average": statistics.median(r.get("load_average", -1.0) for r in rows),
            "missed": missed(rows)}


def missed(rows: list[dict[str, Any]]) -> dict[str, int]:
    """Why a gold paragraph did not reach the model, over the questions where one did not: routed to a part holding
    neither gold paragraph, or the other paragraph lies in another part and was not quoted."""
    failed = [r for r in rows if not r["both_in_cache_or_quote"]]
    neither = sum(not any(g["in_cache"] for g in r["gold"]) for r in failed)
    return {"questions": len(failed), "part read holds neither": neither,
            "other paragraph in another part, not quoted": len(failed) - neither,
            "of those, in the sources after the answer": sum(
                any(g["in_sources"] and not (g["in_cache"] or g["in_quote"]) for g in r["gold"]) for r in failed)}


HEADER = (f"{'':<24} {'n':>3} {'both':>5} {'one':>5} {'cache':>6} {'c+q':>5} {'same':>5} {'ok':>5} {'em':>4} "
          f"{'f1':>5} {'ttft':>6} {'ans s':>6} {'reads (median s)'}")


def summary_line(name: str, s: dict[str, Any]) -> str:
    if not s["questions"]:
        return f"{name:<24} {0:>3}"
    reads = ", ".join(f"{k} {v['count']}" + (f" ({v['median_s']:.1f})" if v["median_s"] is not None else "")
                      for k, v in s["reads"].items())
    return (f"{name:<24} {s['questions']:>3} {s['both_reached']:>5.0%} {s['one_reached']:>5.0%} "
            f"{s['both_in_cache']:>6.0%} {s['both_in_cache_or_quote']:>5.0%} {s['same_part']:>5.0%} "
            f"{s['correct']:>5.0%} {s['exact']:>4.0%} {s['f1']:>5.2f} {s['median_ttft_s']:>6.2f} "
            f"{s['median_answer_s']:>6.2f} {reads}")


def summary_of(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """summarise() over all rows, per question type, and split by whether both gold paragraphs lie in one part."""
    return {"all": summarise(rows),
            "by_type": {t: summarise([r for r in rows if r["type"] == t])
                        for t in dict.fromkeys(r["type"] for r in rows)},
            "same_part": summarise([r for r in rows if r["same_part"]]),
            "different_parts": summarise([r for r in rows if not r["same_part"]])}


def table(summary: dict[str, Any]) -> list[str]:
    """The summary as lines: a legend, a header, all, each type, one part / two parts, and the failures."""
    s = summary["all"]
    lines = ["both/one: both / at least one gold paragraph reached the answer (the part read, its quotes or its "
             "sources); cache: both in the part read; c+q: both in the cache or the quotes (what the model read); "
             "same: both gold paragraphs in one part; ok: the gold answer in the answer; reads: a part read now "
             "(prefill) or restored (disk) first", HEADER, summary_line("all", s)]
    lines += [summary_line(f"type {t}", part) for t, part in summary["by_type"].items()]
    lines += [summary_line("gold in one part", summary["same_part"]),
              summary_line("gold in two parts", summary["different_parts"])]
    if s["questions"]:
        lines.append(f"correct when both reached {s['correct_when_both']:.0%}, when not "
                     f"{s['correct_when_not_both']:.0%}; gold paragraphs quoted {s['gold_para_in_quote']:.0%}")
        lines.append(f"questions where a gold paragraph did not reach the model (cache or quote): {s['missed']}")
        lines.append(f"answered from a composed cache {s.get('composed', 0.0):.0%} (cache: the runs it held), "
                     f"composed in {s.get('median_composed_s', 0.0):.2f} s (median; parts restored included)")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0],
                                     formatter_class=argparse.RawDescriptionHelpFormatter,
                                     epilog="Where the data comes from and the commands that made the figures: "
                                            "this script's docstring (python -m pydoc scripts/multihop.py).")
    parser.add_argument("--summarise", type=Path, nargs="+", default=None, metavar="JSON",
                        help="print the summary of the rows of these --json files together (no model), and stop")
    parser.add_argument("--data", type=Path,
                        help="a multi-hop set in HotpotQA's layout (JSON list or JSON lines), e.g. 500 of HotpotQA's "
                             "dev questions (distractor setting) from github.com/megagonlabs/RPT at commit cf2bc1b, "
                             "data/hotpotqa/test.jsonl")
    parser.add_argument("--tokens", type=int, default=25_000, help="the document's size in the model's tokens")
    parser.add_argument("--start", type=int, default=0,
                        help="begin at the file's question number N (0-based): another document from the same file")
    parser.add_argument("--questions", type=int, default=None,
                        help="ask only the first N of the questions laid out (default: all of them)")
    parser.add_argument("--order", choices=("shuffled", "file"), default="shuffled",
                        help="paragraphs shuffled with --seed (default), or each question's together in file order")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--keep-yes-no", action="store_true", help="lay out and ask yes/no questions too")
    parser.add_argument("--store", type=Path, default=None,
                        help="the disk store of parts (default: a new temporary folder, so each part's first read "
                             "is measured, removed at the end)")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="default: kvqa's (the app's)")
    parser.add_argument("--model", default=None,
                        help="the model that reads and answers (default: kvqa's); the document is laid out in the "
                             "default model's tokens either way, so two models get the same text")
    parser.add_argument("--gather-tokens", type=int, default=None,
                        help="Decoding.gather_tokens: a question's passages of every part read, composed into one "
                             "cache of about this many tokens (default: kvqa's); 0: the part it is routed to alone")
    parser.add_argument("--read-ahead", action="store_true",
                        help="read every part into the store before the first question (as the app's read-ahead "
                             "does while the user reads), so that every part can be composed")
    parser.add_argument("--dry-run", action="store_true", help="lay out and route only: no answers")
    parser.add_argument("--json", type=Path, default=None, help="write settings, document, rows and summary here")
    parser.add_argument("--note", default="", help="free text kept in the JSON's settings (e.g. the commit run)")
    args = parser.parse_args(argv)
    if args.summarise:
        runs = [json.loads(p.read_text(encoding="utf-8")) for p in args.summarise]
        for path, run in zip(args.summarise, runs):
            m, d = run["settings"], run["document"]
            print(f"# {path.name}: {d['tokens']:,} tokens in {len(d['parts'])} parts, {len(run['rows'])} questions, "
                  f"{m['note'] or m['commit']}, {m['date']}")
        print("\n".join(table(summary_of([r for run in runs for r in run["rows"]]))))
        return 0
    if args.data is None:
        parser.error("give --data (or --summarise)")

    import kvqa
    from kvqa.cache.store import store_for
    from kvqa.config import Config
    from kvqa.documents.parts import offsets
    from kvqa.documents.reading import document_from_text
    from kvqa.engines import make_engine
    from kvqa.session.session import Ask, Session

    started = time.perf_counter()
    items = load_items(args.data)
    temporary = None
    if args.store is None:
        temporary = tempfile.TemporaryDirectory(prefix="kvqa-multihop-store-")
        args.store = Path(temporary.name)
    settings = {"max_new_tokens": args.max_new_tokens} if args.max_new_tokens else {}
    if args.model:
        settings["model"] = args.model
    if args.gather_tokens is not None:
        settings["gather_tokens"] = args.gather_tokens
    config = Config().replaced(store_dir=args.store, **settings)
    engine = make_engine(config, store=store_for(config))
    info = engine.load()
    count = engine.count_tokens
    if args.model:  # laid out in the default model's tokens, as without --model
        from transformers import AutoTokenizer

        from kvqa.model.loading import default_model_dir

        tokenizer = AutoTokenizer.from_pretrained(default_model_dir(config.cache_dir))
        count = lambda text: len(tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0  # noqa: E731
    built = build_document(items[args.start:], count, args.tokens, order=args.order, seed=args.seed,
                           skip_yes_no=not args.keep_yes_no)
    document = document_from_text(built.text, name=f"{args.data.stem}-{args.start}-{args.tokens // 1000}k")
    assert document.text == built.text
    asked = built.items[:args.questions]
    doc_tokens = count(built.text)  # the default model's tokens
    model_tokens = engine.count_tokens(built.text)  # the reading model's
    meta = {"data": str(args.data), "questions_in_file": len(items), "start": args.start, "tokens_asked": args.tokens,
            "order": args.order, "seed": args.seed, "yes_no_left_out": not args.keep_yes_no,
            "model": info.model, "device": info.device, "precision": info.precision,
            "max_new_tokens": config.limits.max_new_tokens, "quote_passages": config.decoding.quote_passages,
            "gather_tokens": config.decoding.gather_tokens, "read_ahead": args.read_ahead,
            "quote_chars": config.decoding.quote_chars, "commit": commit_of(Path(kvqa.__file__).resolve().parent),
            "kvqa_at": str(Path(kvqa.__file__).resolve().parent), "note": args.note,
            "date": time.strftime("%Y-%m-%d %H:%M:%S %z"), "machine": f"{platform.node()} {platform.machine()}, "
            f"{_cpus()} CPUs, Python {platform.python_version()}"}
    print(f"# {args.data.name}: {len(built.items)} questions laid out ({len(built.at)} paragraphs, "
          f"{doc_tokens:,} tokens, {len(built.text):,} characters, {args.order}), asking {len(asked)}; "
          f"model {info.model} on {info.device} ({model_tokens:,} of its tokens)", flush=True)

    session = Session(engine)
    loaded = time.perf_counter()
    if args.dry_run:
        from kvqa.evidence.evidence import Evidence
        from kvqa.session.parts import prefill_parts

        whole = document
        reading = prefill_parts(_dry_prefill(engine, config), engine.count_tokens, whole)
        spans_units, whole = reading.parts, reading.whole
    else:
        session.load(document)
        if args.read_ahead:
            print(f"# read ahead: {session.read_ahead()} parts in {time.perf_counter() - loaded:.0f} s", flush=True)
        spans_units = list(session.parts)
        whole = session.whole
    load_s = time.perf_counter() - loaded
    spans = [offsets(whole, a, b) for a, b, _ in spans_units]
    doc_info = {"tokens": doc_tokens, "model_tokens": model_tokens, "characters": len(built.text),
                "paragraphs": len(built.at),
                "questions_laid_out": len(built.items), "parts": [[a, b, t] for a, b, t in spans_units],
                "first_read": None if args.dry_run else {"origin": session.origin, "seconds": round(load_s, 2)}}
    print(f"# {len(spans)} parts: " + ", ".join(f"{a:,}-{b:,} ({t:,} tokens)" for a, b, t in spans_units)
          + ("" if args.dry_run else f"; the first read in {load_s:.1f} s ({session.origin})"), flush=True)

    rows = []
    print(f"{'id':<10} {'type':<10} {'gold parts':<10} {'read':<4} {'cache':<5} {'quote':<5} {'src':<5} "
          f"{'ok':<3} {'f1':>4} {'ttft':>5} {'read s':>7}  answer", flush=True)
    for item in asked:
        golds = item.gold()
        where = []
        for title, text, sentences in golds:
            start = built.at[(title, text)]
            where.append(parts_holding(start, start + len(text), spans))
        row: dict[str, Any] = {"id": item.id, "type": item.type, "level": item.level, "question": item.question,
                               "gold_answer": item.answer}
        if args.dry_run:
            evidence = Evidence.of(whole, item.question, spans_units)
            routed = evidence.route()
            target, also = routed.target, routed.also
            row.update(routed_part=target + 1, also_part=None if also is None else also + 1,
                       gold_parts=where, both_in_routed=all(target + 1 in w for w in where))
            rows.append(row)
            print(f"{item.id[:10]:<10} {item.type:<10} {_parts(where):<10} {target + 1:<4} "
                  f"{'y' if row['both_in_routed'] else 'n':<5}", flush=True)
            continue
        switched: list[Any] = []
        wall = time.perf_counter()
        answer = session.ask(Ask(item.question, on_part=switched.append)).answer
        wall = time.perf_counter() - wall
        turn = session.turns[-1]
        composed = turn.composed
        cache_text = ("".join(whole.text[a:b] for a, b, _ in composed.held) if composed is not None
                      else session.document.text)
        quoted = list(answer.quoted)
        sources = [s.text for s in answer.sources]
        read_index = session.part_index + 1
        gold_rows = []
        for (title, text, sentences), parts in zip(golds, where):
            gold_rows.append({"title": title, "parts": parts, "sentences": len(sentences),
                              "in_cache": paragraph_reached(sentences, cache_text),
                              "in_quote": paragraph_reached(sentences, quoted),
                              "in_sources": paragraph_reached(sentences, sources)})
        for g in gold_rows:
            g["reached"] = g["in_cache"] or g["in_quote"] or g["in_sources"]
        scored = score(answer.text, item.answer)
        row.update(
            answer=answer.text, short=answer.short, **scored, short_f1=round(token_f1(answer.short or answer.text,
                                                                                      [item.answer]), 3),
            gold=gold_rows, gold_parts=where, read_part=read_index,
            read_range=[session.document.part.first, session.document.part.last] if session.document.part else None,
            also_part=session.parts.index_of(turn.also.first, turn.also.last) + 1 if turn.also else None,
            parts=len(spans),
            same_part=bool(where) and bool(set(where[0]).intersection(*map(set, where[1:]))),
            both_reached=all(g["reached"] for g in gold_rows),
            one_reached=any(g["reached"] for g in gold_rows),
            both_in_cache=all(g["in_cache"] for g in gold_rows),
            both_in_cache_or_quote=all(g["in_cache"] or g["in_quote"] for g in gold_rows),
            composed_parts=list(composed.numbers) if composed else None,
            composed_s=round(composed.seconds, 3) if composed else None,
            composed_tokens=composed.tokens if composed else None,
            read=session.origin if switched else "none", read_s=round(session.ready_s, 2) if switched else 0.0,
            ttft_s=round(answer.timings.ttft_s, 3), answer_s=round(answer.timings.answer_s, 3),
            wall_s=round(wall, 2), new_tokens=answer.timings.new_tokens, stop_reason=answer.stop_reason,
            question_tokens=answer.timings.question_tokens,
            load_average=round(_load(), 2),
            quoted=quoted, sources=[{"text": s.text, "part": getattr(s, "part", None)} for s in answer.sources])
        rows.append(row)
        marks = lambda key: "".join("y" if g[key] else "n" for g in gold_rows)  # noqa: E731
        print(f"{item.id[:10]:<10} {item.type:<10} {_parts(where):<10} "
              f"{('c' + str(len(composed.parts))) if composed else read_index:<4} {marks('in_cache'):<5} "
              f"{marks('in_quote'):<5} {marks('in_sources'):<5} {'y' if row['correct'] else 'n':<3} "
              f"{row['f1']:>4.2f} {row['ttft_s']:>5.2f} {row['read_s']:>5.1f} {row['read'][:1]}  "
              f"{json.dumps(answer.text[:60], ensure_ascii=False)}", flush=True)

    result: dict[str, Any] = {"settings": meta, "document": doc_info, "rows": rows}
    if args.dry_run:
        n = max(1, len(rows))
        result["summary"] = {"questions": len(rows), "both_in_routed": sum(r["both_in_routed"] for r in rows) / n,
                             "same_part": sum(len(set(r["gold_parts"][0]).intersection(*map(set, r["gold_parts"][1:])))
                                              > 0 for r in rows) / n}
        print(f"\n{result['summary']}")
    else:
        result["summary"] = summary_of(rows)
        print(f"\n{meta['model']} ({meta['precision']}, {meta['device']}), {doc_tokens:,}-token document in "
              f"{len(spans)} parts, max new tokens {meta['max_new_tokens']}, {meta['date']}, {meta['machine']}, "
              f"commit {meta['commit']}")
        print("\n".join(table(result["summary"])))
    total_s = time.perf_counter() - started
    result["settings"]["run_s"] = round(total_s, 1)
    print(f"# ran {total_s / 60:.1f} min", flush=True)
    if args.json:
        args.json.write_text(json.dumps(result, ensure_ascii=False, indent=1), encoding="utf-8")
    if temporary is not None:
        temporary.cleanup()
    return 0


def _parts(where: list[list[int]]) -> str:
    return "+".join(",".join(map(str, w)) or "-" for w in where)


def _load() -> float:
    """The machine's load over the last minute (other processes slow the timings down), -1 where none is told."""
    import os

    return os.getloadavg()[0] if hasattr(os, "getloadavg") else -1.0


def _cpus() -> int:
    import os

    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 0


def _dry_prefill(engine, config):
    """For --dry-run: a prefill that only tokenizes, refusing a document longer than the model's context exactly as
    the engine does (kvqa.generation.generate.prefix_of), so prefill_parts cuts the document as Session.load would."""
    from types import SimpleNamespace

    from kvqa.generation.generate import prefix_of

    def prefill(document):
        _, ids = prefix_of(engine.lm, document, config=config)
        return SimpleNamespace(tokens=len(ids), document=document)

    return prefill


if __name__ == "__main__":
    sys.exit(main())
