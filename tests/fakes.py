"""A fake engine at the seam (kvqa.engines.base.Engine), for tests of the app, sessions and limits that do not test
the model: it "reads" a document by counting its words and answers by echoing the question's first words (or with
the reply it was given for that question)."""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence

from kvqa.config import Decoding
from kvqa.documents.reading import Document
from kvqa.engines.base import EngineInfo
from kvqa.errors import DocumentTooLong
from kvqa.messages import Message
from kvqa.results import Answer, AnswerStream, PrefilledDocument, QuestionTurn, ServerPrefix
from kvqa.timing import Timings

BYTES_PER_TOKEN = 1024


class FakeEngine:
    """context_tokens: the most prefix tokens (words + OVERHEAD) it reads; a longer document is refused as the real
    engines refuse it (DocumentTooLong with tokens and limit), so documents can be cut into parts."""

    kind = "fake"
    OVERHEAD = 10  # the prompt around the document, in tokens
    options = Decoding()  # the default settings: a question is handed its best passage to quote

    def __init__(self, context_tokens: int = 8192, *, keeps_caches: bool = False, chunks: int = 1,
                 on_chunk: Callable[[Document, int], None] | None = None, model: str = "fake",
                 replies: dict[str, str] | None = None):
        self.model = model  # the name info gives (a preset's, to see what the app says of that model)
        self.asked: list[QuestionTurn] = []  # every question as it reached the engine, in order
        self.prefills = 0
        self.context_tokens = context_tokens
        self.read: list[Document] = []  # every document (or part) read, in order, whole or not
        self.keeps_caches = keeps_caches  # a "store": a text read once comes back restored (origin "disk")
        self.stored: set[str] = set()
        self.chunks = chunks  # progress calls per read
        self.on_chunk = on_chunk  # called before each of them: tests hold a read there, or act mid-read
        self.replies = replies or {}  # question -> the answer's text, instead of the question's first words

    loaded = True

    def load(self, *, progress=None) -> EngineInfo:
        return self.info

    @property
    def info(self) -> EngineInfo:
        return EngineInfo(kind=self.kind, model=self.model, device="cpu", dtype="float32",
                          context_tokens=self.context_tokens, load_s=0.0, cache_device="cpu", exact_vs_recompute=False,
                          guarantee=Message("promise.float32"), keeps_caches=self.keeps_caches)

    def count_tokens(self, text: str) -> int:
        return len(text.split())

    def prefill(self, document: Document, *, progress: Callable[[float], None] | None = None,
                admit: Callable[[int], None] | None = None) -> PrefilledDocument:
        tokens = self.count_tokens(document.text)
        if tokens + self.OVERHEAD > self.context_tokens:
            over = tokens + self.OVERHEAD - self.context_tokens
            raise DocumentTooLong("too_long.tokens", tokens=tokens + self.OVERHEAD, limit=self.context_tokens,
                                  context=self.context_tokens, reserve=0, over=over)
        restored = self.keeps_caches and document.text in self.stored
        if not restored:
            self.read.append(document)
        if admit is not None:
            admit(BYTES_PER_TOKEN * tokens)
        if not restored:
            for chunk in range(self.chunks):
                if self.on_chunk is not None:
                    self.on_chunk(document, chunk)
                if progress is not None:
                    progress((chunk + 1) / self.chunks)
            self.prefills += 1
            if self.keeps_caches:
                self.stored.add(document.text)
        return PrefilledDocument(document=document, prompt=None, ids=(), cache=ServerPrefix("", tokens),
                                 cache_bytes=BYTES_PER_TOKEN * tokens, prefill_s=0.01, model_name="fake",
                                 max_question_tokens=512, max_new_tokens=64,
                                 origin="disk" if restored else "prefill")

    def _answer(self, question: QuestionTurn, used_cache: bool) -> Iterator[str | Answer]:
        self.asked.append(question)
        words = self.replies[question.text].split() if question.text in self.replies else question.text.split()[:3]
        for word in words:
            yield word + " "
        timings = Timings(question_tokens=len(question.text.split()), new_tokens=len(words), ttft_s=0.001,
                          answer_s=0.002)
        yield Answer(question=question.text, text=" ".join(words) + " ", token_ids=tuple(range(len(words))),
                     timings=timings, stop_reason="eos", used_cache=used_cache)

    def answer_turn(self, doc: PrefilledDocument, question: QuestionTurn, *,
               should_stop: Callable[[], bool] | None = None) -> AnswerStream:
        return AnswerStream(self._answer(question, True))

    def answer_turn_without_cache(self, document: Document, question: QuestionTurn, *, prompt=None,
                             should_stop: Callable[[], bool] | None = None) -> AnswerStream:
        return AnswerStream(self._answer(question, False))

    def remembered(self, doc: PrefilledDocument, history: Sequence[tuple[str, str]], question: str) -> int:
        return len(history)
