"""How close an answer from a composed cache (kvqa.generation.compose) comes to one from reading the parts together.

Each two-hop question of a public multi-hop set is laid out as two blocks of five paragraphs, each paragraph as
"## Title\\n\\ntext", the blocks' paragraphs in the file's order: block A holds the first gold paragraph (the first
title its supporting facts name) and the first 4 distractors, block B the second gold paragraph and the other 4 (so
neither block alone holds both hops). With the default model (SmolLM2-135M-Instruct; int8 weights on a CPU), one
process, greedy, the app's settings otherwise, the question is asked (kvqa.session.ask on a LocalEngine) on:

- composed: A and B each read alone (prefill), then joined by kvqa's compose_reads(lm, [A, B], A + "\\n\\n" + B)
  without reading them again; its TTFT is compose's time plus the answer's TTFT;
- fixed: the same join done here with the parts' edges taken from the template, not from the tokens the parts share
  (see below), and the blank line between the parts read on top of A before B is moved in, so that its ids are the
  ids of reading A + "\\n\\n" + B together; B's text still never saw A;
- together: A + "\\n\\n" + B read in one prefill (its read time is reported apart: without composing, a reader must
  read A and B together for this question);
- A alone and B alone (the caches composed).

--floor CHUNK answers on two reads of A + "\\n\\n" + B instead, in the app's 512-token chunks and in CHUNK-token ones
(mode rechunked): the same tokens computed in another order, so how far rounding alone moves an answer (int8 weights
keep only the same-chunks promise). --timing N answers nothing: the fastest of N composes against the fastest of N
reads together per question, since the runs' single times move with the machine's load (recorded in each row).

Each question is asked with the app's quoting (quote_passages=1: the best BM25 passage of the document quoted in the
question's turn) and with quoting off (quote_passages=0), since a quote can carry the evidence by itself and hide what
the cache holds. Per question and mode: the answer, whether its token ids are together's, the gold in it and SQuAD's
F1 (kvqa.bench.squad), TTFT, the cache's bytes (its reserve for one question and answer included); and at the
question's first answer token, whether the top-1 token is together's and KL(together || mode) of the two
distributions (the question's turn as the answer read it, quotes included, on the mode's cache).

Why "fixed": kvqa's compose until 3ec11dd took the head and tail to keep as the tokens every part shares at its start
and end. Parts that start alike ("## " here) or end alike (a final ".") share more than the template's tokens, so the
composed cache dropped the first part's last tokens and every next part's first ones: its ids were not the document's
(for block texts ending "... name." and starting "## The ...": "... name The ..."). The figures below were made with
that compose; since 3ec11dd it keeps the template's own head and tail (compose.edges), so "composed" loses no token,
but it still joins the parts' texts with no blank line between them, which "fixed" reads.

Data (not in git; HotpotQA, Yang et al. 2018, is CC BY-SA 4.0): HotpotQA's dev set, distractor setting, 500 questions
drawn at random as the megagonlabs/RPT repository's first commit vendors them (github.com/megagonlabs/RPT commit
cf2bc1b1b4edd0318b84179e732ec476c4e20a6e, data/hotpotqa/test.jsonl, sha256
3ab48ee61e64301dff1efbb956ca5ebdfcd1569a2e9d7381fd882e070badfb2a; /work/data/multihop/SOURCES.md). Questions in file
order from --start (100 by default: scripts/multihop.py's runs use the first ~90), yes/no answers left out. The
figures were made (2026-12-07, 2-core AMD EPYC shared with other runs: load 4 on 2 cores; commit 07d7ea7 for the
first, ac9348a for the others, kvqa/ the same) with:

    nice -n 10 .venv/bin/python experiments/composed.py --data hotpot_dev_distractor_rpt500.jsonl --start 100 \\
        --questions 24 --json composed-100.json    # 69 min
    nice -n 10 .venv/bin/python experiments/composed.py --questions 24 --floor 128 --json floor-100.json   # 16 min
    nice -n 10 .venv/bin/python experiments/composed.py --questions 24 --timing 3 --json timing-100.json   # 27 min
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import statistics
import time
from pathlib import Path
from typing import Any

import torch

import kvqa
from kvqa.bench.provenance import commit_of, cpu_name
from kvqa.bench.squad import exact_match, gold_in, token_f1
from kvqa.engines import LocalEngine
from kvqa.generation.compose import compose_reads, shift_keys
from kvqa.generation.generate import check_fits, run_chunks
from kvqa.results import PrefilledDocument
from kvqa.session.ask import ask

DATA = Path("/work/data/multihop/hotpot_dev_distractor_rpt500.jsonl")
MODES = ("composed", "fixed", "together", "a", "b", "rechunked")
QUOTES = (1, 0)


def paragraph(title: str, sentences: list[str]) -> str:
    """A paragraph under its title; its sentences as HotpotQA stores them (each after the first starts with a space)."""
    return f"## {title}\n\n{' '.join(''.join(sentences).split())}"


def blocks(row: dict[str, Any]) -> tuple[str, str] | None:
    """(block A, block B): each gold paragraph with half the distractors, in the file's order; None when the row does
    not have two gold paragraphs."""
    context = list(zip(row["context"]["title"], row["context"]["sentences"]))
    gold = list(dict.fromkeys(row["supporting_facts"]["title"]))
    if len(gold) != 2 or any(not any(t == g for t, _ in context) for g in gold):
        return None
    first = next(i for i, (t, _) in enumerate(context) if t == gold[0])
    second = next(i for i, (t, _) in enumerate(context) if t == gold[1])
    others = [i for i, (t, _) in enumerate(context) if t not in gold]
    half = len(others) // 2
    a = sorted([first, *others[:half]])
    b = sorted([second, *others[half:]])
    return ("\n\n".join(paragraph(*context[i]) for i in a), "\n\n".join(paragraph(*context[i]) for i in b))


def _common(x: list[int], y: list[int]) -> int:
    return next((i for i in range(min(len(x), len(y))) if x[i] != y[i]), min(len(x), len(y)))


def template_edges(prompt) -> tuple[int, int]:
    """How many tokens of a document's prefix come before its text and after it: the template's own."""
    one, other = prompt.prefix_ids("\u2460"), prompt.prefix_ids("Z")
    return _common(one, other), _common(one[::-1], other[::-1])


@torch.no_grad()
def compose_fixed(lm, a: PrefilledDocument, b: PrefilledDocument, together_ids: tuple[int, ...], document,
                  edges: tuple[int, int], config) -> PrefilledDocument | None:
    """A and B joined as kvqa's compose does, except: the head and tail kept are the template's (`edges`), and the
    tokens between A's text and B's in the document read together (the blank line) are read on top of A before B's
    keys are moved in, so the ids are together's. None when together's ids are not A's text, a separator and B's text
    (a token merged across the join)."""
    head, tail = edges
    body_a, body_b = a.ids[head: len(a.ids) - tail], b.ids[head: len(b.ids) - tail]
    end_a = head + len(body_a)
    start_b = len(together_ids) - tail - len(body_b)
    if (together_ids[:end_a] != a.ids[:end_a] or together_ids[start_b:] != b.ids[head:]
            or start_b <= end_a):
        return None
    started = time.perf_counter()
    reserve = config.limits.reserve_tokens
    check_fits(lm, len(together_ids), reserve)
    cache = lm.new_cache(len(together_ids) + reserve)
    for layer, (k, v) in enumerate(a.cache.tensors()):
        cache.update(k[:, :, :end_a], v[:, :, :end_a], layer)
    run_chunks(lm, list(together_ids[end_a:start_b]), cache, chunk_size=config.chunk_size)  # the blank line, on A
    for layer, (k, v) in enumerate(b.cache.tensors()):
        cache.update(shift_keys(lm, k[:, :, head: head + len(body_b)], start_b - head),
                     v[:, :, head: head + len(body_b)], layer)
    run_chunks(lm, list(together_ids[len(together_ids) - tail:]), cache, chunk_size=config.chunk_size)
    assert cache.length == len(together_ids)
    return PrefilledDocument(
        document=document, prompt=a.prompt, ids=tuple(together_ids), cache=cache, cache_bytes=cache.nbytes,
        prefill_s=time.perf_counter() - started, model_name=lm.name, max_question_tokens=a.max_question_tokens,
        max_new_tokens=a.max_new_tokens, origin="composed")


@torch.no_grad()
def first_logprobs(lm, doc: PrefilledDocument, question: str, quotes: tuple[str, ...]) -> torch.Tensor:
    """The log-probabilities of the first answer token: the question's turn (with these quotes) on the cache, which
    is rolled back after."""
    ids = doc.prompt.question_ids(question, limit=doc.max_question_tokens, quotes=list(quotes))
    try:
        logits = run_chunks(lm, ids, doc.cache, chunk_size=len(ids))
    finally:
        doc.cache.rollback(doc.tokens)
    return torch.log_softmax(logits[0].float(), dim=-1)


def run_question(lm, engines, row, edges, config, args) -> dict[str, Any] | None:
    made = blocks(row)
    if made is None:
        return None
    text_a, text_b = made
    gold = [row["answer"]]
    cpu: dict[str, float] = {}  # each read's or join's CPU seconds (all threads): less moved by a busy machine

    def timed(mode, make):
        started = time.process_time()
        made = make()
        cpu[mode] = time.process_time() - started
        return made

    whole = kvqa.document_from_text(text_a + "\n\n" + text_b, name="A+B")
    if args.floor:  # the same text read together again, in other chunks: how far numbers alone move an answer
        together = timed("together", lambda: kvqa.prefill(lm, whole, config=config))
        again = config.replaced(chunk_size=args.floor)
        rechunked = timed("rechunked", lambda: kvqa.prefill(lm, whole, config=again))
        docs = {"together": together, "rechunked": rechunked}
        join_s = {m: d.prefill_s for m, d in docs.items()}
    else:
        a = timed("a", lambda: kvqa.prefill(lm, kvqa.document_from_text(text_a, name="A"), config=config))
        b = timed("b", lambda: kvqa.prefill(lm, kvqa.document_from_text(text_b, name="B"), config=config))
        together = timed("together", lambda: kvqa.prefill(lm, whole, config=config))
        started = time.perf_counter()
        composed = timed("composed", lambda: compose_reads(lm, [a, b], whole, config=config))
        compose_s = time.perf_counter() - started
        fixed = timed("fixed", lambda: compose_fixed(lm, a, b, together.ids, whole, edges, config))
        docs = {"composed": composed, "fixed": fixed, "together": together, "a": a, "b": b}
        join_s = {"composed": compose_s, "fixed": fixed.prefill_s if fixed else None, "together": together.prefill_s,
                  "a": a.prefill_s, "b": b.prefill_s}
    out: dict[str, Any] = {
        "id": row["id"], "question": row["question"], "gold": row["answer"], "type": row["type"],
        "load": os.getloadavg()[0],
        "tokens": {m: (len(d.ids) if d else None) for m, d in docs.items()},
        "read_s": join_s, "read_cpu_s": cpu,
        "cache_bytes": {m: (d.cache_bytes if d else None) for m, d in docs.items()},
        "answers": {},
    }
    if "composed" in docs:
        out["composed_ids_are_together"] = composed.ids == together.ids
        out["composed_ids_missing"] = len(together.ids) - len(composed.ids)
    for quote in QUOTES:
        engine = engines[quote]
        answers = {}
        for mode, doc in docs.items():
            if doc is None:
                continue
            answers[mode] = ask(engine, doc, row["question"], max_new_tokens=args.max_new_tokens).answer
        reference = answers["together"]
        base = first_logprobs(lm, together, row["question"], reference.quoted)
        rows = {}
        for mode, answer in answers.items():
            first = first_logprobs(lm, docs[mode], row["question"], answer.quoted) if mode != "together" else base
            kl = float(torch.sum(base.exp() * (base - first)))
            rows[mode] = {
                "text": answer.text, "tokens": len(answer.token_ids), "stop": answer.stop_reason,
                "same_as_together": answer.token_ids == reference.token_ids,
                "gold_in": gold_in(answer.text, gold), "em": exact_match(answer.text, gold),
                "f1": token_f1(answer.text, gold), "ttft_s": answer.timings.ttft_s,
                "question_tokens": answer.timings.question_tokens,
                "first_token_checked": int(first.argmax()) == (answer.token_ids[0] if answer.token_ids else -1),
                "top1_as_together": int(first.argmax()) == int(base.argmax()),
                "kl_first": max(kl, 0.0), "quoted": list(answer.quoted),
            }
        out["answers"][f"quote{quote}"] = rows
    return out


def time_joins(lm, row, repeat: int) -> dict[str, Any] | None:
    """Without answers: the fastest of `repeat` composes of A and B against the fastest of `repeat` reads of A+B
    together (the one-off costs of a busy machine mostly left out)."""
    made = blocks(row)
    if made is None:
        return None
    text_a, text_b = made
    a, b = (kvqa.prefill(lm, kvqa.document_from_text(t, name=n)) for t, n in ((text_a, "A"), (text_b, "B")))
    whole = kvqa.document_from_text(text_a + "\n\n" + text_b, name="A+B")
    composed, together = [], []
    for _ in range(repeat):
        started = time.perf_counter()
        compose_reads(lm, [a, b], whole)
        composed.append(time.perf_counter() - started)
        started = time.perf_counter()
        read = kvqa.prefill(lm, whole)
        together.append(time.perf_counter() - started)
    return {"id": row["id"], "tokens": len(read.ids), "compose_s": min(composed), "together_s": min(together),
            "load": os.getloadavg()[0]}


def median(values) -> float:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else math.nan


def summary(rows: list[dict[str, Any]]) -> list[str]:
    lines = []
    modes = [m for m in MODES if all(m in r["tokens"] for r in rows)]
    for quote in QUOTES:
        key = f"quote{quote}"
        lines.append(f"\nquote_passages={quote} ({len(rows)} questions)")
        lines.append(f"{'mode':<10}{'n':>4}{'same ids':>10}{'top-1':>8}{'KL med':>9}{'KL max':>9}{'gold in':>9}"
                     f"{'EM':>6}{'F1':>7}{'TTFT med':>10}{'read+TTFT':>11}")
        for mode in modes:
            got = [(r, r["answers"][key][mode]) for r in rows if mode in r["answers"][key]]
            if not got:
                continue
            n = len(got)
            share = lambda field: sum(a[field] for _, a in got) / n  # noqa: E731
            kls = [a["kl_first"] for _, a in got]
            ttft = median(a["ttft_s"] for _, a in got)
            total = median(r["read_s"][mode] + a["ttft_s"] for r, a in got if r["read_s"][mode] is not None)
            lines.append(f"{mode:<10}{n:>4}{share('same_as_together'):>10.0%}{share('top1_as_together'):>8.0%}"
                         f"{median(kls):>9.4f}{max(kls):>9.3f}{share('gold_in'):>9.0%}{share('em'):>6.0%}"
                         f"{share('f1'):>7.2f}{ttft:>10.3f}{total:>11.3f}")
        checked = sum(a["first_token_checked"] for r in rows for a in r["answers"][key].values())
        asked = sum(len(r["answers"][key]) for r in rows)
        lines.append(f"(first-token logits recomputed here agree with the answer's first token in {checked}/{asked})")
    lines.append("\nread+TTFT: composed/fixed: the join's seconds + the answer's TTFT; together: its one read + TTFT; "
                 "a, b: each part's read + TTFT")
    lines.append("median tokens: " + ", ".join(f"{m} {median(r['tokens'][m] for r in rows):.0f}" for m in modes))
    lines.append("median read/join s: " + ", ".join(f"{m} {median(r['read_s'][m] for r in rows):.3f}" for m in modes))
    lines.append("median read/join CPU s: " + ", ".join(
        f"{m} {median(r['read_cpu_s'][m] for r in rows):.3f}" for m in modes))
    lines.append(f"median load average (1 min) at each question: {median(r['load'] for r in rows):.1f}")
    lines.append("median cache MiB (reserve of 768 tokens included): " + ", ".join(
        f"{m} {median(r['cache_bytes'][m] for r in rows) / 2**20:.1f}" for m in modes))
    if "composed" not in modes:
        return lines
    lines.append(f"composed (kvqa) ids equal together's: {sum(r['composed_ids_are_together'] for r in rows)}/"
                 f"{len(rows)}; tokens missing, median {median(r['composed_ids_missing'] for r in rows):.0f}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", type=Path, default=DATA, help="HotpotQA rows as JSON lines (Hugging Face layout)")
    parser.add_argument("--start", type=int, default=100, help="the first row used (file order)")
    parser.add_argument("--questions", type=int, default=24, help="how many questions (yes/no ones skipped)")
    parser.add_argument("--max-new-tokens", type=int, default=None, help="the answer's limit; default: the app's")
    parser.add_argument("--floor", type=int, metavar="CHUNK",
                        help="instead: read A+B together twice, in the app's chunks and in CHUNK-token chunks, and "
                             "answer on both (mode rechunked): how far the numbers alone move an answer")
    parser.add_argument("--timing", type=int, metavar="N",
                        help="instead: no answers, the fastest of N composes against the fastest of N reads together")
    parser.add_argument("--json", type=Path, help="write settings and rows here")
    args = parser.parse_args(argv)

    config = kvqa.Config()
    lm = kvqa.load_model(config)
    engines = {q: LocalEngine(config.replaced(quote_passages=q), lm=lm) for q in QUOTES}
    info = engines[1].info
    edges = template_edges(kvqa.prefill(lm, kvqa.document_from_text("x", name="probe"), config=config).prompt)
    settings = {"date": time.strftime("%Y-%m-%d %H:%M:%S %z"),
                "commit": commit_of(Path(kvqa.__file__).resolve().parent),
                "machine": f"{cpu_name()}, {len(os.sched_getaffinity(0))} CPUs, Python {platform.python_version()}",
                "model": info.model, "dtype": info.dtype, "weights": info.weights, "data": str(args.data),
                "start": args.start, "questions": args.questions, "floor": args.floor,
                "max_new_tokens": args.max_new_tokens,
                "template_edges": edges}
    print(json.dumps(settings), flush=True)
    rows: list[dict[str, Any]] = []
    began = time.perf_counter()
    with args.data.open(encoding="utf-8") as f:
        data = [json.loads(line) for line in f if line.strip()]
    for index in range(args.start, len(data)):
        if len(rows) == args.questions:
            break
        row = data[index]
        if row["answer"].strip().lower() in ("yes", "no"):
            continue
        done = time_joins(lm, row, args.timing) if args.timing else run_question(lm, engines, row, edges, config, args)
        if done is None:
            continue
        done["row"] = index
        rows.append(done)
        if args.timing:
            print(f"[{index}] {done['tokens']} tokens: compose {done['compose_s']:.3f} s, read together "
                  f"{done['together_s']:.3f} s; load {done['load']:.1f}", flush=True)
            continue
        q1, q0 = done["answers"]["quote1"], done["answers"]["quote0"]
        print(f"[{index}] {row['question'][:70]!r} gold {row['answer']!r}; tokens {done['tokens']}; "
              f"load {done['load']:.1f}", flush=True)
        for mode in MODES:
            if mode in q1 and mode in q0:
                print(f"    {mode:<9} q1 {'=' if q1[mode]['same_as_together'] else '≠'} "
                      f"{'ok' if q1[mode]['gold_in'] else '--'} {q1[mode]['text'][:60]!r}  |  q0 "
                      f"{'=' if q0[mode]['same_as_together'] else '≠'} {'ok' if q0[mode]['gold_in'] else '--'} "
                      f"KL {q0[mode]['kl_first']:.3f} {q0[mode]['text'][:60]!r}", flush=True)
        if args.json:
            args.json.write_text(json.dumps({"settings": settings, "rows": rows}, indent=1))
    settings["elapsed_s"] = time.perf_counter() - began
    if args.timing:
        lines = [f"fastest of {args.timing}, medians over {len(rows)} questions: compose "
                 f"{median(r['compose_s'] for r in rows):.3f} s, read together "
                 f"{median(r['together_s'] for r in rows):.3f} s "
                 f"({median(r['tokens'] for r in rows):.0f} tokens); ratio "
                 f"{median(r['compose_s'] / r['together_s'] for r in rows):.3f}"]
    else:
        lines = summary(rows)
    print("\n".join(lines))
    print(f"{len(rows)} questions in {settings['elapsed_s']:.0f} s")
    if args.json:
        args.json.write_text(json.dumps({"settings": settings, "rows": rows, "summary": lines}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
