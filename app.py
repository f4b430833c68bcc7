"""kvqa's browser app: upload or paste a document, which is read once; ask questions answered from its cache.

UI only: every decision about documents, models, caches and answers lives in the kvqa package. The one composition
root is `KvqaApp(config, engine)`: `demo` (built from the environment) can be imported without launching or loading
the model; `python app.py` builds its own from the command line and serves it.
"""

from __future__ import annotations

import argparse
import html
import os
import statistics
import sys
import threading
import weakref
from dataclasses import replace
from pathlib import Path

import gradio as gr

from kvqa import KvqaError, QuestionError, document_from_text, load_document
from kvqa.budget import CacheBudget, budget_for
from kvqa.config import Config, config_from_env
from kvqa.documents import combine, load_documents
from kvqa.engines import Engine, make_engine
from kvqa.parts import parse_range, unit_name
from kvqa.session import Session, cache_origin, speedup
from kvqa.shared import SharedCaches
from kvqa.store import store_for
from kvqa.uploads import uploaded_file

SAMPLE = Path(__file__).parent / "assets" / "declaration-of-independence.md"


# ---- formatting ---------------------------------------------------------------------------------------------------

STOP_NOTES = {"stopped": " · stopped", "repeating": " · stopped: it began repeating itself"}


def latency_line(timings, *, stop_reason: str = "eos", follows: int = 0) -> str:
    t = timings
    drafted = ""
    if t.drafted_tokens:
        speedup = f", ~{t.draft_speedup:.1f}x" if t.draft_speedup else ""
        drafted = f" · drafting: {t.drafted_per_step:.2f} tokens kept per step{speedup}"
    after = f" · read after {follows} earlier turn{'s' * (follows != 1)}" if follows else ""
    return (f"\n\n<sub>first token {t.ttft_s:.2f} s · total {t.answer_s:.2f} s · {t.new_tokens} tokens · "
            f"{t.decode_tokens_per_s:.1f} tokens/s{drafted}{server_cache_note(t)}"
            f"{STOP_NOTES.get(stop_reason, '')}{after}</sub>")


def server_cache_note(t) -> str:
    """For answers from a serving engine: how much of the prompt came from its prefix cache, or that it did not say."""
    if t.prompt_tokens is None:
        return ""
    if t.cached_tokens is None:
        return (" · the server did not say how much came from its prefix cache (vLLM: "
                "--enable-prompt-tokens-details; SGLang: --enable-cache-report)")
    return f" · {t.cached_tokens:,} of {t.prompt_tokens:,} prompt tokens from the server's prefix cache"


def sources_block(sources) -> str:
    """The passages an answer relies on, folded under it: each quoted, with its page where there is one."""
    if not sources:
        return ""
    items = []
    for source in sources:
        where = f"page {source.page}" if source.page else f"characters {source.start:,}-{source.end:,}"
        quote = html.escape(" ".join(source.text.split()))
        items.append(f"<li><b>{where}</b>: “{quote}”</li>")
    return (f"\n\n<details class='sources'><summary>Sources in the document ({len(sources)})</summary>"
            f"<ol>{''.join(items)}</ol></details>")


def chat_messages(session: Session | None) -> list[dict]:
    """The current conversation (since "New conversation"); every turn stays in the latency table."""
    messages = []
    for turn in (session.conversation() if session else []):
        messages.append({"role": "user", "content": turn.question})
        messages.append({"role": "assistant", "content": (turn.answer or "…") + sources_block(turn.sources)
                         + latency_line(turn.timings, stop_reason=turn.stop_reason, follows=turn.follows)})
    return messages


def latency_table(session: Session | None) -> list[list]:
    if session is None or session.prefilled is None and not session.turns:
        return []
    prefill_s = session.prefilled.prefill_s if session.prefilled else 0.0
    rows = []
    for n, turn in enumerate(session.turns, start=1):
        t = turn.timings
        factor, measured = speedup(turn, prefill_s)
        rows.append([
            n, turn.question[:60], t.question_tokens, t.new_tokens, round(t.ttft_s, 3), round(t.answer_s, 3),
            round(t.decode_tokens_per_s, 1),
            round(turn.baseline.ttft_s, 3) if turn.baseline else None,
            f"{factor:.1f}x ({'measured' if measured else 'estimated'})" if factor else "",
        ])
    return rows


def latency_summary(session: Session | None) -> str:
    if session is None or session.prefilled is None:
        return "Load a document and ask a question to see what the cache saves."
    doc = session.prefilled
    ready = f"Cache {cache_origin(session)}, once"  # read now, restored from disk, or shared: what it took here
    if not session.turns:
        return f"{ready}. Ask a question to compare."
    ttfts = [t.timings.ttft_s for t in session.turns if t.timings.new_tokens]
    if not ttfts:
        return f"{ready}."
    factors = [speedup(t, doc.prefill_s) for t in session.turns if t.timings.new_tokens]
    measured = [f for f, m in factors if m]
    how = (f"measured by answering without the cache: **{statistics.median(measured):.1f}x** sooner"
           if measured else
           f"estimated as (prefill + TTFT) / TTFT: **{statistics.median(f for f, _ in factors):.1f}x** sooner "
           "(tick “also answer without the cache” to measure it)")
    return (f"{ready}. Median time to first token over {len(ttfts)} "
            f"question(s): **{statistics.median(ttfts):.3f} s**; first token {how}.")


def latency_plot(session: Session | None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if session is None or session.prefilled is None or not session.turns:
        return None
    fig, ax = plt.subplots(figsize=(8, 3.2))
    labels = ["cache\n(once)"] + [f"Q{n}" for n in range(1, len(session.turns) + 1)]
    ax.bar(labels[:1], [max(session.ready_s, 1e-3)], color="#9ca3af",  # log scale: a shared cache took ~0 s
           label=f"cache {cache_origin(session).split(':')[0]}")
    ax.bar(labels[1:], [t.timings.answer_s for t in session.turns], color="#bfdbfe", label="answer total")
    ax.bar(labels[1:], [t.timings.ttft_s for t in session.turns], color="#2563eb", label="time to first token")
    baseline = [t.baseline.ttft_s if t.baseline else 0 for t in session.turns]
    if any(baseline):
        ax.scatter(labels[1:], baseline, color="#dc2626", marker="_", s=400, label="first token without cache")
    ax.set_yscale("log")
    ax.set_ylabel("seconds (log scale)")
    ax.legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    plt.close(fig)
    return fig


def warn(error: KvqaError) -> dict:
    """Show the error's message as a warning and change nothing on screen (gr.Error would mark every output)."""
    gr.Warning(str(error))
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
    """Settings, engine and cache budget, built once; the handlers; and the layout that wires them."""

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
            if sum(1 for s in list(mine) if s.document is not None) >= limit:
                raise KvqaError(f"Your address already has {limit} documents open in other tabs or clients: close "
                                "some, or wait for them to expire, then try again.")
            session = Session(engine or self.engine, self.budget, client=client, shared=self.shared)
            mine.add(session)
        return session

    def engine_for(self, model: str) -> Engine:
        """The engine of one of the offered models, made on first use (its model loads then)."""
        if model not in self.models:
            raise KvqaError(f"{model} is not offered here: choose one of {', '.join(self.models)}.")
        if model not in self._engines:
            config = replace(self.config, model=model, model_reason="chosen in the app")
            self._engines[model] = make_engine(config, store=store_for(config))
        return self._engines[model]

    def on_model(self, model, session, request: gr.Request = None, progress=gr.Progress()) -> dict:
        """UI: switch model; the document's text is kept and read again by the new model."""
        try:
            engine = self.engine_for(model)
            if session is not None and session.engine is engine:
                return {}
            progress(0, desc=f"Loading {model}")
            engine.load()
            fresh = self.new_session(None, request, engine=engine)
            if session is not None and session.source is not None:
                fresh.load(session.source, progress=lambda f: progress(f, desc="Reading the document again"))
        except KvqaError as e:
            return warn(e)
        if session is not None:
            session.close()
        return self.panels(fresh) | self.part_box(fresh) | {self.promise_box: self.promise(fresh)}

    @staticmethod
    def close_session(session: Session | None) -> None:
        if session is not None:
            session.close()

    # ---- what the screen shows

    def status_markdown(self, session: Session | None, *, reused: bool = False) -> str:
        if session is None or session.document is None:
            return "No document loaded yet."
        doc, info = session.prefilled, session.engine.info
        if doc is None:
            return f"**{session.document.name}**: cache freed to save memory; it is read again on your next question."
        pages = f", {session.document.pages} pages" if session.document.pages else ""
        note = " (already loaded: not read again)" if reused else ""
        part = f"**{session.notice}**\n\n" if session.notice else ""
        rate = f", {doc.tokens_per_s:,.0f} tokens/s" if session.cache_source == "prefill" else ""
        return (
            f"**{session.document.name}**{pages}{note}\n\n{part}"
            f"- model: {info.model} on {info.device} ({info.dtype}): "
            f"{self.config.model_reason if session.engine is self.engine else 'chosen in the app'}\n"
            f"- document tokens: **{doc.tokens:,}**\n"
            f"- {cache_origin(session)}{rate}\n"
            + (f"- cache size: {doc.cache_bytes / 2**20:,.1f} MB (with room for {self.config.reserve_tokens:,} "
               f"question and answer tokens)\n" if doc.cache_bytes else "- cache: kept by the serving engine\n") +
            f"- memory for all sessions' caches: {self.budget.used_bytes / 2**20:,.0f} of "
            f"{self.budget.limit_bytes / 2**20:,.0f} MB in use"
        )

    def panels(self, session: Session | None, *, reused: bool = False) -> dict:
        """Everything that shows the session, by component."""
        return {self.state: session, self.status: self.status_markdown(session, reused=reused),
                self.chat: chat_messages(session), self.summary: latency_summary(session),
                self.table: latency_table(session), self.plot: latency_plot(session)}

    # ---- handlers

    def document_from(self, files, text: str | None):
        """The document a client sent: uploaded files (nothing else on the server is read) and/or pasted text, as
        one document. A file that cannot be read is named in a warning and the others are read; if none can, the
        error says why and nothing changes."""
        files = [files] if isinstance(files, (str, os.PathLike)) else list(files or [])
        documents, problems = load_documents([uploaded_file(f) for f in files], config=self.config)
        if text and text.strip():
            if len(text) > self.config.max_file_bytes:
                raise KvqaError(f"The pasted text is {len(text):,} characters; the limit is "
                                f"{self.config.max_file_bytes:,}. Paste the part you need.")
            documents.append(document_from_text(text))
        document = combine(documents, problems=problems)  # raises when nothing could be read
        for problem in problems:
            gr.Warning(f"Skipped: {problem} The other files were read.")
        return document

    def read(self, document, session, request, progress, *, part=None) -> tuple[Session, bool]:
        session = self.new_session(session, request)
        progress(0, desc="Reading the document")
        changed = session.load(document, part=part,
                               progress=lambda f: progress(f, desc="Reading the document (prefill)"))
        return session, changed

    def show_read(self, get_document, session, request, progress) -> dict:
        try:
            session, changed = self.read(get_document(), session, request, progress)
        except KvqaError as e:
            return warn(e)
        return self.panels(session, reused=not changed) | self.part_box(session)

    def part_box(self, session: Session | None) -> dict:
        """The part control, labelled in pages for a PDF and characters for text, showing what was read."""
        source = session.source if session else None
        if source is None:
            return {}
        part = session.document.part
        value = f"{part.first}-{part.last}" if part else ""
        total = len(source.page_starts) if source.page_starts else len(source.text)
        return {self.part: gr.update(label=f"Part to read ({unit_name(source)}, 1-{total:,})", value=value)}

    def on_upload(self, file, session, request: gr.Request = None, progress=gr.Progress()) -> dict:
        """UI: read an uploaded file once; show its figures."""
        return self.show_read(lambda: self.document_from(file, None), session, request, progress)

    def on_paste(self, text, session, files=None, request: gr.Request = None, progress=gr.Progress()) -> dict:
        """UI: read pasted text once (with the uploaded files, if any, as one document)."""
        return self.show_read(lambda: self.document_from(files, text), session, request, progress)

    def on_part(self, text, session, request: gr.Request = None, progress=gr.Progress()) -> dict:
        """UI: read another part of the loaded document (pages of a PDF, characters of a text)."""
        if session is None or session.source is None:
            return warn(KvqaError("Load a document first, then choose which part of it to read."))
        try:
            part = parse_range(text, session.source)
            session, changed = self.read(session.source, session, request, progress, part=part)
        except KvqaError as e:
            return warn(e)
        return self.panels(session, reused=not changed) | self.part_box(session)

    @staticmethod
    def on_remember(remember, session) -> None:
        """UI: follow-up questions on or off (off: every question is read after the document alone)."""
        if session is not None:
            session.remember = bool(remember)

    def on_new_conversation(self, session) -> dict:
        """UI: start a new conversation on the same document, without reading it again."""
        if session is not None:
            session.new_conversation()
        return {self.chat: chat_messages(session)}

    def on_sample(self, session, request: gr.Request = None, progress=gr.Progress()) -> dict:
        """UI: load the sample document (a file of the app's own, never a path from the client)."""
        return self.show_read(lambda: load_document(SAMPLE, config=self.config), session, request, progress)

    def on_ask(self, question, session, baseline, remember=False, progress=gr.Progress()):
        """UI: stream the answer into the chat, then its latency."""
        if session is not None:
            session.remember = bool(remember)
        if session is None:
            yield warn(QuestionError("No document is loaded yet: upload a file, paste text, or load the sample "
                                     "first."))
            return
        chat_before = chat_messages(session)
        history = chat_before + [{"role": "user", "content": question}, {"role": "assistant", "content": ""}]
        rebuilt = lambda d: gr.Info(f"Your document's cache had been freed to make room for other users; it is back "
                                    f"({cache_origin(session)}).")
        try:
            with session.ask(question, baseline=bool(baseline), on_rebuild=rebuilt,
                             progress=lambda f: progress(f, desc="Reading the document again")) as pieces:
                text = ""
                for piece in pieces:
                    text += piece
                    history[-1] = {"role": "assistant", "content": text}
                    yield {self.question: "", self.chat: history}  # only the chat changes while streaming
        except KvqaError as e:  # the chat goes back to what it was; the question stays in its box
            yield {self.question: question, self.chat: chat_before} | warn(e)
            return
        yield self.panels(session)

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
                                  + (f". {session.notice}" if session.notice else "")),
                self.state: session}

    def api_ask(self, question: str, remember: bool = False, session=None):
        """API: answer a question about this client's document, streaming: each update is the answer so far, the last
        one the whole answer (client.predict returns it; client.submit iterates the updates). remember=True reads the
        question after this client's earlier remembered questions and answers (a follow-up)."""
        if session is None:
            raise gr.Error("No document is loaded yet: call /prefill first.", print_exception=False)
        session.remember = bool(remember)
        try:
            with session.ask(question) as pieces:
                text = ""
                for piece in pieces:
                    text += piece
                    yield {self.api_answer: text}
                yield {self.api_answer: pieces.answer.text, self.state: session}
        except KvqaError as e:
            raise gr.Error(str(e), print_exception=False) from None

    @staticmethod
    def api_sources(session=None) -> list[dict]:
        """API: the passages of the document the last answer relies on, best first: page (PDFs), start and end
        (character offsets into the document's text) and text."""
        if session is None or not session.turns:
            raise gr.Error("No answer yet: call /prefill, then /ask, first.", print_exception=False)
        return [{"page": s.page, "start": s.start, "end": s.end, "text": s.text} for s in session.turns[-1].sources]

    def promise(self, session: Session | None = None) -> str:
        """What the answers are promised to be, for this engine's precision."""
        info = (session.engine if session is not None else self.engine).info
        return f"<sub>{info.model} on {info.device} ({info.dtype}). {info.guarantee}</sub>"

    # ---- layout

    def build(self) -> gr.Blocks:
        """The page and its events; components become attributes, so handlers return outputs by name."""
        config = self.config
        with gr.Blocks(title="kvqa: read a document once, ask it anything") as demo:
            self.state = gr.State(None, time_to_live=config.session_ttl_s, delete_callback=self.close_session)
            gr.Markdown(
                "# kvqa\nThe model reads your document **once** (the prefill) and keeps its key/value cache; each "
                "question then costs only its own tokens."
            )
            self.promise_box = gr.Markdown(elem_id="promise")
            if len(self.models) > 1:
                model_box = gr.Dropdown(self.models, value=self.models[0], label="Model (switching reads the "
                                        "document again)", elem_id="model")
            with gr.Row():
                with gr.Column(scale=2):
                    upload = gr.File(label="Upload PDF, .txt or .md files (several are read as one document)",
                                     file_types=[".pdf", ".txt", ".md"], type="filepath", file_count="multiple",
                                     elem_id="upload")
                    pasted = gr.Textbox(label="…or paste text", lines=5, max_lines=12, elem_id="paste")
                    with gr.Row():
                        read_btn = gr.Button("Read pasted text (with the files above)", elem_id="read")
                        sample_btn = gr.Button("Load the sample", elem_id="sample")
                    self.status = gr.Markdown("No document loaded yet.", elem_id="doc-status")
                    with gr.Row():
                        self.part = gr.Textbox(label="Part to read (pages of a PDF, characters of a text)",
                                               placeholder="e.g. 14-27", scale=3, elem_id="part")
                        part_btn = gr.Button("Read this part", scale=1, elem_id="read-part")
                    gr.Markdown(
                        f"<sub>Limits: files up to {config.max_file_mb:g} MB; the model reads up to its context less "
                        f"{config.reserve_tokens} tokens for question and answer (a longer document is read in "
                        f"parts); PDFs up to "
                        f"{config.max_pdf_pages:,} pages; questions up to {config.max_question_tokens} tokens; "
                        f"answers up to {config.max_new_tokens} tokens.</sub>"
                    )
                with gr.Column(scale=3):
                    self.chat = gr.Chatbot(label="Questions and answers", elem_id="chat", height=420,
                                           buttons=["copy"])
                    with gr.Row():
                        self.question = gr.Textbox(placeholder="Ask about the document (any language) and press "
                                                   "Enter", show_label=False, scale=5, elem_id="question")
                        ask_btn = gr.Button("Ask", variant="primary", scale=1, elem_id="ask")
                        stop_btn = gr.Button("Stop", variant="stop", scale=1, elem_id="stop")
                    with gr.Row():
                        remember_box = gr.Checkbox(label="Remember this conversation (follow-up questions)",
                                                   elem_id="remember")
                        new_btn = gr.Button("New conversation", size="sm", elem_id="new-conversation")
                    baseline_box = gr.Checkbox(label="Also answer without the cache (measures the real speedup; "
                                               "slow)", elem_id="baseline")
            with gr.Accordion("Latency: one prefill against every answer", open=True):
                self.summary = gr.Markdown(elem_id="latency-summary")
                self.table = gr.Dataframe(
                    headers=["#", "question", "question tokens", "new tokens", "TTFT s", "total s", "tokens/s",
                             "TTFT without cache s", "first-token speedup"],
                    interactive=False, elem_id="latency-table", wrap=True,
                )
                self.plot = gr.Plot(elem_id="latency-plot", show_label=False)

            shown = [self.state, self.status, self.chat, self.summary, self.table, self.plot]
            upload.upload(self.on_upload, [upload, self.state], shown + [self.part], api_visibility="private")
            read_btn.click(self.on_paste, [pasted, self.state, upload], shown + [self.part], api_visibility="private")
            sample_btn.click(self.on_sample, [self.state], shown + [self.part], api_visibility="private")
            for trigger in (part_btn.click, self.part.submit):
                trigger(self.on_part, [self.part, self.state], shown + [self.part], api_visibility="private")
            for trigger in (ask_btn.click, self.question.submit):
                trigger(self.on_ask, [self.question, self.state, baseline_box, remember_box],
                        shown + [self.question], api_visibility="private")
            remember_box.change(self.on_remember, [remember_box, self.state], None, queue=False,
                                api_visibility="private")
            new_btn.click(self.on_new_conversation, [self.state], [self.chat], queue=False,
                          api_visibility="private")
            stop_btn.click(self.on_stop, [self.state], None, queue=False, api_visibility="private")
            demo.load(self.promise, None, self.promise_box, api_visibility="private")
            if len(self.models) > 1:
                model_box.change(self.on_model, [model_box, self.state], shown + [self.part, self.promise_box],
                                 api_visibility="private")

            # the gradio_client API: each client is its own session
            with gr.Row(visible=False):
                api_file, api_text, api_part, api_question = gr.File(), gr.Textbox(), gr.Textbox(), gr.Textbox()
                api_remember = gr.Checkbox()
                self.api_status, self.api_answer = gr.Textbox(), gr.Textbox()
                api_sources = gr.JSON()
                api_prefill_btn, api_ask_btn, api_sources_btn = gr.Button(), gr.Button(), gr.Button()
            api_prefill_btn.click(self.api_prefill, [api_file, api_text, api_part, self.state],
                                  [self.api_status, self.state], api_name="prefill")
            api_ask_btn.click(self.api_ask, [api_question, api_remember, self.state], [self.api_answer, self.state],
                              api_name="ask")
            api_sources_btn.click(self.api_sources, [self.state], [api_sources], api_name="sources")
        return demo


def make_app(environ=os.environ, **overrides) -> KvqaApp:
    """The app for these environment variables and overrides (model=...); the model loads on first use."""
    models = overrides.pop("models", None) or environ.get("KVQA_MODELS", "")
    models = [m.strip() for m in models.split(",") if m.strip()]
    if models and not overrides.get("model") and not environ.get("KVQA_MODEL", "").strip():
        overrides["model"] = models[0]  # the first offered model is the one loaded first
    config = config_from_env(environ, **overrides)
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
    parser.add_argument("--model", help="model id or folder (default: $KVQA_MODEL, else SmolLM2-135M-Instruct)")
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
    page.queue(default_concurrency_limit=args.concurrency, max_size=args.queue_size)
    page.launch(server_name=args.host, server_port=args.port, share=args.share, auth=auth, show_error=False,
                max_file_size=served.config.max_file_bytes, theme=gr.themes.Soft())


if __name__ == "__main__":
    main()
