"""kvqa's browser app: upload or paste a document, which is read once; ask questions answered from its cache.

This file builds the page and wires its events; the handlers and views live in kvqa/ui/ (one module per concern) and
every decision about documents, models, caches and answers in the kvqa package. The one composition root is
`KvqaApp(config, engine)`: `demo` (built from the environment) can be imported without launching or loading the
model; `python app.py` builds its own from the command line and serves it.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

import gradio as gr

from kvqa import KvqaError, load_document
from kvqa.cache.budget import CacheBudget
from kvqa.cache.store import store_for
from kvqa.config import Config, config_from_env
from kvqa.engines import Engine, make_engine
from kvqa.errors import BusyError
from kvqa.messages import CATALOG, LANGUAGES, language_of, say
from kvqa.model.presets import offered
from kvqa.session.session import Session
from kvqa.ui import warn
from kvqa.ui.answers import chat_messages
from kvqa.ui.api import Api
from kvqa.ui.asking import Asking, waiting_messages
from kvqa.ui.evidence import EvidenceViewer
from kvqa.ui.export import conversation_files
from kvqa.ui.latency import latency_plot, latency_summary, latency_table
from kvqa.ui.loading import Loading
from kvqa.ui.reading import Reading
from kvqa.ui.status import AHEAD_TICK_S, StatusPanel

SAMPLE = Path(__file__).parent / "assets" / "declaration-of-independence.md"


class KvqaApp(Reading, StatusPanel, EvidenceViewer, Loading, Asking, Api):
    """The page over the app's sessions (Reading): its components, built once by build() and kept as attributes so
    handlers return outputs by name, and the handlers by concern (kvqa/ui/). Every handler for the page takes `lang`
    (the language switch's value) and says everything in it."""

    def __init__(self, config: Config, engine: Engine, *, budget: CacheBudget | None = None,
                 behind_proxy: bool = False, models: list[str] | None = None):
        super().__init__(config, engine, budget=budget, behind_proxy=behind_proxy, models=models)
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
        self.model_box: gr.Dropdown | None = None  # the list of models, when there is more than one

    # ---- what the screen shows

    def panels(self, session: Session | None, lang: str = "en", *, reused: bool = False, tab=None) -> dict:
        """Everything that shows the session, by component (tab: the browser tab's questions still waiting, shown
        in the chat after the conversation)."""
        return {self.state: session, self.status: self.status_markdown(session, lang, reused=reused),
                self.ahead_timer: gr.Timer(active=session is not None and session in self.read_ahead_running),
                self.chat: chat_messages(session, lang) + waiting_messages(tab, lang),
                self.summary: latency_summary(session, lang, estimate=self.estimates.get(session) if session else None),
                self.table: latency_table(session, lang), self.plot: latency_plot(session, lang),
                self.also_btn: self.also_button(session, lang)} | self.evidence(session, None, lang) | (
            {self.model_box: self.model_of(session)} if self.model_box is not None and session is not None else {}) | (
            {self.promise_box: self.promise(session, lang)} if session is not None else {})

    def relabel(self, lang: str) -> dict:
        """The page's fixed texts in `lang`, by component."""
        return {component: gr.update(**{prop: self.page_texts[lang][key] for prop, key in texts.items()})
                for component, texts in self._fixed.items()}

    def localized(self, make, texts: dict[str, str], /, **options):
        """make(**options) with its fixed texts (property -> message id) through gr.I18n, remembered for relabel."""
        component = make(**{prop: self.i18n(key) for prop, key in texts.items()}, **options)
        self._fixed[component] = texts
        return component

    # ---- handlers (reading a document's in kvqa/ui/loading.py, questions' in asking.py, the API's in api.py)

    def on_load(self, request: gr.Request = None) -> dict:
        """UI, when the page opens: the language from the browser's Accept-Language header, and the page in it."""
        lang = language_of(request.headers.get("accept-language") if request is not None else None)
        return {self.lang: lang} | self.on_language(lang, None, request)

    def on_language(self, lang, session, request: gr.Request = None) -> dict:
        """UI: say everything on the page in `lang`: the fixed texts, the panels and the answers so far. Refused while
        an answer is written (the switch shows the language in use again)."""
        tab = self.tabs.of(request)
        if tab.answering or (session is not None and session.answering):
            return warn(BusyError("busy.switch_language"), tab.lang, put_back={self.lang: tab.lang})
        tab.lang = lang
        page = self.relabel(lang)
        shown = (self.panels(session, lang, tab=tab) | self.part_box(session, lang)
                 | {self.promise_box: self.promise(session, lang)})
        for component, value in shown.items():
            if component in page:  # the chat and the part box: a fixed text and what they show
                is_update = isinstance(value, dict) and value.get("__type__") == "update"
                value = page[component] | (value if is_update else {"value": value})
            page[component] = value
        return page

    def on_sample(self, session, lang="en", request: gr.Request = None, progress=gr.Progress()) -> dict:
        """UI: load the sample document (a file of the app's own, never a path from the client)."""
        self.tabs.of(request).begin()
        return self.show_read(lambda _: load_document(SAMPLE, config=self.config), session, lang, request, progress)

    def on_unload(self, request: gr.Request = None) -> None:
        """The tab closed: forget what it had in flight (its session expires with its state)."""
        self.tabs.forget(request)

    @staticmethod
    def close_session(session: Session | None) -> None:
        if session is not None:
            session.close()

    def on_export(self, session, lang="en") -> dict:
        """UI: the conversation as a Markdown and a JSON file to download."""
        try:
            files = conversation_files(session)
        except KvqaError as e:
            return warn(e, lang)
        return {self.exported: gr.update(value=files, visible=True)}

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
                    # no file_types: Gradio drops a file of another kind without a word; kvqa says what it reads
                    upload = localized(gr.File, {"label": "ui.upload"}, type="filepath", file_count="multiple",
                                       elem_id="upload")
                    pasted = localized(gr.Textbox, {"label": "ui.paste"}, lines=5, max_lines=12, elem_id="paste")
                    with gr.Row():
                        read_btn = localized(gr.Button, {"value": "ui.read_pasted"}, elem_id="read")
                        sample_btn = localized(gr.Button, {"value": "ui.sample"}, elem_id="sample")
                    self.status = gr.Markdown(self.i18n("ui.no_document"), elem_id="doc-status")
                    with gr.Row():
                        self.part = localized(gr.Textbox, {"label": "ui.part", "placeholder": "ui.part_placeholder"},
                                              scale=3, elem_id="part")
                        part_btn = localized(gr.Button, {"value": "ui.read_part"}, scale=1, elem_id="read-part")
                    with localized(gr.Accordion, {"label": "ui.limits_label"}, open=False, elem_id="limits-box"):
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
                     self.evidence_page, self.evidence_text, self.ahead_timer, self.also_btn, self.promise_box,
                     *([self.model_box] if self.model_box is not None else [])]
            lang = self.lang
            # each read is announced at once (questions asked before it begins wait for it too), then read in turn
            announce = dict(fn=self.on_read_asked, inputs=None, outputs=None, concurrency_limit=None,
                            api_visibility="private")
            upload.upload(**announce).then(self.on_upload, [upload, self.state, lang], shown + [self.part],
                                           api_visibility="private")
            read_btn.click(**announce).then(self.on_paste, [pasted, self.state, upload, lang], shown + [self.part],
                                            api_visibility="private")
            sample_btn.click(**announce).then(self.on_sample, [self.state, lang], shown + [self.part],
                                              api_visibility="private")
            for trigger in (part_btn.click, self.part.submit):
                trigger(**announce).then(self.on_part, [self.part, self.state, lang], shown + [self.part],
                                         api_visibility="private")
            # a question is taken at once (shown, waiting, while a document or a model loads), then answered in turn:
            # the answers of every tab share the "answer" slots; Stop withdraws the questions still waiting
            answering = dict(concurrency_id="answer", api_visibility="private")
            for trigger in (ask_btn.click, self.question.submit):
                trigger(self.on_question, [self.question, self.state, lang], [self.question, self.chat],
                        concurrency_limit=None, trigger_mode="multiple", api_visibility="private").then(
                    self.on_answer, [self.state, baseline_box, remember_box, lang, ready_box],
                    shown + [self.question], **answering)
            self.also_btn.click(self.on_ask_also, [self.state, baseline_box, remember_box, lang, ready_box],
                                shown + [self.question], **answering)
            remember_box.change(self.on_remember, [remember_box, self.state], None, queue=False,
                                api_visibility="private")
            new_btn.click(self.on_new_conversation, [self.state, lang], [self.chat, self.also_btn], queue=False,
                          api_visibility="private")
            stop_btn.click(self.on_stop, [self.state, lang], None, concurrency_limit=None, trigger_mode="multiple",
                           api_visibility="private")  # queued, to show its toasts, but never waits
            export_btn.click(self.on_export, [self.state, lang], [self.exported], api_visibility="private")
            viewer = [self.evidence_pick, self.evidence_page, self.evidence_text]
            self.evidence_pick.input(self.on_evidence, [self.evidence_pick, self.state, lang], viewer,
                                     api_visibility="private")
            self.chat.select(self.on_chat_select, [self.state, lang], viewer, api_visibility="private")
            everything = list(dict.fromkeys(shown + [self.part, self.promise_box, *self._fixed]))  # the list once
            demo.load(self.on_load, None, everything + [lang], api_visibility="private")
            lang.input(self.on_language, [lang, self.state], everything + [lang], api_visibility="private")
            demo.unload(self.on_unload)
            if len(self.models) > 1:
                model_box.input(**announce).then(self.on_model, [model_box, self.state, lang], shown + [self.part],
                                                 api_visibility="private")  # a person's choice, not the app's

            self.build_api()  # the gradio_client API: each client is its own session
        self.uploads.own(demo)  # a request reads only what its own client uploaded
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
    print(f"kvqa: {info.model} on {info.device} ({info.precision}), {info.kind} engine, loaded in {info.load_s:.1f} s")
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
