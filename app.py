"""kvqa's browser app: upload or paste a document, which is read once; ask questions answered from its cache.

UI only: every decision about documents, models, caches and answers lives in the kvqa package. The one composition
root is `KvqaApp(config, engine)`: `demo` (built from the environment) can be imported without launching or loading
the model; `python app.py` builds its own from the command line and serves it.
"""

from __future__ import annotations

import argparse
import functools
import html
import logging
import os
import re
import statistics
import sys
import tempfile
import threading
import time
import weakref
from dataclasses import replace
from pathlib import Path

import gradio as gr

from kvqa import KvqaError, QuestionError, document_from_text, load_document
from kvqa.budget import CacheBudget, budget_for
from kvqa.config import Config, config_from_env
from kvqa.documents import Document, combine, load_documents
from kvqa.engines import Engine, make_engine
from kvqa.export import session_dict, to_json, to_markdown
from kvqa.messages import CATALOG, LANGUAGES, Message, language_of, render, say
from kvqa.pages import render_page, text_context
from kvqa.parts import parse_range, planned_parts, select, unit_name, unit_total
from kvqa.presets import language_note, offered, reader_for
from kvqa.session import Session, cache_origin, speedup
from kvqa.shared import SharedCaches
from kvqa.sources import source_dict
from kvqa.store import store_for
from kvqa.timing import ReadCost
from kvqa.uploads import uploaded_file

SAMPLE = Path(__file__).parent / "assets" / "declaration-of-independence.md"
log = logging.getLogger("kvqa.app")
AHEAD_TICK_S = 2.0  # how often the status refreshes while a long document's parts are read ahead
MIN_RATE_TOKENS = 256  # a read shorter than this is mostly fixed costs: its rate would not predict a longer one


# ---- formatting: every text in the language of the request (kvqa.messages) -----------------------------------------

CJK_FONTS = ("WenQuanYi Micro Hei", "Noto Sans CJK SC", "Noto Sans SC", "Source Han Sans SC", "Microsoft YaHei",
             "PingFang SC", "SimHei")  # fonts with Chinese glyphs the plot may find on a server


def latency_line(timings, *, stop_reason: str = "eos", follows: int = 0, lang: str = "en") -> str:
    t = timings
    drafted = ""
    if t.drafted_tokens:
        drafted = (say("answer.drafting_speedup", lang, kept=t.drafted_per_step, speedup=t.draft_speedup)
                   if t.draft_speedup else say("answer.drafting", lang, kept=t.drafted_per_step))
    stopped = say(f"answer.{stop_reason}", lang) if stop_reason in ("stopped", "repeating") else ""
    after = (say("answer.after_turn", lang) if follows == 1 else say("answer.after_turns", lang, turns=follows)
             if follows else "")
    figures = say("answer.latency", lang, ttft=t.ttft_s, total=t.answer_s, tokens=t.new_tokens,
                  rate=t.decode_tokens_per_s)
    return f"\n\n<sub>{figures}{drafted}{server_cache_note(t, lang)}{stopped}{after}</sub>"


def part_line(part, lang: str = "en") -> str:
    """Under an answer from a document cut into parts: which part it came from."""
    return f"\n\n<sub>{say('answer.part', lang, part=render(part.name, lang))}</sub>" if part is not None else ""


def server_cache_note(t, lang: str = "en") -> str:
    """For answers from a serving engine: how much of the prompt came from its prefix cache, or that it did not say."""
    if t.prompt_tokens is None:
        return ""
    if t.cached_tokens is None:
        return say("answer.server_cache_unknown", lang)
    return say("answer.server_cache", lang, cached=t.cached_tokens, prompt=t.prompt_tokens)


def sources_block(sources, lang: str = "en", unsupported=()) -> str:
    """Under an answer: what it names that the document lacks, its first source shown ("From the document, page
    12: ...", the best-matching sentence marked), every source folded below, each with its page where there is one."""
    block = ""
    if unsupported:
        items = html.escape(", ".join(unsupported))
        block += f"\n\n<p class='unsupported'>⚠ {say('answer.unsupported', lang, items=items)}</p>"
    if not sources:
        return block
    first = sources[0]
    where = say("answer.from_page", lang, page=first.page) if first.page else say("answer.from_text", lang)
    block += f"\n\n<blockquote class='evidence'><b>{where}</b> {_marked_quote(first)}</blockquote>"
    items = []
    for source in sources:
        where = (say("answer.page", lang, page=source.page) if source.page else
                 say("answer.characters", lang, start=source.start, end=source.end))
        items.append(f"<li><b>{where}</b>: “{_marked_quote(source)}”</li>")
    return (block + f"\n\n<details class='sources'><summary>{say('answer.sources', lang, count=len(sources))}"
            f"</summary><ol>{''.join(items)}</ol></details>")


def _marked_quote(source) -> str:
    """The source's text on one line, HTML-escaped, its best-matching sentence in <mark>."""
    a, b = source.mark[0] - source.start, source.mark[1] - source.start

    def flat(text):  # each run of whitespace as one space, kept where it was (none is added: CJK has no spaces)
        return html.escape(re.sub(r"\s+", " ", text))

    if b <= a:
        return flat(source.text).strip()
    return (flat(source.text[:a]) + f"<mark>{flat(source.text[a:b])}</mark>" + flat(source.text[b:])).strip()


def chat_messages(session: Session | None, lang: str = "en") -> list[dict]:
    """The current conversation (since "New conversation"); every turn stays in the latency table."""
    messages = []
    for turn in (session.conversation() if session else []):
        messages.append({"role": "user", "content": turn.question})
        messages.append({"role": "assistant",
                         "content": (turn.answer or "…") + part_line(turn.part, lang)
                         + sources_block(turn.sources, lang, turn.unsupported)
                         + latency_line(turn.timings, stop_reason=turn.stop_reason, follows=turn.follows, lang=lang)})
    return messages


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
    if len(session.parts) < 2 or not session.part_reads:
        return ""
    unit, total = unit_name(session.source), unit_total(session.source)
    reads = [f"{render(Message(f'part.{unit}', first=a, last=b, total=total), lang)} ({render(origin, lang)})"
             for (a, b), origin in session.part_reads.items()]
    return " " + say("latency.parts", lang, count=len(session.parts), reads="; ".join(reads))


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


def evidence_choices(session: Session | None, lang: str = "en") -> list[tuple[str, str]]:
    """(label, "turn:source") for every source of the current conversation's answers, oldest first."""
    choices = []
    for t, turn in enumerate(session.conversation() if session else []):
        for n, source in enumerate(turn.sources):
            where = (say("answer.page", lang, page=source.page) if source.page is not None else
                     say("answer.characters", lang, start=source.start + 1, end=source.end))
            choices.append((f"Q{t + 1} · {n + 1}. {where} · {turn.question[:40]}", f"{t}:{n}"))
    return choices


def warn(error: KvqaError, lang: str = "en") -> dict:
    """Show the error's message as a warning and change nothing on screen (gr.Error would mark every output)."""
    gr.Warning(render(error.message, lang))
    return {}


def client_of(request: gr.Request | None, *, behind_proxy: bool) -> str:
    """Who is asking, for per-client limits: the address the proxy saw (its last X-Forwarded-For hop) when behind
    one (a Space, or KVQA_BEHIND_PROXY=1), else the connection's address."""
    if request is None:
        return "local"
    forwarded = request.headers.get("x-forwarded-for", "") if behind_proxy else ""
    if forwarded.strip():
        return forwarded.split(",")[-1].strip()
    return getattr(request.client, "host", None) or "unknown"


# ---- the app ------------------------------------------------------------------------------------------------------

class KvqaApp:
    """Settings, engine and cache budget, built once; the handlers; and the layout that wires them. Every handler
    for the page takes `lang` (the language switch's value) and says everything in it."""

    def __init__(self, config: Config, engine: Engine, *, budget: CacheBudget | None = None,
                 behind_proxy: bool = False, models: list[str] | None = None):
        self.config = config
        self.engine = engine  # the first model's; others (models) get theirs when first chosen
        self.models = list(dict.fromkeys([config.model, *(models or [])]))
        self._engines = {config.model: engine}
        self.behind_proxy = behind_proxy
        self._budget = budget
        self._budget_lock = threading.Lock()
        self._sessions: dict[str, weakref.WeakSet] = {}  # client -> its sessions, to bound how many one opens
        self._sessions_lock = threading.Lock()
        self.shared = SharedCaches()  # sessions that load the same document share its cache
        limits = dict(file_mb=config.max_file_mb, reserve=config.reserve_tokens, pages=config.max_pdf_pages,
                      question=config.max_question_tokens, answer=config.max_new_tokens)
        # the page's fixed texts (the ui.* messages), by language: gr.I18n shows them in the browser's language
        # before any event; on_language says them in the one chosen
        self.page_texts = {lang: {key: say(key, lang, **(limits if key == "ui.limits" else {}))
                                  for key in CATALOG if key.startswith("ui.")} for lang in LANGUAGES}
        for texts in self.page_texts.values():
            texts["ui.limits"] = f"<sub>{texts['ui.limits']}</sub>"  # small print
        self.i18n = gr.I18n(**self.page_texts)  # for launch(i18n=...)
        self._fixed: dict[gr.components.Component, dict[str, str]] = {}  # component -> {property: message id}
        self.read_costs: dict[str, ReadCost] = {}  # model -> its latest read's cost here, for the next estimate
        self.estimates: weakref.WeakKeyDictionary[Session, float] = weakref.WeakKeyDictionary()  # estimated read s
        self.pdfs: weakref.WeakKeyDictionary[Session, bytes] = weakref.WeakKeyDictionary()  # a PDF's own bytes
        self.reading_ahead: weakref.WeakSet[Session] = weakref.WeakSet()  # sessions whose parts are read ahead now
        self.picked: weakref.WeakSet[Session] = weakref.WeakSet()  # sessions on a model chosen in the list
        self.model_reasons: weakref.WeakKeyDictionary[Session, Message] = weakref.WeakKeyDictionary()  # not the first
        self.model_box: gr.Dropdown | None = None  # the list of models, when there is more than one

    @property
    def budget(self) -> CacheBudget:
        """The process-wide cache budget, sized once (it asks the engine where caches live, loading the model)."""
        with self._budget_lock:
            if self._budget is None:
                self._budget = budget_for(self.engine, self.config)
            return self._budget

    def new_session(self, session: Session | None, request: gr.Request | None, *,
                    engine: Engine | None = None) -> Session:
        """The session in state, or a new one for this client (with `engine`, else the first model's); refused past
        the per-client number of documents."""
        if session is not None:
            return session
        client = client_of(request, behind_proxy=self.behind_proxy)
        limit = self.config.sessions_per_client
        with self._sessions_lock:
            mine = self._sessions.setdefault(client, weakref.WeakSet())
            if sum(1 for s in list(mine) if s.document is not None and not s.closed) >= limit:
                raise KvqaError("busy.sessions_per_client", limit=limit)
            session = Session(engine or self.engine, self.budget, client=client, shared=self.shared)
            mine.add(session)
        return session

    def engine_for(self, model: str) -> Engine:
        """The engine of one of the offered models, made on first use (its model loads then)."""
        if model not in self.models:
            raise KvqaError("model.not_offered", model=model, models=", ".join(self.models))
        if model not in self._engines:
            config = replace(self.config, model=model, model_reason=Message("reason.app"))
            self._engines[model] = make_engine(config, store=store_for(config))
        return self._engines[model]

    def on_model(self, model, session, lang="en", request: gr.Request = None, progress=gr.Progress()) -> dict:
        """UI: switch model; the document's text is kept and read again by the new model."""
        try:
            engine = self.engine_for(model)
            if session is not None and session.engine is engine:
                self.picked.add(session)  # chosen, though already reading: later documents keep it
                return {}
            progress(0, desc=say("progress.loading_model", lang, model=model))
            engine.load()
            fresh = self.new_session(None, request, engine=engine)
            self.picked.add(fresh)
            if session is not None and session.source is not None:
                fresh.load(session.source, progress=lambda f: progress(f, desc=say("progress.reading_again", lang)))
        except KvqaError as e:
            return warn(e, lang)
        if session is not None:
            session.close()
        return self.panels(fresh, lang) | self.part_box(fresh, lang) | {self.promise_box: self.promise(fresh, lang)}

    @staticmethod
    def close_session(session: Session | None) -> None:
        if session is not None:
            session.close()

    # ---- what the screen shows

    def status_markdown(self, session: Session | None, lang: str = "en", *, reused: bool = False) -> str:
        if session is None or session.document is None:
            return say("ui.no_document", lang)
        doc, info = session.prefilled, session.engine.info
        if doc is None:
            return say("status.freed", lang, name=session.document.name)
        pages = say("status.pages", lang, pages=session.document.pages) if session.document.pages else ""
        note = say("status.reused", lang) if reused else ""
        part = f"**{render(session.notice, lang)}**\n\n" if session.notice else ""
        language = language_note(info.model, session.document.text, cache_dir=self.config.cache_dir)
        part += f"**{render(language, lang)}**\n\n" if language else ""
        rate = say("status.rate", lang, rate=doc.tokens_per_s) if session.origin == "prefill" else ""
        if session.origin == "prefill" and session in self.estimates:
            rate += say("status.estimated", lang, seconds=self.estimates[session])
        reason = self.model_reasons.get(session) or (
            self.config.model_reason if session.engine is self.engine else Message("reason.app"))
        cache = (say("status.cache_size", lang, mb=doc.cache_bytes / 2**20, reserve=self.config.reserve_tokens)
                 if doc.cache_bytes else say("status.cache_remote", lang))
        memory = say("status.memory", lang, used=self.budget.used_bytes / 2**20, limit=self.budget.limit_bytes / 2**20)
        parts = f"- {self.parts_line(session, lang)}\n" if len(session.parts) > 1 else ""
        return (
            f"**{session.document.name}**{pages}{note}\n\n{part}"
            f"- {say('status.model', lang, model=info.model, device=info.device, dtype=info.dtype, reason=reason)}\n"
            f"- {say('status.tokens', lang, tokens=doc.tokens)}\n"
            f"- {render(cache_origin(session), lang)}{rate}\n"
            f"{parts}"
            f"- {cache}\n"
            f"- {memory}"
        )

    def panels(self, session: Session | None, lang: str = "en", *, reused: bool = False) -> dict:
        """Everything that shows the session, by component."""
        return {self.state: session, self.status: self.status_markdown(session, lang, reused=reused),
                self.ahead_timer: gr.Timer(active=session is not None and session in self.reading_ahead),
                self.chat: chat_messages(session, lang),
                self.summary: latency_summary(session, lang, estimate=self.estimates.get(session) if session else None),
                self.table: latency_table(session, lang), self.plot: latency_plot(session, lang),
                self.also_btn: self.also_button(session, lang)} | self.evidence(session, None, lang) | (
            {self.model_box: self.model_of(session)} if self.model_box is not None and session is not None else {})

    def model_of(self, session: Session) -> str:
        """The name in the list of models of the one the session's engine runs."""
        return next((m for m, e in self._engines.items() if e is session.engine), self.models[0])

    @staticmethod
    def also_button(session: Session | None, lang: str = "en"):
        """'Ask again from part 3 (pages 20-30)': shown when another part matched the last question too."""
        also = session.also if session is not None else None
        if also is None:
            return gr.update(visible=False)
        return gr.update(visible=True, value=say("answer.ask_again_from", lang, index=also + 1,
                                                 part=session.conversation()[-1].also.name))

    def evidence(self, session: Session | None, pick: str | None, lang: str = "en") -> dict:
        """The evidence viewer: every source of the conversation's answers to choose from, and the chosen one (by
        default the latest answer's first) on its PDF page, highlighted, or in its surrounding text."""
        choices = evidence_choices(session, lang)
        if not choices:
            return {self.evidence_pick: gr.update(choices=[], value=None), self.evidence_page: gr.update(
                value=None, visible=False), self.evidence_text: say("evidence.none", lang)}
        values = [v for _, v in choices]
        conversation = session.conversation()
        latest = f"{len(conversation) - 1}:0"  # the latest answer's first source, when it has one
        pick = pick if pick in values else latest if latest in values else values[-1]
        t, n = (int(x) for x in pick.split(":"))
        turn = conversation[t]
        source = turn.sources[n]
        page, note = None, ""
        pdf = self.pdfs.get(session)
        if pdf is not None and source.page is not None:
            try:
                shown = render_page(pdf, source.page, source.text, source.marked)
                page = shown.image
                note = say("evidence.page" if shown.highlighted else "evidence.page_not_found", lang,
                           page=source.page, seconds=shown.seconds)
            except ValueError as e:
                note = say("evidence.no_render", lang, page=source.page, why=str(e))
        read = select(session.source, turn.part.first, turn.part.last) if turn.part else session.source
        context = text_context(read.text, source.start, source.end, source.mark)  # offsets into what was read
        return {self.evidence_pick: gr.update(choices=choices, value=pick),
                self.evidence_page: gr.update(value=page, visible=page is not None),
                self.evidence_text: (f"<p class='kvqa-evidence-note'>{html.escape(note)}</p>" if note else "")
                + context}

    def on_evidence(self, pick, session, lang="en") -> dict:
        """UI: show another source in the evidence viewer."""
        return self.evidence(session, pick, lang)

    def on_chat_select(self, session, lang="en", selected: gr.SelectData = None) -> dict:
        """UI: a click on a message shows its turn's first source in the evidence viewer."""
        index = selected.index if selected is not None else None
        index = index[0] if isinstance(index, (list, tuple)) else index
        if session is None or not isinstance(index, int):
            return {}
        turn = index // 2  # a user message, then its answer, per turn of the conversation
        if not 0 <= turn < len(session.conversation()) or not session.conversation()[turn].sources:
            return {}
        return self.evidence(session, f"{turn}:0", lang)

    def relabel(self, lang: str) -> dict:
        """The page's fixed texts in `lang`, by component."""
        return {component: gr.update(**{prop: self.page_texts[lang][key] for prop, key in texts.items()})
                for component, texts in self._fixed.items()}

    def localized(self, make, texts: dict[str, str], /, **options):
        """make(**options) with its fixed texts (property -> message id) through gr.I18n, remembered for relabel."""
        component = make(**{prop: self.i18n(key) for prop, key in texts.items()}, **options)
        self._fixed[component] = texts
        return component

    # ---- handlers

    def on_load(self, request: gr.Request = None) -> dict:
        """UI, when the page opens: the language from the browser's Accept-Language header, and the page in it."""
        lang = language_of(request.headers.get("accept-language") if request is not None else None)
        return {self.lang: lang} | self.on_language(lang, None)

    def on_language(self, lang, session) -> dict:
        """UI: say everything on the page in `lang`: the fixed texts, the panels and the answers so far."""
        page = self.relabel(lang)
        shown = (self.panels(session, lang) | self.part_box(session, lang)
                 | {self.promise_box: self.promise(session, lang)})
        for component, value in shown.items():
            if component in page:  # the chat and the part box: a fixed text and what they show
                is_update = isinstance(value, dict) and value.get("__type__") == "update"
                value = page[component] | (value if is_update else {"value": value})
            page[component] = value
        return page

    def document_from(self, files, text: str | None, lang: str = "en"):
        """The document a client sent: uploaded files (nothing else on the server is read) and/or pasted text, as
        one document. A file that cannot be read is named in a warning and the others are read; if none can, the
        error says why and nothing changes."""
        files = [files] if isinstance(files, (str, os.PathLike)) else list(files or [])
        documents, problems = load_documents([uploaded_file(f) for f in files], config=self.config)
        if text and text.strip():
            if len(text) > self.config.max_file_bytes:
                raise KvqaError("paste.too_long", chars=len(text), limit=self.config.max_file_bytes)
            documents.append(document_from_text(text))
        document = combine(documents, problems=problems)  # raises when nothing could be read
        for problem in problems:
            gr.Warning(say("file.skipped", lang, problem=render(problem, lang)))
        return document

    def read(self, document, session, request, progress, *, part=None, lang: str = "en") -> tuple[Session, bool]:
        """Read the document (or its part) into the session, saying first how big it is and, once this model has
        read something here, about how long the read will take; the read's rate then feeds the next estimate. When
        the document's language calls for another model (kvqa.presets.reader_for) and none was chosen in the list,
        a new session on that model reads it; the old one is closed only once the read succeeded."""
        session = self.new_session(session, request)
        reader = self.reader_session(session, document, request, lang, progress)
        if reader is not session:
            try:
                loaded = self.read(document, reader, request, progress, part=part, lang=lang)
            except BaseException:
                reader.close()
                raise
            session.close()
            return loaded
        progress(0, desc=say("progress.reading", lang))
        before, estimate = self.before_reading(session.engine, document if part is None else select(document, *part),
                                               lang)
        started, ticks = time.perf_counter(), []

        def tick(fraction: float) -> None:  # the read's progress over time: how its cost grows with its length
            ticks.append((fraction, time.perf_counter() - started))
            progress(fraction, desc=before)

        changed = session.load(document, part=part, progress=tick)
        doc = session.prefilled
        if changed:
            self.read_ahead(session)
            self.estimates.pop(session, None)
            if doc is not None and session.origin == "prefill":
                if estimate is not None:
                    self.estimates[session] = estimate
                cost = ReadCost.fit([(f * doc.tokens, t) for f, t in ticks]) if doc.tokens >= MIN_RATE_TOKENS else None
                if cost is not None:
                    self.read_costs[session.engine.info.model] = cost
        return session, changed

    def reader_session(self, session: Session, document, request, lang: str, progress) -> Session:
        """The session to read `document` in: this one, or a new one on the offered model that reads the document's
        language (loaded first), unless the model was chosen in the list or named when kvqa started."""
        if session in self.picked:
            return session
        reader = reader_for(self.config.model, self.config.model_reason, document.text, cache_dir=self.config.cache_dir)
        model = reader[0] if reader and reader[0] in self.models else self.config.model
        engine = self.engine_for(model)
        if engine is session.engine:
            return session
        progress(0, desc=say("progress.loading_model", lang, model=model))
        engine.load()
        fresh = self.new_session(None, request, engine=engine)
        if reader and model == reader[0]:
            self.model_reasons[fresh] = reader[1]
        return fresh

    def read_ahead(self, session: Session) -> bool:
        """Read a long document's other parts in the background (Session.read_ahead), while the user asks; False
        when there is nothing to read ahead (one part, a pinned part, or an engine without a disk store)."""
        if not session.reads_ahead:
            return False
        self.reading_ahead.add(session)

        def run() -> None:
            try:
                session.read_ahead()
            except KvqaError as e:  # out of memory, the store...: the parts are read when a question needs them
                log.warning("kvqa: reading ahead stopped: %s", e)
            finally:
                self.reading_ahead.discard(session)

        threading.Thread(target=run, name="kvqa-read-ahead", daemon=True).start()
        return True

    def parts_line(self, session: Session, lang: str = "en") -> str:
        """For a document cut into parts: how many are ready, and whether the others are being read."""
        ready, parts = session.parts_ready, len(session.parts)
        if session in self.reading_ahead:
            return say("status.ahead", lang, ready=ready, parts=parts)
        return say("status.ahead_done" if ready == parts else "status.ahead_later", lang, ready=ready, parts=parts)

    def on_tick(self, session, lang="en") -> dict:
        """UI, every few seconds while parts are read ahead: the status, and the timer stops when they are."""
        return {self.status: self.status_markdown(session, lang),
                self.ahead_timer: gr.Timer(active=session is not None and session in self.reading_ahead)}

    def before_reading(self, engine: Engine, document: Document, lang: str = "en") -> tuple[str, float | None]:
        """The progress line while a document is read, with the estimate in it: its size (pages, characters,
        tokens) and, once this model has read a document here, the read time its cost predicts (else None)."""
        tokens = engine.count_tokens(document.text)
        room = engine.info.context_tokens - self.config.reserve_tokens
        pages = say("status.pages", lang, pages=document.pages) if document.pages else ""
        parts = (say("progress.parts", lang, parts=planned_parts(document, engine.count_tokens, room))
                 if tokens > room else "")  # read in parts, the first one now
        cost = self.read_costs.get(engine.info.model)
        if cost is None:
            return say("progress.size", lang, pages=pages, chars=len(document.text), tokens=tokens) + parts, None
        estimate = cost.seconds(min(tokens, room))
        return say("progress.estimate", lang, pages=pages, chars=len(document.text), tokens=tokens,
                   seconds=estimate) + parts, estimate

    def show_read(self, get_document, session, lang, request, progress, *, pdf=lambda: None) -> dict:
        """Read the document get_document() gives and show it; `pdf()`: the file's bytes when the document is one
        PDF, kept for the evidence viewer."""
        try:
            session, changed = self.read(get_document(), session, request, progress, lang=lang)
        except KvqaError as e:
            return warn(e, lang)
        if changed:
            self.pdfs.pop(session, None)
            if (data := pdf()) is not None:
                self.pdfs[session] = data
        return self.panels(session, lang, reused=not changed) | self.part_box(session, lang)

    @staticmethod
    def pdf_of(files, text: str | None) -> bytes | None:
        """The bytes of the one uploaded PDF that is the whole document (no other file, nothing pasted), else None."""
        files = [files] if isinstance(files, (str, os.PathLike)) else list(files or [])
        if len(files) != 1 or (text and text.strip()) or not str(files[0]).lower().endswith(".pdf"):
            return None
        try:
            return uploaded_file(files[0]).read_bytes()
        except (KvqaError, OSError):
            return None

    def part_box(self, session: Session | None, lang: str = "en") -> dict:
        """The part control, labelled in pages for a PDF and characters for text, showing what was read."""
        source = session.source if session else None
        if source is None:
            return {}
        part = session.document.part
        value = f"{part.first}-{part.last}" if part else ""
        total = unit_total(source)
        label = say("part.label", lang, unit=Message(f"unit.{unit_name(source)}"), total=total)
        return {self.part: gr.update(label=label, value=value)}

    def on_upload(self, file, session, lang="en", request: gr.Request = None, progress=gr.Progress()) -> dict:
        """UI: read an uploaded file once; show its figures."""
        return self.show_read(lambda: self.document_from(file, None, lang), session, lang, request, progress,
                              pdf=lambda: self.pdf_of(file, None))

    def on_paste(self, text, session, files=None, lang="en", request: gr.Request = None,
                 progress=gr.Progress()) -> dict:
        """UI: read pasted text once (with the uploaded files, if any, as one document)."""
        return self.show_read(lambda: self.document_from(files, text, lang), session, lang, request, progress,
                              pdf=lambda: self.pdf_of(files, text))

    def on_part(self, text, session, lang="en", request: gr.Request = None, progress=gr.Progress()) -> dict:
        """UI: read another part of the loaded document (pages of a PDF, characters of a text)."""
        if session is None or session.source is None:
            return warn(KvqaError("part.load_first"), lang)
        try:
            part = parse_range(text, session.source)
            session, changed = self.read(session.source, session, request, progress, part=part, lang=lang)
        except KvqaError as e:
            return warn(e, lang)
        return self.panels(session, lang, reused=not changed) | self.part_box(session, lang)

    @staticmethod
    def on_remember(remember, session) -> None:
        """UI: follow-up questions on or off (off: every question is read after the document alone)."""
        if session is not None:
            session.remember = bool(remember)

    def on_new_conversation(self, session, lang="en") -> dict:
        """UI: start a new conversation on the same document, without reading it again."""
        if session is not None:
            session.new_conversation()
        return {self.chat: chat_messages(session, lang), self.also_btn: self.also_button(session, lang)}

    def on_sample(self, session, lang="en", request: gr.Request = None, progress=gr.Progress()) -> dict:
        """UI: load the sample document (a file of the app's own, never a path from the client)."""
        return self.show_read(lambda: load_document(SAMPLE, config=self.config), session, lang, request, progress)

    def on_ask_also(self, session, baseline, remember=False, lang="en", ready_only=False, progress=gr.Progress()):
        """UI: ask the last question again, from the other part that matched it too (Session.also)."""
        if session is None or session.also is None:
            yield warn(QuestionError("question.no_document" if session is None else "question.nothing_to_ask_again"),
                       lang)
            return
        yield from self.on_ask(session.conversation()[-1].question, session, baseline, remember, lang, ready_only,
                               progress, part=session.also)

    def on_ask(self, question, session, baseline, remember=False, lang="en", ready_only=False, progress=gr.Progress(),
               part=None):
        """UI: stream the answer into the chat, then its latency. ready_only: a long document's question is answered
        from the best part ready rather than waiting for the part that matches it best to be read. part: from this
        part instead (an index into session.parts)."""
        if session is not None:
            session.remember, session.ready_only = bool(remember), bool(ready_only)
        if session is None:
            yield warn(QuestionError("question.no_document"), lang)
            return
        chat_before = chat_messages(session, lang)
        history = chat_before + [{"role": "user", "content": question}, {"role": "assistant", "content": ""}]

        def rebuilt(d):
            return gr.Info(say("toast.rebuilt", lang, origin=render(cache_origin(session), lang)))

        def part_read(d):
            return gr.Info(f"{render(session.notice, lang)} ({render(cache_origin(session), lang)})")

        reading = say("progress.reading_part" if len(session.parts) > 1 else "progress.reading_again", lang)
        try:
            with session.ask(question, baseline=bool(baseline), on_rebuild=rebuilt, on_part=part_read, part=part,
                             progress=lambda f: progress(f, desc=reading)) as pieces:
                text = ""
                for piece in pieces:
                    text += piece
                    history[-1] = {"role": "assistant", "content": text}
                    yield {self.question: "", self.chat: history}  # only the chat changes while streaming
        except KvqaError as e:  # the chat goes back to what it was; the question stays in its box
            yield {self.question: question, self.chat: chat_before} | warn(e, lang)
            return
        yield self.panels(session, lang)

    @staticmethod
    def on_stop(session) -> None:
        if session is not None:
            session.stop()

    def api_prefill(self, file: str | None = None, text: str | None = None, part: str | None = None, session=None,
                    request: gr.Request = None, progress=gr.Progress()) -> dict:
        """API: read a document (`text` for pasted text, `file` for an upload; `part`: pages of a PDF or characters
        of a text to read, like "14-27"); returns the prefill figures and, when only part of it was read, which."""
        try:
            document = self.document_from(file, text)
            session, changed = self.read(document, session, request, progress,
                                         part=parse_range(part, document) if part and part.strip() else None)
        except KvqaError as e:
            raise gr.Error(str(e), print_exception=False) from None
        doc = session.prefilled
        return {self.api_status: (f"{'prefilled' if changed else 'already loaded'} {session.document.name}: "
                                  f"{doc.tokens} tokens, {doc.prefill_s:.3f} s, {doc.tokens_per_s:.0f} tokens/s, "
                                  f"cache {doc.cache_bytes} bytes; {cache_origin(session)}"
                                  + (f". {session.notice}" if session.notice else "")
                                  + (f" Parts ({unit_name(session.source)}): "
                                     + ", ".join(f"{a}-{b}" for a, b, _ in session.parts) + "."
                                     if len(session.parts) > 1 else "")),
                self.state: session}

    def api_ask(self, question: str, remember: bool = False, part: str | None = None, session=None):
        """API: answer a question about this client's document, streaming: each update is the answer so far, the last
        one the whole answer (client.predict returns it; client.submit iterates the updates). remember=True reads the
        question after this client's earlier remembered questions and answers (a follow-up). part: one of the parts
        /prefill lists ("13-25"), to answer from it instead of the part the question matches best."""
        if session is None:
            raise gr.Error(Message("question.no_document_api"), print_exception=False)
        session.remember = bool(remember)
        try:
            index = self.part_index(session, part) if part and part.strip() else None
            with session.ask(question, part=index) as pieces:
                text = ""
                for piece in pieces:
                    text += piece
                    yield {self.api_answer: text}
                yield {self.api_answer: pieces.answer.text, self.state: session}
        except KvqaError as e:
            raise gr.Error(str(e), print_exception=False) from None

    @staticmethod
    def part_index(session: Session, text: str) -> int:
        """Which of the session's parts the range `text` ("13-25") is; QuestionError naming them when none."""
        index = session.index_of(*parse_range(text, session.source))
        if index is None:
            raise QuestionError("question.not_a_part", range=text.strip(),
                                parts=", ".join(f"{a}-{b}" for a, b, _ in session.parts))
        return index

    def on_export(self, session, lang="en"):
        """UI: the session as a Markdown and a JSON file to download (document, parts, every question with its
        answer, sources, flags and timings)."""
        if session is None or session.source is None or not session.turns:
            return warn(KvqaError("export.nothing"), lang)
        conversation = session_dict(session)
        folder = Path(tempfile.mkdtemp(prefix="kvqa-export-"))
        stem = re.sub(r"[^\w.-]+", "_", Path(session.source.name).stem)[:60] or "document"
        md, js = folder / f"{stem}-conversation.md", folder / f"{stem}-conversation.json"
        md.write_text(to_markdown(conversation), encoding="utf-8")
        js.write_text(to_json(conversation), encoding="utf-8")
        return {self.exported: gr.update(value=[str(md), str(js)], visible=True)}

    @staticmethod
    def api_export(session=None) -> dict:
        """API: this client's document, parts and every question so far with its answer, sources, flags and
        timings: the structure of `kvqa ask --json`."""
        if session is None or session.source is None:
            raise gr.Error(Message("question.no_answer_api"), print_exception=False)
        return session_dict(session)

    @staticmethod
    def api_sources(session=None) -> list[dict]:
        """API: the passages of the document the last answer relies on, best first: page (PDFs), start and end
        (character offsets into the document's text) and text."""
        if session is None or not session.turns:
            raise gr.Error(Message("question.no_answer_api"), print_exception=False)
        return [source_dict(s) for s in session.turns[-1].sources]

    @staticmethod
    def api_unsupported(session=None) -> list[str]:
        """API: the numbers and names in the last answer that the document does not contain (empty: none)."""
        if session is None or not session.turns:
            raise gr.Error(Message("question.no_answer_api"), print_exception=False)
        return list(session.turns[-1].unsupported)

    def promise(self, session: Session | None = None, lang: str = "en") -> str:
        """What the answers are promised to be, for this engine's precision."""
        info = (session.engine if session is not None else self.engine).info
        line = say("promise.line", lang, model=info.model, device=info.device, dtype=info.dtype,
                   guarantee=info.guarantee)
        return f"<sub>{line}</sub>"

    # ---- layout

    def build(self) -> gr.Blocks:
        """The page and its events; components become attributes, so handlers return outputs by name. The page's
        fixed texts are message ids shown through gr.I18n (launch the page with i18n=self.i18n)."""
        localized = self.localized
        with gr.Blocks(title=self.i18n("ui.title")) as demo:
            self.state = gr.State(None, time_to_live=self.config.session_ttl_s, delete_callback=self.close_session)
            with gr.Row(equal_height=True):
                localized(gr.Markdown, {"value": "ui.intro"})
                self.lang = gr.Radio([(name, code) for code, name in LANGUAGES.items()], value="en",
                                     label="Language · 语言", elem_id="language", scale=0, min_width=180)
            self.promise_box = gr.Markdown(elem_id="promise")
            if len(self.models) > 1:
                self.model_box = model_box = localized(gr.Dropdown, {"label": "ui.model"}, choices=self.models,
                                                       value=self.models[0], elem_id="model")
            with gr.Row():
                with gr.Column(scale=2):
                    upload = localized(gr.File, {"label": "ui.upload"}, file_types=[".pdf", ".txt", ".md"],
                                       type="filepath", file_count="multiple", elem_id="upload")
                    pasted = localized(gr.Textbox, {"label": "ui.paste"}, lines=5, max_lines=12, elem_id="paste")
                    with gr.Row():
                        read_btn = localized(gr.Button, {"value": "ui.read_pasted"}, elem_id="read")
                        sample_btn = localized(gr.Button, {"value": "ui.sample"}, elem_id="sample")
                    self.status = gr.Markdown(self.i18n("ui.no_document"), elem_id="doc-status")
                    with gr.Row():
                        self.part = localized(gr.Textbox, {"label": "ui.part", "placeholder": "ui.part_placeholder"},
                                              scale=3, elem_id="part")
                        part_btn = localized(gr.Button, {"value": "ui.read_part"}, scale=1, elem_id="read-part")
                    localized(gr.Markdown, {"value": "ui.limits"}, elem_id="limits")
                    with localized(gr.Accordion, {"label": "ui.evidence"}, open=True, elem_id="evidence"):
                        self.evidence_pick = localized(gr.Dropdown, {"label": "ui.evidence_pick"}, choices=[],
                                                       elem_id="evidence-pick")
                        self.evidence_page = gr.Image(type="pil", interactive=False, show_label=False,
                                                      visible=False, elem_id="evidence-page", format="png")
                        self.evidence_text = gr.HTML(self.i18n("evidence.none"), elem_id="evidence-text")
                with gr.Column(scale=3):
                    self.chat = localized(gr.Chatbot, {"label": "ui.chat"}, elem_id="chat", height=420,
                                          buttons=["copy"])
                    with gr.Row():
                        self.question = localized(gr.Textbox, {"placeholder": "ui.question"}, show_label=False,
                                                  scale=5, elem_id="question")
                        ask_btn = localized(gr.Button, {"value": "ui.ask"}, variant="primary", scale=1, elem_id="ask")
                        stop_btn = localized(gr.Button, {"value": "ui.stop"}, variant="stop", scale=1,
                                             elem_id="stop")
                    with gr.Row():
                        remember_box = localized(gr.Checkbox, {"label": "ui.remember"}, elem_id="remember")
                        new_btn = localized(gr.Button, {"value": "ui.new_conversation"}, size="sm",
                                            elem_id="new-conversation")
                    self.also_btn = gr.Button(visible=False, size="sm", elem_id="ask-also")
                    ready_box = localized(gr.Checkbox, {"label": "ui.ready_only"}, elem_id="ready-only")
                    baseline_box = localized(gr.Checkbox, {"label": "ui.baseline"}, elem_id="baseline")
                    with gr.Row():
                        export_btn = localized(gr.Button, {"value": "ui.export"}, size="sm", elem_id="export")
                    self.exported = localized(gr.File, {"label": "ui.exported"}, file_count="multiple",
                                              interactive=False, visible=False, elem_id="exported")
            with localized(gr.Accordion, {"label": "ui.latency"}, open=True):
                self.summary = gr.Markdown(elem_id="latency-summary")
                self.table = gr.Dataframe(latency_table(None), interactive=False, elem_id="latency-table", wrap=True)
                self.plot = gr.Plot(elem_id="latency-plot", show_label=False)

            self.ahead_timer = gr.Timer(AHEAD_TICK_S, active=False)  # refreshes the status while parts are read ahead
            self.ahead_timer.tick(self.on_tick, [self.state, self.lang], [self.status, self.ahead_timer],
                                  api_visibility="private")
            shown = [self.state, self.status, self.chat, self.summary, self.table, self.plot, self.evidence_pick,
                     self.evidence_page, self.evidence_text, self.ahead_timer, self.also_btn,
                     *([self.model_box] if self.model_box is not None else [])]
            lang = self.lang
            upload.upload(self.on_upload, [upload, self.state, lang], shown + [self.part], api_visibility="private")
            read_btn.click(self.on_paste, [pasted, self.state, upload, lang], shown + [self.part],
                           api_visibility="private")
            sample_btn.click(self.on_sample, [self.state, lang], shown + [self.part], api_visibility="private")
            for trigger in (part_btn.click, self.part.submit):
                trigger(self.on_part, [self.part, self.state, lang], shown + [self.part], api_visibility="private")
            for trigger in (ask_btn.click, self.question.submit):
                trigger(self.on_ask, [self.question, self.state, baseline_box, remember_box, lang, ready_box],
                        shown + [self.question], api_visibility="private")
            self.also_btn.click(self.on_ask_also, [self.state, baseline_box, remember_box, lang, ready_box],
                                shown + [self.question], api_visibility="private")
            remember_box.change(self.on_remember, [remember_box, self.state], None, queue=False,
                                api_visibility="private")
            new_btn.click(self.on_new_conversation, [self.state, lang], [self.chat, self.also_btn], queue=False,
                          api_visibility="private")
            stop_btn.click(self.on_stop, [self.state], None, queue=False, api_visibility="private")
            export_btn.click(self.on_export, [self.state, lang], [self.exported], api_visibility="private")
            viewer = [self.evidence_pick, self.evidence_page, self.evidence_text]
            self.evidence_pick.input(self.on_evidence, [self.evidence_pick, self.state, lang], viewer,
                                     api_visibility="private")
            self.chat.select(self.on_chat_select, [self.state, lang], viewer, api_visibility="private")
            everything = list(dict.fromkeys(shown + [self.part, self.promise_box, *self._fixed]))  # the list once
            demo.load(self.on_load, None, everything + [lang], api_visibility="private")
            lang.input(self.on_language, [lang, self.state], everything, api_visibility="private")
            if len(self.models) > 1:
                model_box.input(self.on_model, [model_box, self.state, lang], shown + [self.part, self.promise_box],
                                api_visibility="private")  # a person's choice; not when the app shows its own

            # the gradio_client API: each client is its own session
            with gr.Row(visible=False):
                api_file, api_text, api_part, api_question = gr.File(), gr.Textbox(), gr.Textbox(), gr.Textbox()
                api_remember, api_ask_part = gr.Checkbox(), gr.Textbox()
                self.api_status, self.api_answer = gr.Textbox(), gr.Textbox()
                api_sources, api_unsupported = gr.JSON(), gr.JSON()
                api_prefill_btn, api_ask_btn, api_sources_btn = gr.Button(), gr.Button(), gr.Button()
                api_unsupported_btn, api_export_btn, api_export = gr.Button(), gr.Button(), gr.JSON()
            api_prefill_btn.click(self.api_prefill, [api_file, api_text, api_part, self.state],
                                  [self.api_status, self.state], api_name="prefill")
            api_ask_btn.click(self.api_ask, [api_question, api_remember, api_ask_part, self.state],
                              [self.api_answer, self.state],
                              api_name="ask")
            api_sources_btn.click(self.api_sources, [self.state], [api_sources], api_name="sources")
            api_unsupported_btn.click(self.api_unsupported, [self.state], [api_unsupported], api_name="unsupported")
            api_export_btn.click(self.api_export, [self.state], [api_export], api_name="export")
        return demo


def make_app(environ=os.environ, **overrides) -> KvqaApp:
    """The app for these environment variables and overrides (model=...); the model loads on first use."""
    models = overrides.pop("models", None) or environ.get("KVQA_MODELS", "")
    models = [m.strip() for m in models.split(",") if m.strip()]
    if models and not overrides.get("model") and not environ.get("KVQA_MODEL", "").strip():
        overrides["model"] = models[0]  # the first offered model is the one loaded first
    config = config_from_env(environ, **overrides)
    models = models or offered(config.model, environ, cache_dir=config.cache_dir)
    behind_proxy = bool(environ.get("SPACE_ID")) or environ.get("KVQA_BEHIND_PROXY") == "1"
    return KvqaApp(config, make_engine(config, environ, store=store_for(config)), behind_proxy=behind_proxy,
                   models=models)


try:
    kvqa_app = make_app()
except KvqaError as e:  # a bad KVQA_* variable: say which, without a traceback
    raise SystemExit(f"kvqa: {e}") from None
demo = kvqa_app.build()


def parse_auth(value: str | None) -> list[tuple[str, str]] | None:
    """'user:password[,user:password...]' as Gradio's auth list; None when not set."""
    if not value or not value.strip():
        return None
    pairs = []
    for item in value.split(","):
        user, sep, password = item.strip().partition(":")
        if not sep or not user or not password:
            raise ValueError("KVQA_AUTH / --auth must be user:password (several separated by commas).")
        pairs.append((user, password))
    return pairs


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Serve the kvqa app.")
    parser.add_argument("--model", help="model id or folder, or gemma-3-270m (default: $KVQA_MODEL, else "
                        "SmolLM2-135M-Instruct, and gemma-3-270m for a mostly Chinese document)")
    parser.add_argument("--models", help="several models to offer in a dropdown, comma-separated (also KVQA_MODELS)")
    parser.add_argument("--host", default=os.environ.get("GRADIO_SERVER_NAME", "127.0.0.1"))
    parser.add_argument("--port", type=int, default=int(os.environ.get("GRADIO_SERVER_PORT", 7860)))
    parser.add_argument("--share", action="store_true", default=os.environ.get("KVQA_SHARE") == "1")
    parser.add_argument("--concurrency", type=int, default=int(os.environ.get("KVQA_CONCURRENCY", 1)),
                        help="answers computed at once (one GPU: 1)")
    parser.add_argument("--queue-size", type=int, default=int(os.environ.get("KVQA_QUEUE_SIZE", 64)),
                        help="requests waiting at most; more are turned away with a message (default 64)")
    parser.add_argument("--auth", default=os.environ.get("KVQA_AUTH"),
                        help="user:password[,user:password...]: ask for a login (Gradio's own); also KVQA_AUTH")
    args = parser.parse_args(argv)
    try:
        auth = parse_auth(args.auth)
        served = make_app(model=args.model, models=args.models) if args.model or args.models else kvqa_app
        info = served.engine.load()  # load before serving, so the first user does not wait for it
    except (KvqaError, ValueError) as e:
        raise SystemExit(f"kvqa: {e}") from None
    if args.share and not auth:
        print("kvqa: warning: --share makes this app reachable by anyone who has the link, for 72 hours, and lets "
              "them use this machine's model and memory; add --auth user:password to require a login.",
              file=sys.stderr)
    print(f"kvqa: {info.model} on {info.device} ({info.dtype}), {info.kind} engine, loaded in {info.load_s:.1f} s")
    page = served.build() if served is not kvqa_app else demo
    serve(page, served, concurrency=args.concurrency, queue_size=args.queue_size, host=args.host, port=args.port,
          share=args.share, auth=auth)


def serve(page: gr.Blocks, served: KvqaApp, *, concurrency: int, queue_size: int, host: str, port: int,
          share: bool = False, auth=None, **launch) -> None:
    """Serve the page as `python app.py` does: `concurrency` answers at once, at most `queue_size` waiting (more are
    turned away), uploads up to the configured size, and an unexpected error's text never sent to the browser."""
    page.queue(default_concurrency_limit=concurrency, max_size=queue_size)
    page.launch(server_name=host, server_port=port, share=share, auth=auth, show_error=False,
                max_file_size=served.config.max_file_bytes, theme=gr.themes.Soft(), i18n=served.i18n, **launch)


if __name__ == "__main__":
    main()
