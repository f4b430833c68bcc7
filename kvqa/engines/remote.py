"""The remote engine: a serving engine elsewhere (vLLM, SGLang, llama.cpp's llama-server...) behind the
OpenAI-compatible chat completions API, keeping document prefixes in its own prefix cache.

prefill() sends the document's system message once with a one-token completion, so the server computes and caches
the document's prefix; it reports how long that took and the prompt tokens the server counted. answer_turn() sends the
byte-identical system message plus the question as a user turn, streamed: the server finds the document's prefix in
its cache and computes only the rest. The server applies its own chat template, so messages are sent, not ids.

Nothing is cached in this process (cache_bytes is 0): the server keeps, evicts and shares prefixes as it sees fit,
so this engine promises neither a bit-identical cache nor answers token-identical to a recompute. What the server
says it took from its cache is reported per answer (Timings.cached_tokens): `usage.prompt_tokens_details
.cached_tokens` (vLLM with --enable-prompt-tokens-details, SGLang with --enable-cache-report, llama.cpp), else
llama.cpp's `timings.cache_n`; a server that says nothing gives None, never 0.

Every failure is an EngineError (or DocumentTooLong for a document over the server's context) whose message says
what to do; no request is retried, so a streamed answer is never sent twice. Closing an answer's stream (Stop, a
client gone) closes its HTTP response, and the server aborts the request.
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from urllib.parse import urlsplit

import httpx

from kvqa.documents.reading import Document
from kvqa.model.offline import Stages

from ..config import Config
from ..errors import (
    DocumentTooLong,
    EngineBusy,
    EngineDisconnected,
    EngineError,
    EngineRefused,
    EngineTimeout,
    EngineUnreachable,
    ModelError,
    QuestionError,
)
from ..messages import Message
from ..prompt import MAX_QUESTION_CHARS, ChatPrompt, question_turn, system_text
from ..results import Answer, AnswerStream, PrefilledDocument, QuestionTurn, ServerPrefix
from ..timing import Timings
from .base import EngineInfo

CONNECT_TIMEOUT_S = 10.0  # a server that does not accept the connection this fast is not there


def guarantee(model: str, where: str) -> Message:
    return Message("promise.remote", model=model, where=where)


class RemoteEngine:
    """An OpenAI-compatible server answers; this process sends messages and measures."""

    kind = "remote"

    def __init__(self, config: Config, *, transport: httpx.BaseTransport | None = None):
        self.config = config
        self.options = config.decoding
        self.url = config.remote.engine_url.rstrip("/")
        self.where = urlsplit(self.url).netloc or self.url
        headers = {"Authorization": f"Bearer {config.remote.engine_api_key}"} if config.remote.engine_api_key else {}
        self._http = httpx.Client(base_url=self.url, headers=headers, transport=transport,
                                  timeout=httpx.Timeout(config.remote.engine_timeout_s, connect=CONNECT_TIMEOUT_S))
        self._info: EngineInfo | None = None

    # ---- the engine seam

    @property
    def loaded(self) -> bool:
        return self._info is not None

    def load(self, *, progress: Stages | None = None) -> EngineInfo:  # noqa: ARG002 (the server loads its own model)
        """Ask the server which models it serves (GET /models): fails at once, in one line, when the URL, the key
        or the model name is wrong."""
        if self._info is not None:
            return self._info
        started = time.perf_counter()
        with self._errors("doing.listing_models"):
            response = self._http.get("/models")
            self._check(response, doing="doing.listing_models")
        try:
            listed = response.json()["data"]
            names = [m["id"] for m in listed]
        except (ValueError, KeyError, TypeError):
            raise EngineRefused("engine.not_openai_models", url=self.url) from None
        model = self.config.remote.engine_model or (names[0] if names else "")
        if not model or model not in names:
            served = ", ".join(names) or "none"
            raise EngineRefused("engine.model_not_served", where=self.where, model=model, served=served)
        entry = listed[names.index(model)]
        self._info = EngineInfo(
            kind=self.kind, model=model, device=f"server {self.where}", dtype="as served",
            context_tokens=_context_of(entry), load_s=time.perf_counter() - started,
            cache_device="cpu",  # caches live on the server; here a document costs its text only (cache_bytes 0)
            exact_vs_recompute=False, guarantee=guarantee(model, self.where))
        return self._info

    @property
    def info(self) -> EngineInfo:
        return self.load()

    def prefill(self, document: Document, *, progress: Callable[[float], None] | None = None,
                admit: Callable[[int], None] | None = None) -> PrefilledDocument:
        """Send the document's system message once, for one token: the server reads and caches its prefix."""
        model = self.info.model
        if admit is not None:
            admit(0)  # nothing is held in this process; the call keeps the per-client limits working
        if progress is not None:
            progress(0.0)
        system = system_text(document.text)
        body = {"model": model, "messages": [{"role": "system", "content": system}], "max_tokens": 1,
                "temperature": 0.0, "stream": False}
        started = time.perf_counter()
        with self._errors("doing.reading"):
            response = self._http.post("/chat/completions", json=body)
            self._check(response, doing="doing.reading")
        prefill_s = time.perf_counter() - started
        completion = _json(response)
        usage = completion.get("usage") or {}
        prefix = ServerPrefix(system=system, prompt_tokens=int(usage.get("prompt_tokens") or 0),
                              cached_tokens=_cached_tokens(usage, completion.get("timings")))
        if progress is not None:
            progress(1.0)
        return PrefilledDocument(
            document=document, prompt=None, ids=(), cache=prefix, cache_bytes=0, prefill_s=prefill_s,
            model_name=model, max_question_tokens=self.config.limits.max_question_tokens,
            max_new_tokens=self.config.limits.max_new_tokens)

    def answer_turn(self, doc: PrefilledDocument, question: QuestionTurn, *,
               should_stop: Callable[[], bool] | None = None) -> AnswerStream:
        """The same system message plus the question, streamed; the server takes the document from its cache."""
        assert isinstance(doc.cache, ServerPrefix), "this document was prefilled by another engine"
        limit = doc.max_new_tokens if question.max_new_tokens is None else question.max_new_tokens
        if not 1 <= limit <= doc.max_new_tokens:
            raise QuestionError("question.max_new_tokens_server", most=doc.max_new_tokens, asked=limit)
        return AnswerStream(self._answer(doc.cache.system, question, self._turn(question), max_new_tokens=limit,
                                         should_stop=should_stop, used_cache=True))

    def answer_turn_without_cache(self, document: Document, question: QuestionTurn, *, prompt: ChatPrompt | None = None,
                             should_stop: Callable[[], bool] | None = None) -> AnswerStream:
        """The same request, asking the server not to use its prefix cache (llama.cpp: cache_prompt false; vLLM: a
        fresh cache_salt). A server that ignores both says so in the answer's cached_tokens."""
        return AnswerStream(self._answer(system_text(document.text), question, self._turn(question),
                                         max_new_tokens=question.max_new_tokens or self.config.limits.max_new_tokens,
                                         should_stop=should_stop, used_cache=False))

    def count_tokens(self, text: str) -> int:
        """The server's count (POST /tokenize, llama.cpp and vLLM); EngineError where it has none."""
        if not text:
            return 0
        root = self.url.removesuffix("/v1")
        with self._errors("doing.counting_tokens"):
            response = self._http.post(f"{root}/tokenize", json={"content": text, "prompt": text,
                                                                  "model": self.info.model})
            self._check(response, doing="doing.counting_tokens")
        return len(_json(response).get("tokens") or [])

    def remembered(self, doc: PrefilledDocument, history: Sequence[tuple[str, str]], question: str) -> int:
        """The latest turns whose text fits in the question's room, at about 4 characters a token (the server's
        count would cost a request per turn)."""
        room, keep = 4 * doc.max_question_tokens - len(question), 0
        for q, a in reversed(history):
            room -= len(q) + len(a)
            if room < 0:
                break
            keep += 1
        return keep

    def cut(self, read, spans):
        """Not here: the server keeps its own caches (info.composes is False)."""
        raise ModelError("model.not_composable", model=self.info.model)

    def compose(self, like, runs, document):
        """Not here (cut)."""
        raise ModelError("model.not_composable", model=self.info.model)

    def close(self) -> None:
        self._http.close()

    # ---- one answer

    def _turn(self, question: QuestionTurn) -> str:
        """The user turn: the question with its best passages quoted (Config.decoding: quote_passages, quote_chars)."""
        options = self.options
        return question_turn(_checked(question.text),
                             question.quotes(options.quote_passages, chars=options.quote_chars))

    def _answer(self, system: str, question: QuestionTurn, turn: str, *, max_new_tokens: int,
                should_stop: Callable[[], bool] | None, used_cache: bool) -> Iterator[str | Answer]:
        """Stream one answer to the question's user turn `turn`; yields text, then the Answer. Leaving early closes
        the response: the server aborts."""
        body = {"model": self.info.model, "stream": True, "stream_options": {"include_usage": True},
                "messages": [{"role": "system", "content": system},
                             *({"role": role, "content": text} for earlier in question.history
                               for role, text in zip(("user", "assistant"), earlier)),
                             {"role": "user", "content": turn}],
                "max_tokens": max_new_tokens, "temperature": self.config.decoding.temperature}
        if self.config.decoding.seed is not None:
            body["seed"] = self.config.decoding.seed
        if not used_cache:
            body.update(cache_prompt=False, cache_salt=uuid.uuid4().hex)
        text: list[str] = []
        ttft = None
        usage: dict = {}
        timings = None
        finish = None
        chunks = 0
        started = time.perf_counter()
        with self._errors("doing.answering"), self._http.stream("POST", "/chat/completions", json=body) as response:
            self._check(response, doing="doing.answering")
            for event in _events(response):
                if should_stop is not None and should_stop():
                    finish = "stopped"
                    break
                if event is None:  # [DONE]
                    break
                usage = event.get("usage") or usage
                timings = event.get("timings") or timings
                for choice in event.get("choices") or []:
                    piece = (choice.get("delta") or {}).get("content") or ""
                    finish = choice.get("finish_reason") or finish
                    if piece:
                        chunks += 1
                        if ttft is None:
                            ttft = time.perf_counter() - started
                        text.append(piece)
                        yield piece
            else:
                if finish is None:  # the body ended without [DONE] and without a finish reason
                    raise EngineDisconnected("engine.dropped_mid_answer", where=self.where)
        answer_s = time.perf_counter() - started
        prompt_tokens = usage.get("prompt_tokens")
        cached = _cached_tokens(usage, timings)
        computed = prompt_tokens - cached if prompt_tokens is not None and cached is not None else prompt_tokens
        new_tokens = usage.get("completion_tokens") or (timings or {}).get("predicted_n") or chunks
        stop_reason = {"stop": "eos", "length": "length", "stopped": "stopped"}.get(finish, "eos")
        yield Answer(question=question.text, text="".join(text), token_ids=(), stop_reason=stop_reason,
                     used_cache=used_cache,
                     timings=Timings(question_tokens=computed or 0, new_tokens=int(new_tokens),
                                     ttft_s=ttft if ttft is not None else answer_s, answer_s=answer_s,
                                     prompt_tokens=prompt_tokens, cached_tokens=cached))

    # ---- failures, each with what to do

    @contextmanager
    def _errors(self, doing: str) -> Iterator[None]:
        """Transport failures as EngineErrors that say what to do. doing: the message id of what was being done."""
        try:
            yield
        except httpx.ConnectError:
            raise EngineUnreachable("engine.unreachable", url=self.url, doing=Message(doing)) from None
        except httpx.TimeoutException:
            raise EngineTimeout("engine.timeout", where=self.where, seconds=self.config.remote.engine_timeout_s,
                                doing=Message(doing)) from None
        except (httpx.RemoteProtocolError, httpx.ReadError, httpx.WriteError):
            if doing == "doing.answering":
                raise EngineDisconnected("engine.dropped_mid_answer", where=self.where) from None
            raise EngineDisconnected("engine.dropped", where=self.where, doing=Message(doing)) from None

    def _check(self, response: httpx.Response, *, doing: str) -> None:
        """Raise the EngineError (or DocumentTooLong) for an HTTP error status. doing: as for _errors."""
        status = response.status_code
        if status < 400:
            return
        response.read()
        message = _error_message(response)
        if status in (401, 403):
            raise EngineRefused("engine.bad_key", where=self.where, status=status, detail=message)
        if status == 404:
            if "model" in message.lower():
                raise EngineRefused("engine.no_model", where=self.where, model=self.config.remote.engine_model,
                                    detail=message, url=self.url)
            raise EngineRefused("engine.no_api", url=self.url, doing=Message(doing))
        if status in (429, 503):
            raise EngineBusy("engine.overloaded", where=self.where, status=status, detail=message)
        if status == 400 and "context" in message.lower():
            raise DocumentTooLong("engine.context_question" if doing == "doing.answering" else
                                  "engine.context_document", detail=message)
        raise EngineError("engine.status", where=self.where, status=status, doing=Message(doing), detail=message)


# ---- the wire format

def _checked(question: str) -> str:
    """The question, or QuestionError when it is empty or too long (the server counts its tokens)."""
    if not question or not question.strip():
        raise QuestionError("question.empty")
    if len(question) > MAX_QUESTION_CHARS:
        raise QuestionError("question.too_many_chars", chars=len(question), limit=MAX_QUESTION_CHARS)
    return question


def _events(response: httpx.Response) -> Iterator[dict | None]:
    """Server-sent events of a streamed completion as dicts; None for the closing [DONE]."""
    for line in response.iter_lines():
        if not line.startswith("data:"):
            continue  # blank separators, comments, event names
        data = line[len("data:"):].strip()
        if data == "[DONE]":
            yield None
            return
        try:
            event = json.loads(data)
        except ValueError:
            continue
        if isinstance(event, dict) and event.get("error"):
            raise EngineError("engine.failed_mid_answer", detail=_describe(event["error"]))
        yield event


def _cached_tokens(usage: dict, timings: dict | None) -> int | None:
    """Prompt tokens the server took from its prefix cache, as it reports them; None when it does not say."""
    details = usage.get("prompt_tokens_details") or {}
    if details.get("cached_tokens") is not None:
        return int(details["cached_tokens"])
    if timings and timings.get("cache_n") is not None:  # llama.cpp
        return int(timings["cache_n"])
    return None


def _context_of(entry: dict) -> int:
    """The model's context length where /models says it (vLLM: max_model_len; llama.cpp: meta.n_ctx_train)."""
    meta = entry.get("meta") or {}
    return int(entry.get("max_model_len") or meta.get("n_ctx") or meta.get("n_ctx_train") or 0)


def _json(response: httpx.Response) -> dict:
    try:
        body = response.json()
    except ValueError:
        raise EngineError("engine.not_json") from None
    return body if isinstance(body, dict) else {}


def _error_message(response: httpx.Response) -> str:
    try:
        return _describe(response.json().get("error") or response.json())
    except (ValueError, AttributeError):
        return response.text.strip()[:200] or response.reason_phrase


def _describe(error) -> str:
    if isinstance(error, dict):
        return str(error.get("message") or error.get("detail") or error)[:300]
    return str(error)[:300]
