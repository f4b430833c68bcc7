"""kvqa's browser app: upload or paste a document, which is read once; ask questions answered from its cache.

UI only: every decision about documents, models, caches and answers lives in the kvqa package.
`demo` can be imported without launching; `python app.py` serves it.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import weakref
from pathlib import Path

import gradio as gr

from kvqa import Answer, KvqaError, QuestionError, document_from_text, load_document, load_model
from kvqa.budget import CacheBudget, budget_for
from kvqa.config import Config, config_from_env
from kvqa.session import Session, speedup
from kvqa.uploads import uploaded_file

SAMPLE = Path(__file__).parent / "assets" / "declaration-of-independence.md"
SESSION_TTL_S = float(os.environ.get("KVQA_SESSION_TTL", 3600))
MAX_SESSIONS_PER_CLIENT = int(os.environ.get("KVQA_MAX_SESSIONS_PER_CLIENT", 16))
BEHIND_PROXY = bool(os.environ.get("SPACE_ID")) or os.environ.get("KVQA_BEHIND_PROXY") == "1"
try:
    CONFIG: Config = config_from_env(os.environ)
except KvqaError as e:  # a bad KVQA_* variable: say which, without a traceback
    raise SystemExit(f"kvqa: {e}") from None
_budget: CacheBudget | None = None


def budget() -> CacheBudget:
    """The process-wide cache budget, sized when the model is first needed."""
    global _budget
    if _budget is None:
        lm = load_model(CONFIG)
        _budget = budget_for(lm, CONFIG.cache_budget_mb)
    return _budget


def client_of(request: gr.Request | None) -> str:
    """Who is asking, for per-client limits: the address the proxy saw on a Space (its last X-Forwarded-For hop),
    else the connection's address. Behind another proxy, set KVQA_BEHIND_PROXY=1 to trust X-Forwarded-For too."""
    if request is None:
        return "local"
    forwarded = request.headers.get("x-forwarded-for", "") if BEHIND_PROXY else ""
    if forwarded.strip():
        return forwarded.split(",")[-1].strip()
    return getattr(request.client, "host", None) or "unknown"


_sessions: dict[str, weakref.WeakSet] = {}  # client -> its sessions, to bound how many one client opens


def new_session(session: Session | None, request: gr.Request | None = None) -> Session:
    """The session in state, or a new one for this client; refused past MAX_SESSIONS_PER_CLIENT with documents."""
    if session is not None:
        return session
    client = client_of(request)
    mine = _sessions.setdefault(client, weakref.WeakSet())
    if sum(1 for s in list(mine) if s.document is not None) >= MAX_SESSIONS_PER_CLIENT:
        raise KvqaError(f"Your address already has {MAX_SESSIONS_PER_CLIENT} documents open in other tabs or "
                        "clients: close some, or wait for them to expire, then try again.")
    session = Session(budget(), client=client)
    mine.add(session)
    return session


def close_session(session: Session | None) -> None:
    if session is not None:
        session.close()


# ---- formatting -------------------------------------------------------------------------------------------------

def status_markdown(session: Session | None, *, reused: bool = False) -> str:
    if session is None or session.document is None:
        return "No document loaded yet."
    doc, lm = session.prefilled, load_model(CONFIG)
    if doc is None:
        return f"**{session.document.name}**: cache freed to save memory; it is read again on your next question."
    pages = f", {session.document.pages} pages" if session.document.pages else ""
    note = " (already loaded: not read again)" if reused else ""
    return (
        f"**{session.document.name}**{pages}{note}\n\n"
        f"- model: {lm.name} on {lm.device.type} ({str(lm.dtype).removeprefix('torch.')})\n"
        f"- document tokens: **{doc.tokens:,}**\n"
        f"- prefill (once): **{doc.prefill_s:.2f} s**, {doc.tokens_per_s:,.0f} tokens/s\n"
        f"- cache size: {doc.cache_bytes / 2**20:,.1f} MB (with room for {CONFIG.reserve_tokens:,} question and "
        f"answer tokens)\n"
        f"- memory for all sessions' caches: {budget().used_bytes / 2**20:,.0f} of "
        f"{budget().limit_bytes / 2**20:,.0f} MB in use"
    )


def latency_line(timings, *, stopped: bool = False) -> str:
    t = timings
    return (f"\n\n<sub>first token {t.ttft_s:.2f} s · total {t.answer_s:.2f} s · {t.new_tokens} tokens · "
            f"{t.decode_tokens_per_s:.1f} tokens/s{' · stopped' if stopped else ''}</sub>")


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
    if not session.turns:
        return f"Prefill: **{doc.prefill_s:.2f} s**, once. Ask a question to compare."
    ttfts = [t.timings.ttft_s for t in session.turns if t.timings.new_tokens]
    if not ttfts:
        return f"Prefill: **{doc.prefill_s:.2f} s**, once."
    factors = [speedup(t, doc.prefill_s) for t in session.turns if t.timings.new_tokens]
    measured = [f for f, m in factors if m]
    how = (f"measured by answering without the cache: **{statistics.median(measured):.1f}x** sooner"
           if measured else
           f"estimated as (prefill + TTFT) / TTFT: **{statistics.median(f for f, _ in factors):.1f}x** sooner "
           "(tick “also answer without the cache” to measure it)")
    return (f"Prefill: **{doc.prefill_s:.2f} s**, once. Median time to first token over {len(ttfts)} "
            f"question(s): **{statistics.median(ttfts):.3f} s**; first token {how}.")


def latency_plot(session: Session | None):
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    if session is None or session.prefilled is None or not session.turns:
        return None
    fig, ax = plt.subplots(figsize=(8, 3.2))
    labels = ["prefill\n(once)"] + [f"Q{n}" for n in range(1, len(session.turns) + 1)]
    ax.bar(labels[:1], [session.prefilled.prefill_s], color="#9ca3af", label="prefill (document, once)")
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


def chat_messages(session: Session | None) -> list[dict]:
    messages = []
    for turn in (session.turns if session else []):
        messages.append({"role": "user", "content": turn.question})
        messages.append({"role": "assistant",
                         "content": (turn.answer or "…") + latency_line(turn.timings, stopped=turn.stopped)})
    return messages


def panels(session: Session | None, *, reused: bool = False):
    """Everything that shows the session: status, chat, latency summary, table, plot."""
    return (status_markdown(session, reused=reused), chat_messages(session), latency_summary(session),
            latency_table(session), latency_plot(session))


# ---- handlers -----------------------------------------------------------------------------------------------------

def _document(file: str | None, text: str | None):
    """The document a client sent: an uploaded file (nothing else on the server is read) or pasted text."""
    if file:
        return load_document(uploaded_file(file), config=CONFIG)
    if text and text.strip():
        if len(text) > CONFIG.max_file_bytes:
            raise KvqaError(f"The pasted text is {len(text):,} characters; the limit is {CONFIG.max_file_bytes:,}. "
                            "Paste the part you need.")
        return document_from_text(text)
    raise KvqaError("Nothing to read: upload a PDF, .txt or .md file, or paste some text.")


def _read(document, session, request, progress) -> tuple[Session, bool]:
    session = new_session(session, request)
    lm = load_model(CONFIG)
    progress(0, desc="Reading the document")
    changed = session.load(lm, document, config=CONFIG,
                           progress=lambda f: progress(f, desc="Reading the document (prefill)"))
    return session, changed


def warn(error: KvqaError, outputs: int) -> tuple:
    """Show the error's message as a warning and change nothing on screen (gr.Error would mark every output)."""
    gr.Warning(str(error))
    return (gr.skip(),) * outputs


def on_load(read, session, request, progress):
    """UI: read a document (read() gives it) once; show its figures."""
    try:
        session, changed = _read(read(), session, request, progress)
    except KvqaError as e:
        return warn(e, 6)
    return session, *panels(session, reused=not changed)


def on_upload(file, session, request: gr.Request = None, progress=gr.Progress()):
    """UI: read an uploaded file."""
    return on_load(lambda: _document(file, None), session, request, progress)


def on_paste(text, session, request: gr.Request = None, progress=gr.Progress()):
    """UI: read pasted text."""
    return on_load(lambda: _document(None, text), session, request, progress)


def on_sample(session, request: gr.Request = None, progress=gr.Progress()):
    """UI: load the sample document (a file of the app's own, never a path from the client)."""
    return on_load(lambda: load_document(SAMPLE, config=CONFIG), session, request, progress)


def on_ask(question, session, baseline, progress=gr.Progress()):
    """UI: stream the answer into the chat, then its latency."""
    if session is None:
        yield warn(QuestionError("No document is loaded yet: upload a file, paste text, or load the sample first."), 7)
        return
    lm = load_model(CONFIG)
    chat_before = chat_messages(session)
    history = chat_before + [{"role": "user", "content": question}, {"role": "assistant", "content": ""}]
    text = ""
    try:
        for event in session.ask(lm, question, config=CONFIG, baseline=bool(baseline),
                                 progress=lambda f: progress(f, desc="Reading the document again"),
                                 on_rebuild=lambda d: gr.Info(
                                     f"Your document's cache had been freed to make room for other users; it was "
                                     f"read again ({d.prefill_s:.1f} s).")):
            if isinstance(event, Answer):
                continue
            text += event
            history[-1] = {"role": "assistant", "content": text}
            yield session, "", history, *[gr.skip()] * 4  # only the chat changes while streaming
    except KvqaError as e:  # the chat goes back to what it was; the question stays in its box
        yield session, question, chat_before, *warn(e, 4)
        return
    status, chat, summary, table, plot = panels(session)
    yield session, "", chat, status, summary, table, plot


def on_stop(session):
    if session is not None:
        session.stop()


def api_prefill(file: str | None = None, text: str | None = None, session=None, request: gr.Request = None,
                progress=gr.Progress()):
    """API: read a document (`text` for pasted text, `file` for an upload); returns the prefill figures."""
    try:
        session, changed = _read(_document(file, text), session, request, progress)
    except KvqaError as e:
        raise gr.Error(str(e), print_exception=False) from None
    doc = session.prefilled
    return (f"{'prefilled' if changed else 'already loaded'} {session.document.name}: {doc.tokens} tokens, "
            f"{doc.prefill_s:.3f} s, {doc.tokens_per_s:.0f} tokens/s, cache {doc.cache_bytes} bytes"), session


def api_ask(question: str, session=None):
    """API: answer a question about this client's document, streaming: each update is the answer so far, the last
    one the whole answer (client.predict returns it; client.submit iterates the updates)."""
    if session is None:
        raise gr.Error("No document is loaded yet: call /prefill first.", print_exception=False)
    text = ""
    try:
        for event in session.ask(load_model(CONFIG), question, config=CONFIG):
            text = event.text if isinstance(event, Answer) else text + event
            yield text, session
    except KvqaError as e:
        raise gr.Error(str(e), print_exception=False) from None


# ---- layout -------------------------------------------------------------------------------------------------------

with gr.Blocks(title="kvqa: read a document once, ask it anything") as demo:
    session_state = gr.State(None, time_to_live=SESSION_TTL_S, delete_callback=close_session)
    gr.Markdown(
        "# kvqa\nThe model reads your document **once** (the prefill) and keeps its key/value cache; each question "
        "then costs only its own tokens. Answers are exactly what the model says when it reads everything again."
    )
    with gr.Row():
        with gr.Column(scale=2):
            upload = gr.File(label="Upload a PDF, .txt or .md", file_types=[".pdf", ".txt", ".md"],
                             type="filepath", elem_id="upload")
            pasted = gr.Textbox(label="…or paste text", lines=5, max_lines=12, elem_id="paste")
            with gr.Row():
                read_btn = gr.Button("Read pasted text", elem_id="read")
                sample_btn = gr.Button("Load the sample", elem_id="sample")
            status = gr.Markdown("No document loaded yet.", elem_id="doc-status")
            gr.Markdown(
                f"<sub>Limits: files up to {CONFIG.max_file_mb:g} MB; documents up to the model's context less "
                f"{CONFIG.reserve_tokens} tokens for question and answer; PDFs up to {CONFIG.max_pdf_pages:,} pages; "
                f"questions up to {CONFIG.max_question_tokens} tokens; answers up to {CONFIG.max_new_tokens} tokens."
                "</sub>"
            )
        with gr.Column(scale=3):
            chatbot = gr.Chatbot(label="Questions and answers", elem_id="chat", height=420, buttons=["copy"])
            with gr.Row():
                question_box = gr.Textbox(placeholder="Ask about the document (any language) and press Enter",
                                          show_label=False, scale=5, elem_id="question")
                ask_btn = gr.Button("Ask", variant="primary", scale=1, elem_id="ask")
                stop_btn = gr.Button("Stop", variant="stop", scale=1, elem_id="stop")
            baseline_box = gr.Checkbox(label="Also answer without the cache (measures the real speedup; slow)",
                                       elem_id="baseline")
    with gr.Accordion("Latency: one prefill against every answer", open=True):
        summary = gr.Markdown(elem_id="latency-summary")
        table = gr.Dataframe(
            headers=["#", "question", "question tokens", "new tokens", "TTFT s", "total s", "tokens/s",
                     "TTFT without cache s", "first-token speedup"],
            interactive=False, elem_id="latency-table", wrap=True,
        )
        plot = gr.Plot(elem_id="latency-plot", show_label=False)

    shown = [status, chatbot, summary, table, plot]
    upload.upload(on_upload, [upload, session_state], [session_state, *shown], api_visibility="private")
    read_btn.click(on_paste, [pasted, session_state], [session_state, *shown], api_visibility="private")
    sample_btn.click(on_sample, [session_state], [session_state, *shown], api_visibility="private")
    ask_outputs = [session_state, question_box, chatbot, status, summary, table, plot]
    for trigger in (ask_btn.click, question_box.submit):
        trigger(on_ask, [question_box, session_state, baseline_box], ask_outputs, api_visibility="private")
    stop_btn.click(on_stop, [session_state], None, queue=False, api_visibility="private")

    # the gradio_client API: each client is its own session
    with gr.Row(visible=False):
        api_file, api_text, api_question = gr.File(), gr.Textbox(), gr.Textbox()
        api_status, api_answer = gr.Textbox(), gr.Textbox()
        api_prefill_btn, api_ask_btn = gr.Button(), gr.Button()
    api_prefill_btn.click(api_prefill, [api_file, api_text, session_state], [api_status, session_state],
                          api_name="prefill")
    api_ask_btn.click(api_ask, [api_question, session_state], [api_answer, session_state], api_name="ask")


def main(argv: list[str] | None = None) -> None:
    global CONFIG
    parser = argparse.ArgumentParser(description="Serve the kvqa app.")
    parser.add_argument("--model", help="model id or folder (default: $KVQA_MODEL, else SmolLM2-135M-Instruct)")
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
    except ValueError as e:
        raise SystemExit(f"kvqa: {e}") from None
    if args.share and not auth:
        print("kvqa: warning: --share makes this app reachable by anyone who has the link, for 72 hours, and lets "
              "them use this machine's model and memory; add --auth user:password to require a login.",
              file=sys.stderr)
    if args.model:
        CONFIG = config_from_env(os.environ, model=args.model)
    try:
        lm = load_model(CONFIG)  # load before serving, so the first user does not wait for it
    except KvqaError as e:
        raise SystemExit(f"kvqa: {e}")
    print(f"kvqa: {lm.name} on {lm.device} ({lm.dtype}), loaded in {lm.load_s:.1f} s")
    demo.queue(default_concurrency_limit=args.concurrency, max_size=args.queue_size)
    demo.launch(server_name=args.host, server_port=args.port, share=args.share, auth=auth, show_error=False,
                max_file_size=CONFIG.max_file_bytes, theme=gr.themes.Soft())


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


if __name__ == "__main__":
    main()
