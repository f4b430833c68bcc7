"""kvqa's browser app: upload or paste a document, which is read once; ask questions answered from its cache.

This file lays out the page and wires its events; the handlers and views live in kvqa/ui/ (one module per concern),
the app's sessions in kvqa.session.service, and every decision about documents, models, caches and answers in the
kvqa package. The one composition root is `KvqaApp(config, engine)`: it assembles the service, the page (a frozen
Page of components), the views and the handlers (each given what it uses) and wires them. `demo` (built from the
environment) can be imported without launching or loading the model; `python app.py` builds its own from the command
line and serves it.
"""

from __future__ import annotations

import argparse
import os
import sys

import gradio as gr

from kvqa import KvqaError
from kvqa.cache.budget import CacheBudget
from kvqa.cache.store import store_for
from kvqa.config import Config, config_from_env
from kvqa.engines import Engine, make_engine
from kvqa.messages import LANGUAGES
from kvqa.model.presets import offered
from kvqa.session.service import Service
from kvqa.session.session import Session
from kvqa.ui.api import Api
from kvqa.ui.asking import Questions
from kvqa.ui.evidence import EvidenceView
from kvqa.ui.export import on_export
from kvqa.ui.language import Language, PageTexts
from kvqa.ui.latency import latency_table
from kvqa.ui.loading import Reads
from kvqa.ui.page import Page
from kvqa.ui.panels import Panels
from kvqa.ui.status import AHEAD_TICK_S, StatusView
from kvqa.ui.tabs import Tabs


def close_session(session: Session | None) -> None:
    """The page's state expired or the tab closed: free the session's cache."""
    if session is not None:
        session.close()


def layout(texts: PageTexts, models: list[str], *, ttl_s: float) -> Page:
    """The page's components, inside the Blocks being built; the fixed texts are message ids shown through gr.I18n
    (launch the page with i18n=texts.i18n)."""
    localized, i18n = texts.localized, texts.i18n
    state = gr.State(None, time_to_live=ttl_s, delete_callback=close_session)
    with gr.Row(equal_height=True):
        localized(gr.Markdown, {"value": "ui.intro"})
        lang = gr.Radio([(name, code) for code, name in LANGUAGES.items()], value="en", label="Language · 语言",
                        elem_id="language", scale=0, min_width=180)
    promise_box = gr.Markdown(elem_id="promise")
    model_box = (localized(gr.Dropdown, {"label": "ui.model"}, choices=models, value=models[0], elem_id="model")
                 if len(models) > 1 else None)
    with gr.Row():
        with gr.Column(scale=2):
            # no file_types: Gradio drops a file of another kind without a word; kvqa says what it reads
            upload = localized(gr.File, {"label": "ui.upload"}, type="filepath", file_count="multiple",
                               elem_id="upload")
            pasted = localized(gr.Textbox, {"label": "ui.paste"}, lines=5, max_lines=12, elem_id="paste")
            with gr.Row():
                read_btn = localized(gr.Button, {"value": "ui.read_pasted"}, elem_id="read")
                sample_btn = localized(gr.Button, {"value": "ui.sample"}, elem_id="sample")
            status = gr.Markdown(i18n("ui.no_document"), elem_id="doc-status")
            with gr.Row():
                part = localized(gr.Textbox, {"label": "ui.part", "placeholder": "ui.part_placeholder"}, scale=3,
                                 elem_id="part")
                part_btn = localized(gr.Button, {"value": "ui.read_part"}, scale=1, elem_id="read-part")
            with localized(gr.Accordion, {"label": "ui.limits_label"}, open=False, elem_id="limits-box"):
                localized(gr.Markdown, {"value": "ui.limits"}, elem_id="limits")
            with localized(gr.Accordion, {"label": "ui.evidence"}, open=True, elem_id="evidence"):
                evidence_pick = localized(gr.Dropdown, {"label": "ui.evidence_pick"}, choices=[],
                                          elem_id="evidence-pick")
                evidence_page = gr.Image(type="pil", interactive=False, show_label=False, visible=False,
                                         elem_id="evidence-page", format="png")
                evidence_text = gr.HTML(i18n("evidence.none"), elem_id="evidence-text")
        with gr.Column(scale=3):
            chat = localized(gr.Chatbot, {"label": "ui.chat"}, elem_id="chat", height=420, buttons=["copy"])
            with gr.Row():
                question = localized(gr.Textbox, {"placeholder": "ui.question"}, show_label=False, scale=5,
                                     elem_id="question")
                ask_btn = localized(gr.Button, {"value": "ui.ask"}, variant="primary", scale=1, elem_id="ask")
                stop_btn = localized(gr.Button, {"value": "ui.stop"}, variant="stop", scale=1, elem_id="stop")
            with gr.Row():
                remember_box = localized(gr.Checkbox, {"label": "ui.remember"}, elem_id="remember")
                new_btn = localized(gr.Button, {"value": "ui.new_conversation"}, size="sm",
                                    elem_id="new-conversation")
            also_btn = gr.Button(visible=False, size="sm", elem_id="ask-also")
            ready_box = localized(gr.Checkbox, {"label": "ui.ready_only"}, elem_id="ready-only")
            baseline_box = localized(gr.Checkbox, {"label": "ui.baseline"}, elem_id="baseline")
            with gr.Row():
                export_btn = localized(gr.Button, {"value": "ui.export"}, size="sm", elem_id="export")
            exported = localized(gr.File, {"label": "ui.exported"}, file_count="multiple", interactive=False,
                                 visible=False, elem_id="exported")
    with localized(gr.Accordion, {"label": "ui.latency"}, open=True):
        summary = gr.Markdown(elem_id="latency-summary")
        table = gr.Dataframe(latency_table(None), interactive=False, elem_id="latency-table", wrap=True)
        plot = gr.Plot(elem_id="latency-plot", show_label=False)
    ahead_timer = gr.Timer(AHEAD_TICK_S, active=False)  # refreshes the status while parts are read ahead
    return Page(state=state, lang=lang, promise_box=promise_box, model_box=model_box, upload=upload, pasted=pasted,
                read_btn=read_btn, sample_btn=sample_btn, status=status, part=part, part_btn=part_btn,
                evidence_pick=evidence_pick, evidence_page=evidence_page, evidence_text=evidence_text, chat=chat,
                question=question, ask_btn=ask_btn, stop_btn=stop_btn, remember_box=remember_box, new_btn=new_btn,
                also_btn=also_btn, ready_box=ready_box, baseline_box=baseline_box, export_btn=export_btn,
                exported=exported, summary=summary, table=table, plot=plot, ahead_timer=ahead_timer)


class KvqaApp:
    """The app assembled: the service (sessions, engines, limits, model choice), the page, the views that show a
    session and the handlers by concern, each given what it uses; `demo` is the page, its events wired."""

    def __init__(self, config: Config, engine: Engine, *, budget: CacheBudget | None = None,
                 behind_proxy: bool = False, models: list[str] | None = None):
        self.service = Service(config, engine, budget=budget, behind_proxy=behind_proxy, models=models)
        self.tabs = Tabs()  # each browser tab's read in flight and questions waiting
        self.texts = PageTexts(config)
        with gr.Blocks(title=self.texts.i18n("ui.title")) as self.demo:
            self.page = page = layout(self.texts, self.service.models, ttl_s=config.serving.session_ttl_s)
            self.status = StatusView(self.service, page)
            self.evidence = EvidenceView(self.service, page)
            self.panels = Panels(self.service, page, self.status, self.evidence)
            self.reads = Reads(self.service, page, self.panels, self.tabs)
            self.questions = Questions(page, self.panels, self.tabs)
            self.language = Language(self.texts, page, self.panels, self.tabs)
            self.wire()
            self.api = Api(self.service, page.state)  # the gradio_client API: each client is its own session
        self.service.uploads.own(self.demo)  # a request reads only what its own client uploaded

    @property
    def config(self) -> Config:
        return self.service.config

    def wire(self) -> None:
        """The page's events, each to its handler."""
        page, reads, questions = self.page, self.reads, self.questions
        private = dict(api_visibility="private")
        page.ahead_timer.tick(self.status.on_tick, [page.state, page.lang],
                              [page.state, page.status, page.ahead_timer], **private)
        shown, lang = page.shown, page.lang
        # each read is announced at once (questions asked before it begins wait for it too), then read in turn
        announce = dict(fn=reads.on_read_asked, inputs=None, outputs=None, concurrency_limit=None, **private)
        read = shown + [page.part]
        reading = dict(show_progress_on=page.status, **private)  # one progress bar, on the status, not on every panel
        page.upload.upload(**announce).then(reads.on_upload, [page.upload, page.state, lang], read, **reading)
        page.read_btn.click(**announce).then(reads.on_paste, [page.pasted, page.state, page.upload, lang], read,
                                             **reading)
        page.sample_btn.click(**announce).then(reads.on_sample, [page.state, lang], read, **reading)
        for trigger in (page.part_btn.click, page.part.submit):
            trigger(**announce).then(reads.on_part, [page.part, page.state, lang], read, **reading)
        if page.model_box is not None:  # a person's choice, not the app's
            page.model_box.input(**announce).then(reads.on_model, [page.model_box, page.state, lang], read, **reading)
        # a question is taken at once (shown, waiting, while a document or a model loads), then answered in turn:
        # the answers of every tab share the "answer" slots; Stop withdraws the questions still waiting
        answering = dict(concurrency_id="answer", show_progress_on=page.chat, **private)
        boxes = [page.state, page.baseline_box, page.remember_box, lang, page.ready_box]
        for trigger in (page.ask_btn.click, page.question.submit):
            trigger(questions.on_question, [page.question, page.state, lang], [page.question, page.chat],
                    concurrency_limit=None, trigger_mode="multiple", **private).then(
                questions.on_answer, boxes, shown + [page.question], **answering)
        page.also_btn.click(questions.on_ask_also, boxes, shown + [page.question], **answering)
        page.new_btn.click(questions.on_new_conversation, [page.state, lang], [page.chat, page.also_btn],
                           queue=False, **private)
        page.stop_btn.click(questions.on_stop, [page.state, lang], None, concurrency_limit=None,
                            trigger_mode="multiple", **private)  # queued, to show its toasts, but never waits
        page.export_btn.click(on_export, [page.state, lang], [page.exported], **private)
        page.evidence_pick.input(self.evidence.on_evidence, [page.evidence_pick, page.state, lang], page.viewer,
                                 **private)
        page.chat.select(self.evidence.on_chat_select, [page.state, lang], page.viewer, **private)
        everything = self.language.outputs  # the page's texts: instant, no progress shown over them
        self.demo.load(self.language.on_load, [page.state], everything + [lang], show_progress="hidden", **private)
        lang.input(self.language.on_language, [lang, page.state], everything + [lang], show_progress="hidden",
                   **private)
        self.demo.unload(self.tabs.forget)


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
demo = kvqa_app.demo


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
    parser.add_argument("--model", help="model id or folder, or an offline model (default: $KVQA_MODEL, else each "
                        "document goes to the best installed model that reads its language: docs/models.md)")
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
        info = served.service.engine.load()  # load before serving, so the first user does not wait for it
    except (KvqaError, ValueError) as e:
        raise SystemExit(f"kvqa: {e}") from None
    if args.share and not auth:
        print("kvqa: warning: --share makes this app reachable by anyone who has the link, for 72 hours, and lets "
              "them use this machine's model and memory; add --auth user:password to require a login.",
              file=sys.stderr)
    print(f"kvqa: {info.model} on {info.device} ({info.precision}), {info.kind} engine, loaded in {info.load_s:.1f} s")
    page = served.demo
    serve(page, served, concurrency=args.concurrency, queue_size=args.queue_size, host=args.host, port=args.port,
          share=args.share, auth=auth)


def serve(page: gr.Blocks, served: KvqaApp, *, concurrency: int, queue_size: int, host: str, port: int,
          share: bool = False, auth=None, **launch) -> None:
    """Serve the page as `python app.py` does: `concurrency` answers at once, at most `queue_size` waiting (more are
    turned away), uploads up to the configured size, and an unexpected error's text never sent to the browser."""
    page.queue(default_concurrency_limit=concurrency, max_size=queue_size)
    page.launch(server_name=host, server_port=port, share=share, auth=auth, show_error=False,
                max_file_size=served.config.limits.max_file_bytes, theme=gr.themes.Soft(), i18n=served.texts.i18n,
                **launch)


if __name__ == "__main__":
    main()
