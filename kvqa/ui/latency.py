"""The latency panel: every question against the one read of the document (a table, a line and a plot), with the
first-token speedup the cache gave, measured or estimated."""

from __future__ import annotations

import functools
import statistics
import threading

from kvqa.documents.parts import part_of
from kvqa.messages import Message, render, say
from kvqa.session.session import Session, Turn

CJK_FONTS = ("WenQuanYi Micro Hei", "Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "Microsoft YaHei",
             "PingFang SC", "SimHei")  # fonts with Chinese glyphs the plot may find on a server



def cache_origin(session: Session) -> Message:
    """Where the session's cache came from and what it took, for the status panel: "read now: 15.80 s"..."""
    return Message(f"origin.{session.origin}", seconds=session.ready_s)


def speedup(turn: Turn, read_s: float | None) -> tuple[float, bool]:
    """How much sooner the first token came than without the cache: (factor, measured?). Measured when the turn
    was also answered without the cache; else estimated as (read + TTFT) / TTFT, since recomputing the whole
    prompt costs about reading the document plus the question. `read_s` is what reading the document took when its
    cache was made (PrefilledDocument.first_read_s), not what restoring it took; None (unknown): (0.0, False)."""
    ttft = turn.timings.ttft_s
    if ttft <= 0:
        return 0.0, False
    if turn.baseline is not None:
        return turn.baseline.ttft_s / ttft, True
    if read_s is None:
        return 0.0, False
    return (read_s + ttft) / ttft, False

def latency_table(session: Session | None, lang: str = "en") -> dict:
    """Every question against the one prefill, with the column names in `lang`."""
    headers = say("latency.columns", lang).split("|")
    if session is None or session.prefilled is None and not session.turns:
        return {"headers": headers, "data": []}
    read_s = session.prefilled.first_read_s if session.prefilled else None
    rows = []
    for n, turn in enumerate(session.turns, start=1):
        t = turn.timings
        factor, measured = speedup(turn, read_s)
        rows.append([
            n, turn.question[:60], t.question_tokens, t.new_tokens, round(t.ttft_s, 3), round(t.answer_s, 3),
            round(t.decode_tokens_per_s, 1),
            round(turn.baseline.ttft_s, 3) if turn.baseline else None,
            say("latency.factor_measured" if measured else "latency.factor_estimated", lang, factor=factor)
            if factor else "",
        ])
    return {"headers": headers, "data": rows}


def latency_summary(session: Session | None, lang: str = "en", *, estimate: float | None = None) -> str:
    """The latency panel's line: how the cache was had (against `estimate`, the read time expected before reading,
    when there was one), the median time to first token and the first-token speedup."""
    if session is None or session.prefilled is None:
        return say("latency.empty", lang)
    doc = session.prefilled
    # read now, restored from disk, or shared: what it took here
    origin = render(cache_origin(session), lang)
    if estimate is not None and session.origin == "prefill":
        origin += say("status.estimated", lang, seconds=estimate)
    ready = say("latency.ready", lang, origin=origin)
    if not session.turns:
        return say("latency.ask_to_compare", lang, ready=ready) + parts_read(session, lang)
    ttfts = [t.timings.ttft_s for t in session.turns if t.timings.new_tokens]
    if not ttfts:
        return say("latency.no_tokens", lang, ready=ready)
    factors = [speedup(t, doc.first_read_s) for t in session.turns if t.timings.new_tokens]
    measured = [f for f, m in factors if m]
    estimated = [f for f, _ in factors if f]
    how = (say("latency.measured", lang, factor=statistics.median(measured)) if measured else
           say("latency.estimated", lang, factor=statistics.median(estimated)) if estimated else
           say("latency.unknown", lang))
    return (say("latency.summary", lang, ready=ready, count=len(ttfts), median=statistics.median(ttfts), how=how)
            + parts_read(session, lang))


def parts_read(session: Session, lang: str = "en") -> str:
    """For a document cut into parts: each part read so far, once, with how it was had and what that took."""
    if len(session.parts) < 2 or not session.parts.reads:
        return ""
    reads = [f"{render(part_of(session.whole, a, b).name, lang)} ({render(origin, lang)})"
             for (a, b), origin in session.parts.reads.items()]
    return " " + say("latency.parts", lang, count=len(session.parts), reads="; ".join(reads))


_PLOTTING = threading.Lock()  # pyplot's figures and matplotlib's font settings are global: one handler draws at a time


def latency_plot(session: Session | None, lang: str = "en"):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if session is None or session.prefilled is None or not session.turns:
        return None
    font = chinese_font()
    if font:  # Latin text keeps the default font; matplotlib takes each Chinese glyph from this one
        matplotlib.rcParams["font.family"] = ["DejaVu Sans", font]
    elif lang == "zh":
        lang = "en"  # without a Chinese font the labels would be empty boxes
    with _PLOTTING:
        return _plot(plt, session, lang)


def _plot(plt, session: Session, lang: str):
    from matplotlib.ticker import FuncFormatter, NullFormatter

    fig, ax = plt.subplots(figsize=(8, 3.2))
    labels = [say("plot.cache", lang)] + [say("plot.question", lang, n=n) for n in range(1, len(session.turns) + 1)]
    ax.bar(labels[:1], [max(session.ready_s, 1e-3)], color="#9ca3af",  # log scale: a shared cache took ~0 s
           label=say("plot.cache_legend", lang, origin=say(f"plot.origin.{session.origin}", lang)))
    ax.bar(labels[1:], [t.timings.answer_s for t in session.turns], color="#bfdbfe", label=say("plot.total", lang))
    ax.bar(labels[1:], [t.timings.ttft_s for t in session.turns], color="#2563eb", label=say("plot.ttft", lang))
    baseline = [t.baseline.ttft_s if t.baseline else 0 for t in session.turns]
    if any(baseline):
        ax.scatter(labels[1:], baseline, color="#dc2626", marker="_", s=400, label=say("plot.baseline", lang))
    ax.set_yscale("log")
    # plain figures on the log axis: its default labels ($10^{-1}$) go through mathtext, whose parser is shared and
    # breaks when two handlers draw at once (Gradio draws the figure again when it sends it)
    ax.yaxis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:g}"))
    ax.yaxis.set_minor_formatter(NullFormatter())
    ax.set_ylabel(say("plot.seconds", lang))
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    plt.close(fig)
    return fig


@functools.cache
def chinese_font() -> str | None:
    """The name of a font with Chinese glyphs that matplotlib knows here (Debian: fonts-wqy-microhei), or None.
    matplotlib keeps its list of fonts on disk and never looks again by itself, so a font installed after it first
    ran is missing from it: then the system's font files it lacks are added once (a font installed while the app
    runs shows after a restart)."""
    from matplotlib import font_manager

    def known() -> str | None:
        names = {font.name for font in font_manager.fontManager.ttflist}
        return next((name for name in CJK_FONTS if name in names), None)

    if known() is None:
        listed = {font.fname for font in font_manager.fontManager.ttflist}
        for path in font_manager.findSystemFonts():
            if path not in listed:
                try:
                    font_manager.fontManager.addfont(path)
                except (OSError, RuntimeError, ValueError):  # a file it cannot read: the others still count
                    continue
    return known()

