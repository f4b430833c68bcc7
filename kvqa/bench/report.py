"""Reading a bench result: the table with the target checks, and the plot of TTFT against context length."""

from __future__ import annotations

from pathlib import Path

from .methods import METHODS, PREFILL_REPEATS, STEP_REPEATS


def _mib(n: int | None) -> str:
    return "-" if not n else f"{n / 2**20:,.1f}"


def _s(x: float | None) -> str:
    if x is None:
        return "-"
    return f"{x * 1000:,.1f} ms" if x < 1 else f"{x:,.2f} s"


def _x(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:,.2f}x"


def format_table(result: dict) -> str:
    """The results as a readable table, followed by the target checks at the longest context."""
    m = result["machine"]
    head = (f"{result['model']} on {m['device']} ({m['gpu'] or m['cpu']}, {m['cores']} cores, {m['dtype']}, "
            f"torch {m['torch']}), {m['date']}")
    columns = ("method", "weights", "quote", "context", "prefill", "prefill tok/s", "TTFT", "floor TTFT", "TTFT/floor",
               "answer", "decode tok/s", "step", "floor step", "step/floor", "fork", "peak MiB", "cache MiB",
               "theory MiB", "same")
    rows = []
    for r in result["results"]:
        rows.append((r["method"], r.get("weights", "fp32"), str(r.get("quote_chars") or "whole"),
                     f"{r['context_tokens']:,}",
                     _s(r["prefill_s"]) if r["prefill_s"] else "-",
                     f"{r['prefill_tokens_per_s']:,.0f}" if r["prefill_s"] else "-", _s(r["ttft_s"]),
                     _s(r["floor_ttft_s"]), _x(r["ttft_over_floor"]), _s(r["answer_s"]),
                     f"{r['decode_tokens_per_s']:,.1f}", _s(r["decode_step_s"]), _s(r["decode_floor_s"]),
                     _x(r["decode_over_floor"]), _s(r["fork_s"]) if r["fork_s"] else "0",
                     _mib(r["peak_memory_bytes"]), _mib(r["cache_bytes"]), _mib(r["theoretical_cache_bytes"]),
                     "yes" if r["same_answers"] else "NO"))
    widths = [max(len(c), *(len(row[i]) for row in rows)) for i, c in enumerate(columns)]

    def line(cells):
        return "  ".join(c.ljust(w) if i < 1 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths)))

    out = [head]
    if m.get("bandwidth_gb_s"):
        out.append(f"memory read bandwidth {m['bandwidth_gb_s']:,.1f} GB/s (fastest of {m['bandwidth_runs']} sums and "
                   f"matrix-vector products over {_mib(m['bandwidth_tensor_bytes'])} MiB of float32 on {m['device']}, "
                   f"{m['torch_threads']} torch threads); floor step = (weights + KV at the context) / bandwidth")
    if result.get("compiled_decode"):
        out.append(f"decode step compiled (torch.compile{', CUDA graphs' if m['device'].startswith('cuda') else ''}); "
                   f"warm-up before timing, compile included: " + ", ".join(
                       f"{k} {_s(v)}" for k, v in result.get("warm_up_s", {}).items()))
    out += ["", line(columns), line(["-" * w for w in widths])]
    last = None
    for r, cells in zip(result["results"], rows):
        if last is not None and r["context_tokens"] != last:
            out.append("")
        last = r["context_tokens"]
        out.append(line(cells))
    prefills = [r for r in result["results"] if r["method"] == "kvqa"]
    if prefills:
        out += ["", "prefill, chunked (as kvqa does) vs one forward:"]
        for r in prefills:
            out.append(f"  {r['context_tokens']:>6,} tokens: "
                       f"{r['chunked_prefill_tokens_per_s']:,.0f} tok/s in chunks of "
                       f"{r['chunk_size']} vs {r['unchunked_prefill_tokens_per_s']:,.0f} tok/s unchunked "
                       f"({r['chunked_prefill_tokens_per_s'] / max(r['unchunked_prefill_tokens_per_s'], 1e-9):.2f}x, "
                       f"best of {PREFILL_REPEATS} each)")
        out += ["", f"drafting from the document ({prefills[0]['draft_tokens']} guessed tokens per step at most), "
                "decode tokens/s with and without, same questions:"]
        for r in prefills:
            speedup = f"{r['draft_speedup']:.2f}x" if r["draft_speedup"] else "-"
            out.append(f"  {r['context_tokens']:>6,} tokens: {r['decode_tokens_per_s']:,.1f} vs "
                       f"{r['undrafted_decode_tokens_per_s']:,.1f} tok/s ({speedup}), "
                       f"{r['draft_tokens_per_step']:.2f} guessed tokens kept per step, "
                       f"same answers: {'yes' if r['draft_same_answers'] else 'NO'}; finding sources "
                       f"{_s(r['sources_s'])} ({r['sources_s'] / r['answer_s']:.1%} of the answer's time)")
    written = [r for r in prefills if r.get("written_step_s")]
    if written:
        out += ["", "one decode step written out (kvqa.model.architectures.llama) vs the model's forward, same cache, "
                f"medians of {STEP_REPEATS} each, alternately:"]
        for r in written:
            out.append(f"  {r['context_tokens']:>6,} tokens: {_s(r['written_step_s'])} vs {_s(r['forward_step_s'])} "
                       f"({r['written_step_speedup']:.2f}x), same logits bit for bit: "
                       f"{'yes' if r['written_step_same_logits'] else 'NO'}")
    runs = result.get("runs") or [None]
    if len(runs) > 1:
        first = runs[0]
        out += ["", f"runs side by side (each against {_run_name(first, runs)}, kvqa rows of this run):"]
        base = {r["context_tokens"]: r for r in result["results"] if r["method"] == "kvqa" and _of(r, first)}
        for r in result["results"]:
            b = base.get(r["context_tokens"])
            if r["method"] != "kvqa" or _of(r, first) or b is None:
                continue
            alone = ""  # a token as answered includes drafting where a form drafts: the bare step beside it
            if r.get("written_step_s") and b.get("written_step_s"):
                alone = (f"; a step alone {_s(r['written_step_s'])} vs {_s(b['written_step_s'])}, "
                         f"{_x(_ratio(r['written_step_s'], b['written_step_s']))}")
            out.append(f"  {r['context_tokens']:>6,} tokens, {_run_name(r, runs)}: weights {_mib(r['weight_bytes'])} "
                       f"vs {_mib(b['weight_bytes'])} MiB, decode step {_s(r['decode_step_s'])} vs "
                       f"{_s(b['decode_step_s'])} ({_x(_ratio(r['decode_step_s'], b['decode_step_s']))}{alone}), TTFT "
                       f"{_s(r['ttft_s'])} vs {_s(b['ttft_s'])} ({_x(_ratio(r['ttft_s'], b['ttft_s']))}), prefill "
                       f"{r['prefill_tokens_per_s']:,.0f} vs {b['prefill_tokens_per_s']:,.0f} tok/s, same answers: "
                       f"{'yes' if r.get('same_as_first_run') else 'NO'}")
    for run in runs:
        checks = target_checks(result, run=run)
        if checks:
            out += ["", f"targets at {max(r['context_tokens'] for r in result['results']):,} tokens"
                    + (f" ({_run_name(run, runs)}):" if run else ":")]
            out += [f"  [{'ok' if ok else 'MISSED'}] {text}" for ok, text in checks]
    return "\n".join(out)


def _of(row: dict, run: dict | None) -> bool:
    """Whether a row belongs to the run (its weights and quote length; every row when there is one run)."""
    return run is None or (row.get("weights"), row.get("quote_chars")) == (run["weights"], run["quote_chars"])


def _run_name(run: dict, runs: list[dict]) -> str:
    """A run's name in the report: its weights' form, and its quote's length where runs differ in it."""
    name = f"{run['weights']} weights"
    if len({r["quote_chars"] for r in runs}) > 1:
        name += f", quote {run['quote_chars']} chars" if run["quote_chars"] else ", quote whole"
    return name


def _ratio(a: float | None, b: float | None) -> float | None:
    return a / b if a is not None and b else None


def target_checks(result: dict, *, run: dict | None = None) -> list[tuple[bool, str]]:
    """The project's speed targets, checked at the longest context where all three methods ran (in the run named,
    where the bench made several: result["runs"])."""
    by = {}
    for r in result["results"]:
        if not _of(r, run):
            continue
        by.setdefault(r["context_tokens"], {})[r["method"]] = r
    full = [n for n, rows in by.items() if set(METHODS) <= set(rows)]
    if not full:
        return []
    rows = by[max(full)]
    k, rc, sd = rows["kvqa"], rows["recompute"], rows["seed"]

    def ratio(a, b):
        return a / b if b > 0 else float("inf")

    checks = [
        (k["ttft_s"] <= 1.15 * k["floor_ttft_s"],
         f"kvqa TTFT {_s(k['ttft_s'])} <= 1.15 x floor {_s(k['floor_ttft_s'])} "
         f"({ratio(k['ttft_s'], k['floor_ttft_s']):.2f}x)"),
        (rc["ttft_s"] >= 30 * k["ttft_s"],
         f"kvqa TTFT >= 30x lower than recompute ({ratio(rc['ttft_s'], k['ttft_s']):.1f}x)"),
        (k["ttft_s"] <= sd["ttft_s"], f"kvqa TTFT {_s(k['ttft_s'])} <= seed {_s(sd['ttft_s'])}"),
        (k["answer_s"] <= sd["answer_s"], f"kvqa answer {_s(k['answer_s'])} <= seed {_s(sd['answer_s'])}"),
        (k["fork_s"] < 0.02 * k["ttft_s"],
         f"kvqa fork {_s(k['fork_s'])} < 2% of TTFT ({100 * ratio(k['fork_s'], k['ttft_s']):.3f}%)"),
        (k["decode_tokens_per_s"] >= sd["decode_tokens_per_s"],
         f"kvqa decode {k['decode_tokens_per_s']:,.1f} tok/s >= seed {sd['decode_tokens_per_s']:,.1f} tok/s"),
        (k["chunked_prefill_tokens_per_s"] >= 0.9 * k["unchunked_prefill_tokens_per_s"],
         f"chunked prefill {k['chunked_prefill_tokens_per_s']:,.0f} tok/s >= 0.9 x unchunked "
         f"{k['unchunked_prefill_tokens_per_s']:,.0f} tok/s"),
    ]
    if (run or result).get("weights", "fp32") == "fp32":  # int8 promises a recompute in the same chunks, which no
        # method here reads (kvqa's question after the document's chunks): its answers are compared, not a target
        checks.append((all(r["same_answers"] for r in rows.values()), "same greedy answers for every method"))
    return checks


def write_plot(result: dict, path: str | Path) -> None:
    """TTFT against context length for every method (log-log), with kvqa's floor dashed; written as a PNG."""
    from matplotlib.figure import Figure  # no pyplot: no global state, no GUI backend
    from matplotlib.ticker import NullLocator

    fig = Figure(figsize=(7.5, 4.8), dpi=120)
    ax = fig.add_subplot()
    styles = {"recompute": ("tab:red", "o"), "seed": ("tab:orange", "s"), "kvqa": ("tab:blue", "^")}
    for method in METHODS:
        rows = sorted((r for r in result["results"] if r["method"] == method), key=lambda r: r["context_tokens"])
        if rows:
            color, marker = styles[method]
            ax.plot([r["context_tokens"] for r in rows], [r["ttft_s"] for r in rows], marker=marker, color=color,
                    label=method)
            if method == "kvqa":
                ax.plot([r["context_tokens"] for r in rows], [r["floor_ttft_s"] for r in rows], linestyle="--",
                        color=color, alpha=0.6, label="floor: the question's forward alone")
    m = result["machine"]
    ax.set_xscale("log", base=2)
    contexts = sorted({r["context_tokens"] for r in result["results"]})
    ax.set_xticks(contexts, [f"{n:,}" for n in contexts])
    ax.xaxis.set_minor_locator(NullLocator())
    ax.set_yscale("log")
    ax.set_xlabel("context (document prompt tokens)")
    ax.set_ylabel("time to first token (s, median)")
    ax.set_title(f"{result['model']} on {m['gpu'] or m['cpu']} ({m['dtype']})", fontsize=9)
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(str(path), format="png")
