"""The command line: `python -m kvqa ask DOC -q QUESTION ...`. kvqa errors become one line on stderr and exit code 2."""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

from kvqa.config import Config, config_from_env
from kvqa.errors import KvqaError
from kvqa.timing import ReadCosts

READ_COSTS = "read-costs.json"  # in the cache folder: each model's latest read's cost, for the next read's estimate

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
             "temperature", "repeat_stop", "draft_tokens", "compile", "weights", "kv_cache", "gather_tokens")
    settings = {name: getattr(args, name, None) for name in flags}
    if getattr(args, "no_draft", False):
        settings["draft_tokens"] = 0
    return config_from_env(os.environ, **settings)


def _ask(args: argparse.Namespace) -> int:
    """Answer each question through a Session (parts, routing, the store), printing as it goes."""
    from kvqa.documents.parts import asked_range
    from kvqa.documents.reading import read_paths

    config = config_from(args)
    if any(not q.strip() for q in args.question):  # checked again when answering; here, before anything is read
        raise KvqaError("cli.empty_question")
    say = _say(chatty=sys.stderr.isatty() and not args.json)  # progress for people; scripts get only the error line
    document = read_paths(args.doc, config=config, stdin=sys.stdin.buffer,
                          progress=lambda f, message: say(f"\r{message}", end=""))
    part = asked_range(document, pages=args.pages, chars=args.chars)
    # the rest loads torch and transformers (seconds): a wrong argument or document is told before it
    from kvqa.cache.store import store_for
    from kvqa.engines import make_engine
    from kvqa.export import answer_notes, part_dict, range_read, session_dict, summary_table
    from kvqa.messages import Message, render
    from kvqa.model.presets import language_note, reading_model, unread_question
    from kvqa.session.session import Ask, Session

    reader = reading_model(config, document.text, questions=args.question)
    if reader:  # the model that reads the document's and the questions' languages (--model still chooses)
        config = config.replaced(model=reader[0], model_reason=reader[1])
        print(f"kvqa: reading with {reader[0]}: {reader[1]} (--model chooses another)", file=sys.stderr)
    elif not config.remote.engine_url:  # a question the model cannot answer: what to do, in the question's language
        for q in args.question:
            if refusal := unread_question(config.model, q, cache_dir=config.cache_dir):
                print(f"kvqa: {render(refusal, 'zh')}", file=sys.stderr)
                return EXIT_USER_ERROR
    say(f"loading {config.model} ...")
    store = None if args.no_store or args.no_cache else store_for(config)
    engine = make_engine(config, store=store)
    info = engine.load()
    say(f"loaded {info.model} on {info.device} ({info.precision}) in {info.load_s:.1f} s")
    session = Session(engine, recompute=args.no_cache)
    costs_path = config.cache_dir / READ_COSTS  # each model's latest read here, kept: the next read's estimate
    costs = ReadCosts.kept(costs_path)
    if info.model in costs and not args.no_cache:  # the document tokenized for it only when there is one to say
        tokens = engine.count_tokens(document.text)
        estimate = costs.estimate(info.model, min(tokens, info.context_tokens))
        say(f"{info.model} reads about {tokens:,} tokens here in about {estimate:.0f} s (from its last read here)")
    started, ticks = time.perf_counter(), []

    def progress(f: float) -> None:
        ticks.append((f, time.perf_counter() - started))
        say(f"\rprefill {f:4.0%}", end="")

    session.load(document, part=part, progress=progress)
    if session.prefilled is not None and session.origin == "prefill":
        costs.learn(info.model, session.prefilled.tokens, ticks)
        costs.keep(costs_path)
    for note in (session.notice, language_note(info.model, document.text, cache_dir=config.cache_dir)):
        if note:
            print(f"kvqa: {note}", file=sys.stderr)
    result = session_dict(session)  # what was read first: later questions may read other parts
    if args.no_cache:  # counted by each question's prompt
        result.update(cache_source=None, parts=[part_dict(session.document.part, document) | {"tokens": None}])
    else:
        say(session.prefilled.read_line)
    result.update(range_read(session.document, document))
    for q in args.question:
        if not args.json:
            print(f"\nQ: {q}\nA: ", end="", flush=True)
        routed = lambda d: print(f"kvqa: {session.notice}", file=sys.stderr)  # noqa: E731 - another part was read
        with session.ask(Ask(q, progress=progress, on_part=routed)) as pieces:
            for piece in pieces:
                if not args.json:
                    print(piece, end="", flush=True)
            answer = pieces.answer
        turn, also = session.turns[-1], session.turns[-1].also
        if turn.composed is not None:  # answered from several parts' passages at once
            print("kvqa: " + str(Message("answer.composed", parts=", ".join(map(str, turn.composed.numbers)),
                                         tokens=turn.composed.tokens, seconds=turn.composed.seconds)),
                  file=sys.stderr)
        elif also is not None:  # another part matched too: how to ask it there
            print("kvqa: " + str(Message("cli.also", also=session.also_index + 1, parts=len(session.parts),
                                         flag="pages" if also.unit == "pages" else "chars", also_part=also.name,
                                         part=turn.part.name, range=f"{also.first}-{also.last}")), file=sys.stderr)
        if not args.json:
            print(answer_notes(answer))
    result["answers"] = session_dict(session)["answers"]
    if args.no_cache:
        result["context_tokens"] = max(t.timings.question_tokens for t in session.turns)
    if store is not None:
        store.flush()  # the cache's file is written in the background: let it finish before the process ends
    if args.json:
        print(json.dumps(result, ensure_ascii=False))
    else:
        print(summary_table(result))
    return 0


def _say(*, chatty: bool):
    return (lambda *a, **k: print(*a, **k, file=sys.stderr, flush=True)) if chatty else (lambda *a, **k: None)


def _doctor(args: argparse.Namespace) -> int:
    from kvqa.doctor import diagnose, report
    checks = diagnose(config_from(args), os.environ)
    print(report(checks, as_json=args.json))
    return 1 if any(c.problem for c in checks) else 0


def _bench(args: argparse.Namespace) -> int:
    from kvqa.bench.run import run_from_args
    return run_from_args(args, config_from(args))


def _add_model_flags(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model",
                   help="Hugging Face model id, local folder, or an offline model: Qwen2.5-Coder-1.5B-Instruct, "
                   "Qwen2.5-Coder-0.5B-Instruct, SmolLM2-135M-Instruct or gemma-3-270m (default: $KVQA_MODEL, else "
                   "the best installed one that reads the document's and the questions' languages: the 1.5B, or on "
                   "a CPU the 0.5B for a document over about 8k tokens)")
    p.add_argument("--device", help="auto, cpu, cuda, cuda:N or mps (default: auto)")
    p.add_argument("--dtype", help="auto, float32, bfloat16 or float16 (default: auto)")
    p.add_argument("--weights", help="the weights' form: auto, fp32 or int8 (one byte a weight, on a CPU; default: "
                   "auto, int8 on a CPU in float32, or $KVQA_WEIGHTS); bench: a comma-separated list, each run in turn")
    p.add_argument("--kv-cache", dest="kv_cache", choices=("auto", "int8", "model"),
                   help="what the cache holds keys and values in: int8 (a quarter of float32's bytes, on a CPU) or "
                   "model (its dtype); default: auto, int8 for the offline models on a CPU, or $KVQA_KV_CACHE")
    p.add_argument("--compile", choices=("on", "off"), help="decode through torch.compile on a fixed-shape cache "
                   "(CUDA graphs on a GPU); the first answer pays the compile (default: off, or $KVQA_COMPILE)")


def _add_engine_flag(p: argparse.ArgumentParser) -> None:
    p.add_argument("--engine-url", help="answer on an OpenAI-compatible server instead, e.g. http://127.0.0.1:8080/v1 "
                   "(default: $KVQA_ENGINE_URL; its model: $KVQA_ENGINE_MODEL, key: $KVQA_ENGINE_API_KEY)")


def _parser() -> argparse.ArgumentParser:
    from kvqa.documents.reading import TYPES

    parser = argparse.ArgumentParser(prog="python -m kvqa", description="Ask questions about a long document; "
                                     "the document is read by the model once.")
    commands = parser.add_subparsers(dest="command")
    ask = commands.add_parser("ask", help="answer questions about a document")
    ask.add_argument("doc", metavar="DOC", nargs="+", help=f"a file ({TYPES}; scanned pages and images are read by "
                     "OCR), or - to read text from stdin; several are read as one document, each named")
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
    ask.add_argument("--gather-tokens", type=int,
                     help="a long document read in parts: answer a question from its passages of every part read, "
                          "composed into one cache of about this many tokens (approximate; e.g. 4096; default 0: "
                          "from the one part that matches it)")
    ask.add_argument("--no-cache", action="store_true", help="recompute the whole prompt for every question")
    ask.add_argument("--no-store", action="store_true", help="neither restore the document's cache from the store "
                     "($KVQA_STORE_DIR) nor write it there")
    ask.add_argument("--json", action="store_true", help="print one JSON object with answers and timings")
    ask.set_defaults(run=_ask)
    from kvqa.bench.flags import add_parser as add_bench
    add_bench(commands, model_flags=_add_model_flags, run=_bench)
    doctor = commands.add_parser("doctor", help="show what kvqa will use here, and how to fix what is wrong")
    _add_model_flags(doctor)
    _add_engine_flag(doctor)
    doctor.add_argument("--json", action="store_true", help="print the checks as JSON")
    doctor.set_defaults(run=_doctor)
    return parser


def _quiet_libraries() -> None:
    """Keep library warnings and progress bars out of the user's terminal: transformers reads these variables as it
    loads (after this, in `kvqa ask`, so an error in the arguments or the document comes before torch loads); where it
    has loaded already (main() called inside a program that uses it), it is told directly."""
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if "transformers" not in sys.modules:
        return
    try:
        from transformers.utils import logging

        logging.set_verbosity_error()
        logging.disable_progress_bar()
    except Exception:
        pass
