"""Mixed-language reading sets from XQuAD, the rule that picks the offline model for them, and their answers' figures.

Builds, from XQuAD's parallel English and Chinese files (google-deepmind/xquad, CC BY-SA 4.0: the 48 SQuAD v1.1 dev
articles, 240 paragraphs and 1,190 questions, professionally translated; the same article, paragraph and question
ids in each language), five files in SQuAD's JSON layout for scripts/evaluate.py. What they hold is derived from
XQuAD and shared under the same licence (CC BY-SA 4.0, attribution: Artetxe, Ruder and Yogatama 2020):

- zh-only.json: the Chinese file as is (evaluate.py joins its short articles into documents of 2,500-5,000 characters).
- zh-kept.json: the same documents (evaluate.py's groups of Chinese articles, each group one article here, titles kept
  as evaluate.py writes them), asking only the Chinese questions of the paragraphs mixed.json keeps in Chinese: the
  same questions as mixed.json, on the all-Chinese text.
- mixed.json: the same documents with every --every-th paragraph (counted over the file from 0; index % every ==
  every - 1) replaced by its English original, as published translations leave passages untranslated; only the
  Chinese questions of the paragraphs that stayed Chinese (so their gold answer is in the text).
- en-on-zh.json: the Chinese documents asked XQuAD's English questions whose English gold answer occurs verbatim in
  the Chinese paragraph (figures, Latin names); the gold is that string.
- zh-on-en.json: the other way: the same groups' English originals asked the Chinese questions whose Chinese gold
  answer occurs verbatim in the English paragraph (figures mostly); the gold is that string.

Evaluate the merged files with each group as one document (--zh-min-chars 1 --zh-max-chars 100000; en-on-zh and
zh-on-en with --lang any --min-chars 1 --max-chars 100000): evaluate.py's --docs N then reads the same N documents
in every file.

`route` says which offline model kvqa.model.presets.reading_model picks for each set's first --docs documents: for
the document alone and for each of its questions (the question asked now), with the page in English and in Chinese.
`report` turns evaluate.py --json outputs into one markdown table (and lists the answers that echo the prompt).

    .venv/bin/python experiments/mixed_language_set.py build --en xquad.en.json --zh xquad.zh.json --out /tmp/mixed
    .venv/bin/python experiments/mixed_language_set.py route --dir /tmp/mixed --docs 9
    .venv/bin/python experiments/mixed_language_set.py report /tmp/mixed/run-*.json
"""

from __future__ import annotations

import argparse
import copy
import json
import re
import sys
import unicodedata
from collections import Counter
from pathlib import Path

MIN_CHARS, MAX_CHARS = 2500, 5000  # evaluate.py's --zh-min-chars / --zh-max-chars defaults


def size(articles: list[dict]) -> int:
    """An article group's size as kvqa.bench.squad.load_squad (evaluate.py's --squad) counts it."""
    return sum(len(p["context"]) + 2 for a in articles for p in a["paragraphs"]) + 16 * len(articles)


def groups(data: list[dict], *, min_chars: int = MIN_CHARS, max_chars: int = MAX_CHARS) -> list[list[int]]:
    """The article indices of each document load_squad builds from `data`, in its order (an article of
    min..max characters alone; shorter ones joined until the group reaches min; a group that would pass max is
    dropped when short, as there)."""
    out: list[list[int]] = []
    group: list[int] = []
    for i, article in enumerate(data):
        if min_chars <= size([article]) <= max_chars:
            out.append([i])
        elif size([article]) < min_chars:
            if group and size([data[j] for j in group] + [article]) > max_chars:
                if size([data[j] for j in group]) >= min_chars:
                    out.append(group)
                group = []
            group.append(i)
            if size([data[j] for j in group]) >= min_chars:
                out.append(group)
                group = []
    return out


def merged(data: list[dict], group: list[int], paragraphs) -> dict:
    """One article holding a group's articles, its text as evaluate.py joins them (each under "## title" when there
    are several). paragraphs(article_index, paragraph_index, paragraph) -> (context, qas) for each paragraph."""
    out = []
    for i in group:
        article = data[i]
        head = f"## {article.get('title', '')}\n\n" if len(group) > 1 else ""
        for k, para in enumerate(article["paragraphs"]):
            context, qas = paragraphs(i, k, para)
            context = context.strip("\n")
            if head:
                qas = [shifted(qa, len(head)) for qa in qas]
                context, head = head + context, ""
            out.append({"context": context, "qas": qas})
    return {"title": " + ".join(data[i].get("title", "") for i in group), "paragraphs": out}


def shifted(qa: dict, by: int) -> dict:
    """A question whose answers' starts move `by` characters (a title put before its paragraph)."""
    qa = copy.deepcopy(qa)
    for answer in qa.get("answers", []):
        answer["answer_start"] += by
    return qa


def build(args: argparse.Namespace) -> int:
    """Write zh-only, zh-kept, mixed, en-on-zh and zh-on-en (SQuAD layout) under --out, and what was built, per file."""
    en = json.loads(args.en.read_text(encoding="utf-8"))
    zh = json.loads(args.zh.read_text(encoding="utf-8"))
    en_data, zh_data = en["data"], zh["data"]
    assert len(en_data) == len(zh_data), "the two files are not parallel"
    index: dict[tuple[int, int], int] = {}  # (article, paragraph) -> paragraph's index over the file
    for i, (a, b) in enumerate(zip(en_data, zh_data)):
        assert len(a["paragraphs"]) == len(b["paragraphs"]), f"article {i}: paragraphs differ"
        for k, (p, q) in enumerate(zip(a["paragraphs"], b["paragraphs"])):
            assert [x["id"] for x in p["qas"]] == [x["id"] for x in q["qas"]], f"article {i} paragraph {k}: ids differ"
            index[i, k] = len(index)

    def english(i: int, k: int) -> bool:
        return index[i, k] % args.every == args.every - 1

    def kept(i, k, para):
        return para["context"], ([] if english(i, k) else para["qas"])

    def mixed(i, k, para):
        return (en_data[i]["paragraphs"][k]["context"], []) if english(i, k) else (para["context"], para["qas"])

    def en_on_zh(i, k, para):
        context = para["context"]
        asked = []
        for qa in en_data[i]["paragraphs"][k]["qas"]:
            golds = list(dict.fromkeys(a["text"].strip() for a in qa["answers"] if a["text"].strip()))
            found = [g for g in golds if verbatim(g, context)]
            if found:  # the first English gold found verbatim in the Chinese paragraph
                asked.append({"id": qa["id"], "question": qa["question"],
                              "answers": [{"text": g, "answer_start": context.find(g)} for g in found]})
        return context, asked

    def zh_on_en(i, k, para):
        context = en_data[i]["paragraphs"][k]["context"]
        asked = []
        for qa in para["qas"]:
            golds = list(dict.fromkeys(a["text"].strip() for a in qa["answers"] if a["text"].strip()))
            found = [g for g in golds if verbatim(g, context)]
            if found:
                asked.append({"id": qa["id"], "question": qa["question"],
                              "answers": [{"text": g, "answer_start": context.find(g)} for g in found]})
        return context, asked

    args.out.mkdir(parents=True, exist_ok=True)
    doc_groups = groups(zh_data)
    info = {"source": "github.com/google-deepmind/xquad (CC BY-SA 4.0)", "every": args.every,
            "groups": [[zh_data[i]["title"] for i in g] for g in doc_groups], "files": {}}
    (args.out / "zh-only.json").write_text(json.dumps(zh, ensure_ascii=False), encoding="utf-8")
    info["files"]["zh-only"] = {"articles": len(zh_data), "questions": count(zh_data)}
    for name, paragraphs in (("zh-kept", kept), ("mixed", mixed), ("en-on-zh", en_on_zh),
                            ("zh-on-en", zh_on_en)):
        data = [merged(zh_data, g, paragraphs) for g in doc_groups]
        (args.out / f"{name}.json").write_text(json.dumps({"version": f"xquad-{name}", "data": data},
                                                          ensure_ascii=False), encoding="utf-8")
        info["files"][name] = {"documents": len(data), "questions": count(data)}
        if name == "mixed":
            info["files"][name]["english_paragraphs"] = sum(english(i, k) for g in doc_groups for i in g
                                                            for k in range(len(zh_data[i]["paragraphs"])))
    (args.out / "built.json").write_text(json.dumps(info, ensure_ascii=False, indent=1), encoding="utf-8")
    print(json.dumps(info["files"], indent=1))
    return 0


def verbatim(gold: str, context: str) -> bool:
    """Whether an English gold answer occurs in a Chinese paragraph as itself, not inside a longer Latin word or
    number ("5" is not found in "1950")."""
    at = context.find(gold)
    while at >= 0:
        end = at + len(gold)
        before = at > 0 and context[at - 1].isascii() and context[at - 1].isalnum()
        after = end < len(context) and context[end].isascii() and context[end].isalnum()
        if not before and not after:
            return True
        at = context.find(gold, at + 1)
    return False


def count(data: list[dict]) -> int:
    """Questions in a SQuAD-layout data list."""
    return sum(len(p["qas"]) for a in data for p in a["paragraphs"])


def documents(path: Path, *, merged_file: bool, min_chars: int = MIN_CHARS,
              max_chars: int = MAX_CHARS) -> list[tuple[str, str, list[str]]]:
    """(name, text, questions) of each document evaluate.py reads from a file (names as it gives them): each
    article alone in a merged file, else its groups of min..max characters."""
    data = json.loads(path.read_text(encoding="utf-8"))["data"]
    out = []
    for g in ([[i] for i in range(len(data))] if merged_file else groups(data, min_chars=min_chars,
                                                                          max_chars=max_chars)):
        parts, asked = [], []
        for i in g:
            head = f"## {data[i].get('title', '')}\n\n" if len(g) > 1 else ""
            for para in data[i]["paragraphs"]:
                parts.append(head + para["context"].strip("\n"))
                head = ""
                asked += [qa["question"].strip() for qa in para["qas"]]
        out.append((f"{path.stem}-{len(out) + 1:03d}", "\n\n".join(parts), asked))
    return out


def route(args: argparse.Namespace) -> int:
    """The model reading_model picks per document and per question, for each page language, per set."""
    from kvqa.config import Config
    from kvqa.messages import Message
    from kvqa.model.presets import reading_model
    from kvqa.prompt import CJK

    config = Config(model="SmolLM2-135M-Instruct", model_reason=Message("reason.default"))
    sets = [("zh-only", args.dir / "zh-only.json", False), ("zh-kept", args.dir / "zh-kept.json", True),
            ("mixed", args.dir / "mixed.json", True), ("en-on-zh", args.dir / "en-on-zh.json", True),
            ("zh-on-en", args.dir / "zh-on-en.json", True)]
    if args.en:
        sets.append(("en-only (control)", args.en, False))
    result = {}
    for name, path, merged_file in sets:
        english = name == "en-only (control)"  # English articles, joined as evaluate.py --lang en joins them
        docs = documents(path, merged_file=merged_file, **({"min_chars": 6000, "max_chars": 28000} if english else {}))
        docs = docs[:args.docs]
        row = {"documents": len(docs), "cjk_share": [round(share(t, CJK), 2) for _, t, _ in docs]}
        for page in ("en", "zh"):
            picked = [reading_model(config, text, page_lang=page) for _, text, _ in docs]
            row[f"docs_page_{page}"] = tally(picked)
            picked = [reading_model(config, text, page_lang=page, questions=[q]) for _, text, asked in docs
                      for q in asked]
            row[f"questions_page_{page}"] = tally(picked)
        result[name] = row
    for path in args.runs:  # the questions a run asked, on the documents it read
        run = json.loads(path.read_text(encoding="utf-8"))
        texts = {}
        for source in map(Path, run["settings"]["sets"]):
            texts.update({name: text for name, text, _ in documents(source, merged_file=source.stem != "zh-only")})
        row = {"questions": len(run["rows"])}
        for page in ("en", "zh"):
            row[f"asked_page_{page}"] = tally([reading_model(config, texts[r["doc"]], page_lang=page,
                                                             questions=[r["question"]]) for r in run["rows"]])
            row[f"unread_page_{page}"] = [r["question"] for r in run["rows"]
                                          if reading_model(config, texts[r["doc"]], page_lang=page,
                                                           questions=[r["question"]]) is None]
        result[path.stem] = row
    print(json.dumps(result, ensure_ascii=False, indent=1))
    return 0


def share(text: str, cjk: re.Pattern) -> float:
    """CJK ideographs' share of the letters of a text."""
    letters = sum(c.isalpha() for c in text)
    return len(cjk.findall(text)) / letters if letters else 0.0


def tally(picked: list) -> dict[str, str]:
    """'model (reason id)': 'count (share)' over a list of reading_model results (None: the default kept)."""
    keys = Counter("SmolLM2-135M-Instruct (kept)" if p is None else f"{p[0]} ({p[1].key})" for p in picked)
    return {k: f"{v} ({v / len(picked):.0%})" for k, v in keys.most_common()}


# The prompt's fixed texts (kvqa.prompt: the chat turn's and the completion layout's instructions and labels) an
# answer may repeat instead of answering.
ECHO_ZH = ("请根据文档用中文简短回答", "简短回答", "根据文档", "相关段落", "用中文", "问题的语言", "问题：", "回答：",
           "段落：", "文档：")
ECHO_EN = ("you answer questions about the document", "use only the document", "if it does not contain the answer",
           "answer in the language of the question", "answer each question", "in the language of the question",
           "answer briefly, from the document", "from the document:", "question:", "answer:", "passage:")


def echoes(answer: str, question: str) -> list[str]:
    """What of the prompt an answer repeats: its fixed phrases (case-folded, NFKC: full-width colons as ASCII ones,
    so 问题： is matched as 问题:), and the question itself (all its characters but punctuation, in a row)."""
    text = unicodedata.normalize("NFKC", answer).casefold()
    found = [m for m in ECHO_ZH + ECHO_EN if unicodedata.normalize("NFKC", m).casefold() in text]
    bare = "".join(c for c in unicodedata.normalize("NFKC", question).casefold()
                   if not unicodedata.category(c).startswith("P") and not c.isspace())
    flat = "".join(c for c in text if not unicodedata.category(c).startswith("P") and not c.isspace())
    if len(bare) >= 6 and bare in flat:
        found.append("the question")
    return found


def report(args: argparse.Namespace) -> int:
    """One markdown row per evaluate.py --json output, then the answers that echo the prompt. The gold and the first
    source are counted as evaluate.py's gold_in_answer / gold_in_source (SQuAD-normalised; a text with CJK loses its
    spaces, a Latin gold keeps them, so "William Iron Arm" is missed in a Chinese sentence), then as its `correct` /
    `source_correct` (spaces kept)."""
    print("| run | set | model | questions | answer holds the gold (SQuAD / spaces kept) | token F1 | "
          "first source holds it (SQuAD / spaces kept) | "
          "stopped repeating or looped to the limit | echoes the prompt: 请根据文档用中文简短回答 / any instruction "
          "phrase / the question / any | answer in the question's language | median TTFT | median answer |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    listed = []
    for path in args.runs:
        run = json.loads(path.read_text(encoding="utf-8"))
        rows, s = run["rows"], run["summary"]["all"]
        n = len(rows)
        loops = sum(r["stop_reason"] == "repeating" or r["looped_to_limit"] for r in rows)
        echoed = [(r, echoes(r["answer"], r["question"])) for r in rows]
        exact = sum(ECHO_ZH[0] in found for _, found in echoed)
        fixed = sum(any(e != "the question" for e in found) for _, found in echoed)
        asked = sum("the question" in found for _, found in echoed)
        either = sum(bool(found) for _, found in echoed)
        listed += [(path.stem, r, found) for r, found in echoed if found]
        sets = ", ".join(Path(p).stem for p in run["settings"]["sets"])
        print(f"| {path.stem} | {sets} | {run['settings']['model']} | {n} | {s['gold_in_answer']:.1%} "
              f"({sum(r['gold_in_answer'] for r in rows)}) / {s['correct']:.1%} ({sum(r['correct'] for r in rows)}) | "
              f"{s['f1']:.3f} | {s['gold_in_source']:.1%} / {s['source_correct']:.1%} | "
              f"{loops / n:.1%} ({loops}) | {exact} / {fixed} / {asked} / {either} | "
              f"{s['answer_in_question_lang']:.0%} | {s['median_ttft_s']:.2f} s | {s['median_s']:.2f} s |")
    if args.same:  # the same questions in two runs: gold-in-answer on both, answer by answer
        a, b = (json.loads(Path(p).read_text(encoding="utf-8"))["rows"] for p in args.same)
        left = {r["question"]: r["gold_in_answer"] for r in a}
        pairs = [(left[r["question"]], r["gold_in_answer"]) for r in b if r["question"] in left]
        print(f"\nsame questions in {args.same[0].stem} and {args.same[1].stem}: {len(pairs)}; gold in the answer "
              f"{sum(x for x, _ in pairs)} and {sum(y for _, y in pairs)}; both {sum(x and y for x, y in pairs)}, "
              f"only the first {sum(x and not y for x, y in pairs)}, "
              f"only the second {sum(y and not x for x, y in pairs)}")
    if listed:
        print("\nanswers that echo the prompt:")
        for run, r, found in listed:
            print(f"- {run} {r['doc']}: {r['question']!r} -> {r['answer'][:160]!r} [{', '.join(found)}]")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="write the five files under --out")
    b.add_argument("--en", type=Path, required=True, help="xquad.en.json")
    b.add_argument("--zh", type=Path, required=True, help="xquad.zh.json")
    b.add_argument("--out", type=Path, required=True, help="the folder for the built files")
    b.add_argument("--every", type=int, default=3, help="every N-th paragraph of the file goes back to English")
    r = sub.add_parser("route", help="the model reading_model picks per set, document and question")
    r.add_argument("--dir", type=Path, required=True, help="the folder `build` wrote")
    r.add_argument("--docs", type=int, default=9, help="the first N documents of each set")
    r.add_argument("--en", type=Path, default=None, help="xquad.en.json: English documents as a control")
    r.add_argument("--runs", type=Path, nargs="*", default=[],
                   help="evaluate.py --json outputs: route the questions each asked, on its documents")
    p = sub.add_parser("report", help="a markdown table from evaluate.py --json outputs")
    p.add_argument("runs", type=Path, nargs="+", help="evaluate.py --json outputs")
    p.add_argument("--same", type=Path, nargs=2, default=None, help="two runs asking the same questions: compare")
    args = parser.parse_args(argv)
    return {"build": build, "route": route, "report": report}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
