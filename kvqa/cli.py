"""The command line: `python -m kvqa ask DOC -q QUESTION ...`. kvqa errors become one line on stderr and exit code 2."""

from __future__ import annotations

import argparse
import json
import os
import sys
from dataclasses import replace

from .config import Config, config_from_env
from .errors import KvqaError

EXIT_USER_ERROR = 2


def main(argv: list[str] | None = None) -> int:
    parser = _parser()
    args = parser.parse_args(argv)
    if not getattr(args, "command", None):
        parser.print_help(sys.stderr)
        return EXIT_USER_ERROR
    _quiet_libraries()
    try:
        return args.run(args)
    except KvqaError as e:
        print(f"kvqa: {e}", file=sys.stderr)
        return EXIT_USER_ERROR
    except KeyboardInterrupt:
        print("kvqa: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        return 1
    except Exception as e:  # a bug: still one line, no traceback
        print(f"kvqa: unexpected error ({type(e).__name__}: {e}); please report it", file=sys.stderr)
        return 1


def config_from(args: argparse.Namespace) -> Config:
    """Config from defaults, then KVQA_* environment variables, then flags."""
    flags = ("model", "engine_url", "device", "dtype", "chunk_size", "max_new_tokens", "max_question_tokens",
             "temperature", "repeat_stop", "draft_tokens", "compile")
    settings = {name: getattr(args, name, None) for name in flags}
    if getattr(args, "no_draft", False):
        settings["draft_tokens"] = 0
    return config_from_env(os.environ, **settings)


def _ask(args: argparse.Namespace) -> int:
    from .documents import combine, decode_text, document_from_text, load_documents
    from .engines import make_engine
    from .export import FORMAT, answer_dict, document_dict, part_dict, parts_list
    from .messages import Message
    from .parts import notice, parse_range, part_of, prefill_part, prefill_parts, routed, select
    from .presets import language_note, reader_for
    from .store import store_for

    config = config_from(args)
    documents, problems = [], []
    for doc in args.doc:
        if doc == "-":
            documents.append(document_from_text(decode_text(sys.stdin.buffer.read(), name="standard input"),
                                                name="stdin"))
        else:
            loaded, failed = load_documents([doc], config=config)
            documents, problems = documents + loaded, problems + failed
    document = combine(documents, problems=problems)  # raises when nothing could be read
    for problem in problems:  # the others are still read
        print(f"kvqa: skipped: {problem}", file=sys.stderr)
    if args.pages and args.chars:
        raise KvqaError("cli.pages_and_chars")
    if args.pages and not document.page_starts:
        raise KvqaError("cli.pages_for_pdf")
    if args.chars and document.page_starts:
        raise KvqaError("cli.chars_for_text")
    part = parse_range(args.pages or args.chars, document) if args.pages or args.chars else None
    questions = args.question
    for q in questions:  # checked again when answering; here so that it fails before the model loads
        if not q.strip():
            raise KvqaError("cli.empty_question")
    chatty = sys.stderr.isatty() and not args.json  # progress for people; scripts get only the error line
    say = (lambda *a, **k: print(*a, **k, file=sys.stderr, flush=True)) if chatty else (lambda *a, **k: None)
    reader = None if config.engine_url else reader_for(config.model, config.model_reason, document.text,
                                                       cache_dir=config.cache_dir)
    if reader:  # the model that reads the document's language (--model still chooses)
        config = replace(config, model=reader[0], model_reason=reader[1])
        print(f"kvqa: reading with {reader[0]}: {reader[1]} (--model chooses another)", file=sys.stderr)
    say(f"loading {config.model} ...")
    store = None if args.no_store or args.no_cache else store_for(config)
    engine = make_engine(config, store=store)
    info = engine.load()
    say(f"loaded {info.model} on {info.device} ({info.dtype}) in {info.load_s:.1f} s")
    result = {"format": FORMAT, "model": info.model, "engine": info.kind, "dtype": info.dtype,
              "exact_vs_recompute": info.exact_vs_recompute, "guarantee": info.guarantee,
              "document": document_dict(document),
              "context_tokens": 0, "prefill_s": 0.0, "read_s": None, "cache_bytes": 0, "cache_source": None,
              "answers": []}
    if args.no_cache:  # recomputed per question: a part must be chosen (--pages/--chars) if it does not fit
        read = select(document, *part) if part else document
        result["parts"] = [part_dict(read.part, document) | {"tokens": None}]  # counted by each question's prompt
    else:
        progress = lambda f: say(f"\rprefill {f:4.0%}", end="")  # noqa: E731
        doc, parts = prefill_parts(lambda d: engine.prefill(d, progress=progress), engine.count_tokens, document,
                                   first=part[0] if part else None, last=part[1] if part else None)
        read = doc.document  # the document, or the part of it that fits the model
        result["parts"] = parts_list(document, parts)
    said = notice(read, document, asked=part, parts=1 if args.no_cache else len(parts))
    if said:
        print(f"kvqa: {said}", file=sys.stderr)
    language = language_note(info.model, document.text, cache_dir=config.cache_dir)
    if language:
        print(f"kvqa: {language}", file=sys.stderr)
    if read.part is not None:
        key = "pages" if read.part.unit == "pages" else "chars"
        result.update({f"{key}_read": [read.part.first, read.part.last], f"{key}_total": read.part.total})
    elif document.page_starts:
        result.update(pages_read=[1, len(document.page_starts)], pages_total=len(document.page_starts))
    if args.no_cache:
        def run(q):
            return engine.stream_without_cache(read, q)
    else:
        if doc.cache_source == "disk":
            first = f" (first read in {doc.read_s:.2f} s)" if doc.read_s is not None else ""
            say(f"restored {doc.tokens:,} tokens from the store in {doc.prefill_s:.2f} s{first}, "
                f"cache {doc.cache_bytes / 2**20:,.1f} MiB")
        else:
            say(f"\rprefilled {doc.tokens:,} tokens in {doc.prefill_s:.2f} s "
                f"({doc.tokens_per_s:,.0f} tokens/s), cache {doc.cache_bytes / 2**20:,.1f} MiB")
        result.update(context_tokens=doc.tokens, prefill_s=doc.prefill_s, read_s=doc.first_read_s,
                      cache_bytes=doc.cache_bytes, cache_source=doc.cache_source)

        def run(q):
            return engine.stream(doc, q)
    current = 0
    for q in questions:
        also = None  # another part that matches the question too
        if not args.no_cache and not part and len(parts) > 1:  # to the part that matches the question best
            target, index = routed(document, parts, q, current=current)
            if index is not None:
                also = part_of(document, parts[index][0], parts[index][1])
            if target != current:
                first, last, _ = parts[target]
                doc = prefill_part(lambda d: engine.prefill(d, progress=progress), engine.count_tokens, document,
                                   first=first, last=last)
                read, current = doc.document, target
                said = Message("notice.routed", part=read.part.name, name=document.name, index=target + 1,
                               parts=len(parts))
                print(f"kvqa: {said}", file=sys.stderr)
            if also is not None:
                flag = "pages" if also.unit == "pages" else "chars"
                print("kvqa: " + str(Message("cli.also", also=index + 1, parts=len(parts), flag=flag,
                                             also_part=also.name, part=read.part.name,
                                             range=f"{also.first}-{also.last}")), file=sys.stderr)
        if not args.json:
            print(f"\nQ: {q}\nA: ", end="", flush=True)
        with run(q) as pieces:
            for piece in pieces:
                if not args.json:
                    print(piece, end="", flush=True)
            answer = pieces.answer
        t = answer.timings
        result["answers"].append(answer_dict(q, answer.text, t, stop_reason=answer.stop_reason,
                                             sources=answer.sources, unsupported=answer.unsupported,
                                             part=part_dict(read.part, document),
                                             also=part_dict(also, document) if also else None))
        if args.no_cache:
            result["context_tokens"] = max(result["context_tokens"], t.question_tokens)
        if not args.json:
            print(f"\n   [{answer.stop_reason}]" if answer.stop_reason == "repeating" else "")
            if answer.unsupported:
                print(f"   {Message('answer.unsupported', items=', '.join(answer.unsupported))}")
            for n, source in enumerate(answer.sources, start=1):
                where = f"page {source.page}, " if source.page else ""
                print(f"   source {n} ({where}characters {source.start:,}-{source.end:,}): "
                      f"{_quote(source.text)}")
    if store is not None:
        store.flush()  # the cache's file is written in the background: let it finish before the process ends
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        _print_summary(result, no_cache=args.no_cache)
    return 0


def _doctor(args: argparse.Namespace) -> int:
    from .doctor import diagnose, report

    checks = diagnose(config_from(args), os.environ)
    print(report(checks, as_json=args.json))
    return 1 if any(c.problem for c in checks) else 0


def _bench(args: argparse.Namespace) -> int:
    from .bench import run_from_args

    return run_from_args(args, config_from(args))


def _quote(text: str, limit: int = 160) -> str:
    text = " ".join(text.split())
    return f"“{text if len(text) <= limit else text[: limit - 1] + '…'}”"


def _print_summary(result: dict, *, no_cache: bool) -> None:
    print("\n" + result["guarantee"])
    how = "restored from the store" if result["cache_source"] == "disk" else "prefill"
    print("\n" + ("no cache: every question recomputed the whole prompt" if no_cache else
                  f"{how}: {result['context_tokens']:,} tokens once in {result['prefill_s']:.2f} s"))
    print(f"{'question':<40} {'tokens in':>9} {'new':>5} {'TTFT s':>8} {'total s':>8}")
    for a in result["answers"]:
        q = a["question"] if len(a["question"]) <= 40 else a["question"][:37] + "..."
        print(f"{q:<40} {a['question_tokens']:>9,} {a['new_tokens']:>5} {a['ttft_s']:>8.3f} {a['answer_s']:>8.3f}")


def _add_model_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model",
                   help="Hugging Face model id, local folder, or an offline model: SmolLM2-135M-Instruct or "
                   "gemma-3-270m (default: $KVQA_MODEL, else SmolLM2-135M-Instruct, and gemma-3-270m for a mostly "
                   "Chinese document)")
    p.add_argument("--device", help="auto, cpu, cuda, cuda:N or mps (default: auto)")
    p.add_argument("--dtype", help="auto, float32, bfloat16 or float16 (default: auto)")
    p.add_argument("--compile", choices=("on", "off"), help="decode through torch.compile on a fixed-shape cache "
                   "(CUDA graphs on a GPU); the first answer pays the compile (default: off, or $KVQA_COMPILE)")


def _add_engine_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine-url", help="answer on an OpenAI-compatible server instead, e.g. http://127.0.0.1:8080/v1 "
                   "(default: $KVQA_ENGINE_URL; its model: $KVQA_ENGINE_MODEL, key: $KVQA_ENGINE_API_KEY)")


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m kvqa", description="Ask questions about a long document; "
                                     "the document is read by the model once.")
    commands = parser.add_subparsers(dest="command")
    ask = commands.add_parser("ask", help="answer questions about a document")
    ask.add_argument("doc", metavar="DOC", nargs="+", help="a .pdf, .txt or .md file, or - to read text from "
                     "stdin; several are read as one document, each named")
    ask.add_argument("--pages", help="a PDF's pages to read, like 14-27 (default: all, or the first that fit)")
    ask.add_argument("--chars", help="a text's characters to read, like 1-40000 (default: all, or the first that fit)")
    ask.add_argument("-q", "--question", action="append", required=True, help="a question (repeat for more)")
    _add_model_flags(ask)
    _add_engine_flag(ask)
    ask.add_argument("--max-new-tokens", type=int, help="longest answer in tokens (default 256)")
    ask.add_argument("--max-question-tokens", type=int, help="longest question in tokens (default 512)")
    ask.add_argument("--chunk-size", type=int, help="prefill chunk in tokens (default 512)")
    ask.add_argument("--temperature", type=float, help="0 (default) answers greedily and exactly")
    ask.add_argument("--repeat-stop", type=int, help="end an answer that repeats itself over this many tokens "
                     "(default 12; 0: never)")
    ask.add_argument("--draft-tokens", type=int, help="tokens guessed from the document and checked per step "
                     "(default 6; greedy answers stay the same)")
    ask.add_argument("--no-draft", action="store_true", help="decode one token per step (same as --draft-tokens 0)")
    ask.add_argument("--no-cache", action="store_true", help="recompute the whole prompt for every question")
    ask.add_argument("--no-store", action="store_true", help="neither restore the document's cache from the store "
                     "($KVQA_STORE_DIR) nor write it there")
    ask.add_argument("--json", action="store_true", help="print one JSON object with answers and timings")
    ask.set_defaults(run=_ask)
    bench = commands.add_parser("bench", help="time kvqa against recomputing the prompt and transformers' cache copy")
    _add_model_flags(bench)
    bench.add_argument("--contexts", default="512,1024,2048,4096",
                       help="document prompt lengths in tokens, comma-separated (default 512,1024,2048,4096)")
    bench.add_argument("--questions", type=int, default=3, help="how many built-in questions to ask (default 3)")
    bench.add_argument("--max-new-tokens", type=int, default=32, help="answer length in tokens (default 32)")
    bench.add_argument("--chunk-size", type=int, help="kvqa's prefill chunk in tokens (default 512)")
    bench.add_argument("--draft-tokens", type=int, help="kvqa rows: tokens guessed per step (default 6; 0: off)")
    bench.add_argument("--doc", help="the document (.pdf, .txt, .md), repeated to fill the longest context "
                       "(default: the sample document)")
    bench.add_argument("--random-init", metavar="CONFIG_JSON", help="random weights from this model config (a path, "
                       "or a name in kvqa/configs such as llama-3.2-3b) with --model's tokenizer: for timing only")
    bench.add_argument("--store", action="store_true", help="instead: time restoring each context's cache from the "
                       "disk tier against prefilling it (try --contexts 1024,4096,7000)")
    bench.add_argument("--json", action="store_true", help="print one JSON object: machine, model, results")
    bench.add_argument("--plot", metavar="PATH", help="write a PNG of TTFT against context length")
    bench.set_defaults(run=_bench)
    doctor = commands.add_parser("doctor", help="show what kvqa will use here, and how to fix what is wrong")
    _add_model_flags(doctor)
    _add_engine_flag(doctor)
    doctor.add_argument("--json", action="store_true", help="print the checks as JSON")
    doctor.set_defaults(run=_doctor)
    return parser


def _quiet_libraries() -> None:
    """Keep library warnings and progress bars out of the user's terminal."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    try:
        from transformers.utils import logging

        logging.set_verbosity_error()
        logging.disable_progress_bar()
    except Exception:
        pass
