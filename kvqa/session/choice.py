"""The model's choice, with no page: which of the offered models reads a document, and which answers a question.

A document is read by the offered model that reads its language (kvqa.model.presets.reading_model), unless a model was
chosen in the list or named when kvqa started. Where that model's read would keep the reader waiting on a CPU, a
faster one reads first and answers while it reads behind, then takes over (kvqa.session.takeover). A question in a
language the session's model does not read is answered by an offered model that reads it, the document read there
first. Each choice opens a new session; the old one is closed only once the new one's read succeeded.

The Service makes one ModelChoice and gives it what it uses: the settings, the offered models, the ways to their
engines and to new sessions, each session's Notes and the reads' costs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

from kvqa.config import Config
from kvqa.documents.reading import Document
from kvqa.engines import Engine
from kvqa.errors import QuestionError
from kvqa.languages import language_of
from kvqa.messages import Message, render, say
from kvqa.model.offline import OfflineModel, offline_model
from kvqa.model.presets import estimated_tokens, on_cuda, reading_model, unread_question
from kvqa.session.notes import Notes
from kvqa.session.session import Session
from kvqa.session.takeover import TakeOver, read_behind, stand_in_for
from kvqa.timing import ReadCosts

Progress = Callable[..., None]  # progress(fraction, desc=text): how a long step goes, said to the user


@dataclass(eq=False, kw_only=True)
class ModelChoice:
    """Which offered model reads a document and answers a question, and the take-over of a stand-in's session;
    given what it uses."""

    config: Config
    models: list[str]  # the offered models, the first model's first
    engine_for: Callable[[str], Engine]  # an offered model's engine, made on first use
    load_engine: Callable[[Engine, str, str, Progress], None]  # (engine, model, lang, progress): its model loaded
    new_session: Callable[..., Session]  # new_session(None, request, engine=e): a new session for request's client
    open_session: Callable[[str, Engine], Session]  # (client, engine): a new session for that client
    read_ahead: Callable[[Session], bool]  # a long document's other parts read in the background
    notes: Callable[[Session], Notes]  # the session's record
    contexts: Callable[[], dict[str, int]]  # the context of each offered model loaded here, by name
    model_of: Callable[[Session], str]  # the offered model a session's engine runs
    reason: Callable[[Session], Message]  # why a session's model reads its document
    read_costs: ReadCosts  # model -> its latest read's cost here, for the next estimate
    # one switch to a better model's session per stand-in
    _take_over_lock: threading.Lock = field(default_factory=threading.Lock, init=False, repr=False)

    def reader_session(self, session: Session, document: Document, request, lang: str,
                       progress: Progress) -> tuple[Session, TakeOver | None]:
        """The session to read `document` in: this one, or a new one on the offered model that reads the document's
        language (loaded first), unless the model was chosen in the list or named when kvqa started; and, where
        that model's read would keep the reader waiting on this CPU, the TakeOver of that model reading behind a
        faster one, whose session this then is."""
        if self.notes(session).picked:
            return session, None
        reader = reading_model(self.config, document.text, page_lang=lang, contexts=self.contexts())
        model = reader[0] if reader and reader[0] in self.models else self.config.model
        why = reader[1] if reader and model == reader[0] else None
        take = self.stand_in(model, why, document, lang)
        first = take.stand_in if take else model
        engine = self.engine_for(first)
        if engine is session.engine:
            return session, take
        self.load_engine(engine, first, lang, progress)
        fresh = self.new_session(None, request, engine=engine)
        if why and not take:
            self.notes(fresh).model_reason = why
        return fresh, take

    def read_seconds(self, model: OfflineModel, tokens: int) -> float:
        """About how long `model` takes here to read `tokens`: from its latest read here, else from its measured rate
        on a 2-core CPU (OfflineModel.cpu_rate)."""
        return self.read_costs.estimate(model.name, tokens) or tokens / model.cpu_rate

    def stand_in(self, model: str, why: Message | None, document: Document, lang: str) -> TakeOver | None:
        """The read of `model` behind a faster offered model (kvqa.session.takeover.stand_in_for) for a reader whose
        page is in `lang`, or None."""
        stand_in = stand_in_for(model, document.text, cache_dir=self.config.cache_dir, offered=self.models,
                                seconds=self.read_seconds, cuda=on_cuda(self.config.device), page_lang=lang)
        if stand_in is None:
            return None
        estimate = self.read_seconds(offline_model(model), estimated_tokens(document.text))
        return TakeOver(model, why or self.config.model_reason, stand_in, estimate=estimate)

    def behind(self, session: Session, take: TakeOver | None) -> None:
        """Start the read of `take`'s better model behind the session (its stand-in), or record that none runs."""
        notes = self.notes(session)
        notes.take_over, session.behind = take, take.model if take else None
        if take is None:
            return
        notes.model_reason = Message("reason.stand_in", model=take.model, seconds=take.estimate or 0)

        def make_session() -> Session:
            engine = self.engine_for(take.model)
            engine.load()
            return self.open_session(session.client, engine)

        threading.Thread(target=read_behind, args=(take, session, make_session), name="kvqa-read-behind",
                         daemon=True).start()

    def take_over(self, session: Session | None) -> Session | None:
        """The session to go on in: the better model's, once its read behind this one is done (the turns carried
        over, this one closed), else this one. The same answer to every caller."""
        take = self.notes(session).take_over if session is not None else None
        if take is None or not take.ready or session.answering:
            return session
        with self._take_over_lock:
            fresh = take.session
            if not session.closed:
                fresh.carry_turns(session)
                notes = self.notes(fresh)
                notes.model_reason, notes.took_over = take.reason, take.stand_in
                session.close()
        return fresh

    def behind_of(self, session: Session | None) -> TakeOver | None:
        """The better model's read behind the session, while it runs or failed (not once taken over)."""
        take = self.notes(session).take_over if session is not None else None
        return take if take is not None and not (take.ready and session.closed) else None

    def question_reader(self, session: Session | None, question: str) -> tuple[str, Message] | None:
        """The offered model (and why) to answer `question` with when the session's model does not read its language
        (a Chinese question on a document the English-only default read: kvqa.model.presets.reading_model), else
        None (also when the session has no document). Raises QuestionError saying what to do when the model was
        chosen (the list, --model, KVQA_MODEL) or none offered reads it."""
        if session is None or session.whole is None:
            return None
        model = self.model_of(session)
        current = offline_model(model)
        if current is not None and language_of(question) in current.languages:
            return None  # it reads the question: a better model is chosen when a document is read, not mid-chat
        reason = Message("reason.app") if self.notes(session).picked else self.reason(session)
        reader = reading_model(self.config.replaced(model=model, model_reason=reason), session.whole.text,
                               questions=[question], contexts=self.contexts())
        if reader is not None and reader[0] in self.models:
            return reader
        refusal = unread_question(session.engine.info.model, question, cache_dir=self.config.cache_dir)
        if refusal is not None:
            raise QuestionError(refusal)
        return None

    def read_for_question(self, session: Session, reader: tuple[str, Message], request, lang: str,
                          progress: Progress) -> Session:
        """A new session on the model `reader` names (loaded first), reading the session's document (the store and
        the shared caches as for any read), its conversation carried over; the old session is closed once the read
        succeeded, and left as it was when it failed."""
        model, why = reader
        engine = self.engine_for(model)
        self.load_engine(engine, model, lang, progress)
        fresh = self.new_session(None, request, engine=engine)
        try:
            said = say("progress.switching", lang, model=model, reason=render(why, lang))
            fresh.load(session.whole, progress=lambda f: progress(f, desc=said))
        except BaseException:
            fresh.close()
            raise
        fresh.carry_turns(session)
        self.notes(fresh).model_reason = why
        self.read_ahead(fresh)
        session.close()
        return fresh

    def switch_model(self, model: str, session: Session | None, request, lang: str, progress: Progress) -> Session:
        """A new session on the offered `model` (loaded first), chosen in the list: the documents it reads keep it;
        the old session's document is read again there. The old session is left to the caller to close."""
        engine = self.engine_for(model)
        self.load_engine(engine, model, lang, progress)
        fresh = self.new_session(None, request, engine=engine)
        self.notes(fresh).picked = True
        if session is not None and session.whole is not None:
            again = say("progress.reading_again", lang)
            try:
                fresh.load(session.whole, progress=lambda f: progress(f, desc=again))
            except BaseException:
                fresh.close()
                raise
        return fresh
