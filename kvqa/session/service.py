"""The app's sessions and what they read, with no page: the offered models' engines, the cache budget, per-client
limits, the uploads each client may read, and one record per session (kvqa.session.notes: the read time estimated
before its read, its PDF's bytes, whether its parts are being read ahead, whether its model was chosen, and why it
reads it). Which offered model reads a document and answers a question is its ModelChoice's (kvqa.session.choice).

The browser page (app.py, kvqa/ui/) and the gradio_client API both read through one Service; so does a test.
"""

from __future__ import annotations

import logging
import os
import threading
import time
import weakref

from kvqa.cache.budget import CacheBudget, budget_for
from kvqa.cache.shared import SharedCaches
from kvqa.cache.store import store_for
from kvqa.config import Config
from kvqa.documents.ocr import image_pdf
from kvqa.documents.parts import planned_parts, select
from kvqa.documents.reading import (
    IMAGE_SUFFIXES,
    PDF_SUFFIXES,
    Document,
    Part,
    combine,
    document_from_text,
    load_documents,
)
from kvqa.documents.uploads import Uploads
from kvqa.engines import Engine, make_engine
from kvqa.errors import KvqaError
from kvqa.messages import Message, render, say
from kvqa.session.choice import ModelChoice, Progress
from kvqa.session.limits import ClientSessions, client_of
from kvqa.session.notes import Notes
from kvqa.session.session import Session
from kvqa.timing import ReadCosts

log = logging.getLogger("kvqa.app")


class Service:
    """Settings, engines and cache budget, built once, and the reads of every session."""

    def __init__(self, config: Config, engine: Engine, *, budget: CacheBudget | None = None,
                 behind_proxy: bool = False, models: list[str] | None = None):
        self.config = config
        self.engine = engine  # the first model's; others (models) get theirs when first chosen
        self.models = list(dict.fromkeys([config.model, *(models or [])]))
        self._engines = {config.model: engine}
        self.behind_proxy = behind_proxy
        self._budget = budget
        self._budget_lock = threading.Lock()
        self.uploads = Uploads()  # what each client uploaded: the only files its requests may read
        # to bound how many documents one client opens
        self.clients = ClientSessions(config.serving.sessions_per_client)
        self.shared = SharedCaches()  # sessions that load the same document share its cache
        self.read_costs = ReadCosts()  # model -> its latest read's cost here, for the next estimate
        self._notes: weakref.WeakKeyDictionary[Session, Notes] = weakref.WeakKeyDictionary()
        # which offered model reads a document and answers a question, and the take-over (kvqa.session.choice)
        self.choice = ModelChoice(config=config, models=self.models, engine_for=self.engine_for,
                                  load_engine=self.load_engine, new_session=self.new_session,
                                  open_session=self.open_session, read_ahead=self.read_ahead, notes=self.notes,
                                  contexts=self.contexts, model_of=self.model_of, reason=self.reason,
                                  read_costs=self.read_costs)

    def notes(self, session: Session) -> Notes:
        """The session's record (made empty on first use; it goes with the session)."""
        return self._notes.setdefault(session, Notes())

    @property
    def budget(self) -> CacheBudget:
        """The process-wide cache budget, sized once (it asks the engine where caches live, loading the model)."""
        with self._budget_lock:
            if self._budget is None:
                self._budget = budget_for(self.engine, self.config)
            return self._budget

    def new_session(self, session: Session | None, request, *, engine: Engine | None = None) -> Session:
        """The session given, or a new one for the client that sent `request` (its address; None: called directly),
        with `engine` (else the first model's); refused past the per-client number of documents."""
        if session is not None:
            return session
        return self.open_session(client_of(request, behind_proxy=self.behind_proxy), engine or self.engine)

    def open_session(self, client: str, engine: Engine) -> Session:
        """A new session on `engine` for `client`; refused past the per-client number of documents."""
        return self.clients.open(client, lambda: Session(engine, self.budget, client=client, shared=self.shared))

    def engine_for(self, model: str) -> Engine:
        """The engine of one of the offered models, made on first use (its model loads then)."""
        if model not in self.models:
            raise KvqaError("model.not_offered", model=model, models=", ".join(self.models))
        if model not in self._engines:
            config = self.config.replaced(model=model, model_reason=Message("reason.app"))
            self._engines[model] = make_engine(config, store=store_for(config))
        return self._engines[model]

    @staticmethod
    def load_engine(engine, model: str, lang: str, progress: Progress) -> None:
        """Load the engine's model, its stages (converting once, loading, preparing the weights) shown as progress."""
        if engine.loaded:
            return
        progress(0, desc=say("progress.loading_model", lang, model=model))
        engine.load(progress=lambda fraction, stage: progress(fraction, desc=render(stage, lang)))

    def contexts(self) -> dict[str, int]:
        """The context of each offered model loaded here, by name (the others' are known from their files)."""
        return {m: e.info.context_tokens for m, e in self._engines.items() if e.loaded}

    def model_of(self, session: Session) -> str:
        """The name in the list of models of the one the session's engine runs."""
        return next((m for m, e in self._engines.items() if e is session.engine), self.models[0])

    def reason(self, session: Session) -> Message:
        """Why the session's model reads its document: the language, the first model's reason, or the app's list."""
        return self.notes(session).model_reason or (
            self.config.model_reason if session.engine is self.engine else Message("reason.app"))

    def document_from(self, files, text: str | None, lang: str = "en", progress: Progress | None = None, *,
                      owner: str | None = None) -> tuple[Document, list[Message]]:
        """The document a client sent: files it uploaded (nothing else on the server is read: `owner` is the client,
        kvqa.documents.uploads) and/or pasted text, as one document; and what to warn about (a file that could not be
        read, and the others were; the document's notes). If none can be read, the error says why."""
        files = [files] if isinstance(files, (str, os.PathLike)) else list(files or [])
        said = (lambda f, message: progress(f, desc=render(message, lang))) if progress else None
        paths = [self.uploads.file(f, owner) for f in files]
        documents, problems = load_documents(paths, config=self.config, progress=said)
        if text and text.strip():
            if len(text) > self.config.limits.max_file_bytes:
                raise KvqaError("paste.too_long", chars=len(text), limit=self.config.limits.max_file_bytes)
            documents.append(document_from_text(text))
        document = combine(documents, problems=problems)  # raises when nothing could be read
        return document, [Message("file.skipped", problem=problem) for problem in problems] + list(document.notes)

    def pdf_of(self, files, text: str | None, *, owner: str | None = None) -> bytes | None:
        """The bytes of the one uploaded PDF that is the whole document (no other file, nothing pasted), or of an
        uploaded image as a one-page PDF, else None."""
        files = [files] if isinstance(files, (str, os.PathLike)) else list(files or [])
        suffix = os.path.splitext(str(files[0]))[1].lower() if len(files) == 1 else ""
        if (text and text.strip()) or suffix not in PDF_SUFFIXES + IMAGE_SUFFIXES:
            return None
        try:
            data = self.uploads.file(files[0], owner).read_bytes()
            return data if suffix in PDF_SUFFIXES else image_pdf(data)
        except (KvqaError, OSError, ValueError):
            return None

    def read(self, document: Document, session: Session | None, request, progress: Progress, *,
             part: Part | None = None, lang: str = "en", choose: bool = True) -> tuple[Session, bool]:
        """Read the document (or its part) into the session, saying first how big it is and, once this model has
        read something here, about how long the read will take; the read's rate then feeds the next estimate. When
        the document's language calls for another model (kvqa.model.presets.reading_model) and none was chosen in the
        list (`choose`), a new session on that model reads it; the old one is closed only once the read succeeded.
        Where that model's read would keep the reader waiting on a CPU, a faster one reads first and answers while
        it reads behind (kvqa.session.takeover)."""
        if session is None:  # the first model loads with the first document: its stages shown (a conversion once)
            self.load_engine(self.engine, self.config.model, lang, progress)
        session = self.new_session(session, request)
        reader, take = (self.choice.reader_session(session, document, request, lang, progress) if choose
                        else (session, None))
        if reader is not session:
            try:
                loaded = self.read(document, reader, request, progress, part=part, lang=lang, choose=False)
            except BaseException:
                reader.close()
                raise
            session.close()
            self.choice.behind(loaded[0], take if loaded[1] else None)
            return loaded
        progress(0, desc=say("progress.reading", lang))
        before, estimate = self.before_reading(session.engine, document if part is None else
                                               select(document, part.first, part.last), lang)
        started, ticks = time.perf_counter(), []

        def tick(fraction: float) -> None:  # the read's progress over time: how its cost grows with its length
            ticks.append((fraction, time.perf_counter() - started))
            progress(fraction, desc=before)

        changed = session.load(document, part=part, progress=tick)
        doc, notes = session.prefilled, self.notes(session)
        if changed:
            self.read_ahead(session)
            notes.estimate = None
            if doc is not None and session.origin == "prefill":
                notes.estimate = estimate
                self.read_costs.learn(session.engine.info.model, doc.tokens, ticks)
            if choose:
                self.choice.behind(session, take)
        return session, changed

    def before_reading(self, engine: Engine, document: Document, lang: str = "en") -> tuple[str, float | None]:
        """The progress line while a document is read, with the estimate in it: its size (pages, characters,
        tokens) and, once this model has read a document here, the read time its cost predicts (else None)."""
        tokens = engine.count_tokens(document.text)
        room = engine.info.context_tokens - self.config.limits.reserve_tokens
        pages = say("status.pages", lang, pages=document.pages) if document.pages else ""
        parts = (say("progress.parts", lang, parts=planned_parts(document, engine.count_tokens, room))
                 if tokens > room else "")  # read in parts, the first one now
        estimate = self.read_costs.estimate(engine.info.model, min(tokens, room))
        if estimate is None:
            return say("progress.size", lang, pages=pages, chars=len(document.text), tokens=tokens) + parts, None
        return say("progress.estimate", lang, pages=pages, chars=len(document.text), tokens=tokens,
                   seconds=estimate) + parts, estimate

    def read_ahead(self, session: Session) -> bool:
        """Read a long document's other parts in the background (Session.read_ahead), while the user asks; False
        when there is nothing to read ahead (one part, a pinned part, or an engine without a disk store)."""
        if not session.can_read_ahead:
            return False
        notes = self.notes(session)
        notes.reading_ahead = True

        def run() -> None:
            try:
                session.read_ahead()
            except KvqaError as e:  # out of memory, the store...: the parts are read when a question needs them
                log.warning("kvqa: reading ahead stopped: %s", e)
            finally:
                notes.reading_ahead = False

        threading.Thread(target=run, name="kvqa-read-ahead", daemon=True).start()
        return True

    def reading_ahead(self, session: Session | None) -> bool:
        """Whether the session's parts are being read ahead now."""
        return session is not None and self.notes(session).reading_ahead

    def busy_behind(self, session: Session | None) -> bool:
        """Whether something is read in the background for the session (its parts, or a better model's read behind
        it not yet taken over): the page's status refreshes meanwhile."""
        take = self.choice.behind_of(session)
        return self.reading_ahead(session) or (take is not None and (not take.done.is_set() or take.ready))
