"""`python -m kvqa bench`'s flags, apart from the bench itself: the CLI builds its parser without importing torch."""

from __future__ import annotations


def add_parser(commands, *, model_flags, run) -> None:
    """`python -m kvqa bench`'s flags (kvqa.cli adds the model's, `model_flags`)."""
    bench = commands.add_parser("bench", help="time kvqa against recomputing the prompt and transformers' cache copy")
    model_flags(bench)
    bench.add_argument("--contexts", default="512,1024,2048,4096",
                       help="document prompt lengths in tokens, comma-separated (default 512,1024,2048,4096)")
    bench.add_argument("--questions", type=int, default=3, help="how many built-in questions to ask (default 3)")
    bench.add_argument("--max-new-tokens", type=int, default=32, help="answer length in tokens (default 32)")
    bench.add_argument("--chunk-size", type=int, help="kvqa's prefill chunk in tokens (default 512)")
    bench.add_argument("--draft-tokens", type=int, help="kvqa rows: tokens guessed per step (default 6; 0: off)")
    bench.add_argument("--quote-chars", help="each quoted passage's length in characters, comma-separated to run "
                       "each in turn, e.g. 0,120 (0: whole; default: the setting's, KVQA_QUOTE_CHARS)")
    bench.add_argument("--doc", help="the document (.pdf, .txt, .md), repeated to fill the longest context "
                       "(default: the sample document)")
    bench.add_argument("--random-init", metavar="CONFIG_JSON", help="random weights from this model config (a path, "
                       "or a name in kvqa/model/configs such as llama-3.2-3b) with --model's tokenizer: for "
                       "timing only")
    bench.add_argument("--store", action="store_true", help="instead: time restoring each context's cache from the "
                       "disk tier against prefilling it (try --contexts 1024,4096,7000)")
    bench.add_argument("--json", action="store_true", help="print one JSON object: machine, model, results")
    bench.add_argument("--plot", metavar="PATH", help="write a PNG of TTFT against context length")
    bench.set_defaults(run=run)
