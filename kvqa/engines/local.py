"""The local engine: runs kvqa.generation.generate (prefill, decode, drafting) in this process, with transformers, the
caches
where the model is."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from kvqa.documents.reading import Document
from kvqa.generation.compose import Run, composable, compose, cut, template
from kvqa.generation.generate import answer_from_scratch, answer_on_cache, guarantee, prefill
from kvqa.model.loading import LoadedModel, load_model
from kvqa.model.offline import Stages

from ..config import Config
from ..prompt import Prompt, prompt_for
from ..results import AnswerStream, PrefilledDocument, QuestionTurn
from .base import EngineInfo


class LocalEngine:
    """kvqa's exact engine: the model in this process, caches where the model is (GPU or CPU memory)."""

    kind = "local"

    def __init__(self, config: Config, lm: LoadedModel | None = None, *, same_schedule: bool = False):
        self.config = config
        self.options = config.decoding  # the settings every answer takes, built once
        self.same_schedule = same_schedule  # recompute a baseline in the cached path's chunks (the exactness checks)
        self._lm = lm

    @property
    def lm(self) -> LoadedModel:
        """The model, loaded on first use (load() also checks its chat template)."""
        if self._lm is None:
            self._lm = load_model(self.config)
        return self._lm

    @property
    def loaded(self) -> bool:
        return self._lm is not None

    def load(self, *, progress: Stages | None = None) -> EngineInfo:
        """Load the model now (before serving), its stages said through progress(fraction, stage), and describe the
        engine."""
        if self._lm is None:
            self._lm = load_model(self.config, progress=progress)
        prompt_for(self.lm.tokenizer).check()
        return self.info

    @property
    def info(self) -> EngineInfo:
        lm = self.lm
        dtype = str(lm.dtype).removeprefix("torch.")
        held = "int8" if lm.kv_scales is not None else ""  # the cache's form where not the dtype
        return EngineInfo(kind=self.kind, model=lm.name, device=lm.device.type, dtype=dtype,
                          context_tokens=lm.context_length, load_s=lm.load_s,
                          cache_device=lm.device.type,
                          exact_vs_recompute=dtype == "float32" and lm.weights == "fp32" and lm.decode_step is None,
                          guarantee=guarantee(dtype, compiled=lm.decode_step is not None, weights=lm.weights,
                                              kv_cache=held or "model"),
                          weights=lm.weights, weight_bytes=lm.weight_bytes, composes=composable(lm),
                          kv_cache=held)

    def prefill(self, document: Document, *, progress=None, admit=None) -> PrefilledDocument:
        return prefill(self.lm, document, config=self.config, progress=progress, admit=admit)

    def answer_turn(self, doc: PrefilledDocument, question: QuestionTurn, *,
               should_stop: Callable[[], bool] | None = None) -> AnswerStream:
        return answer_on_cache(self.lm, doc, question, self.options, should_stop=should_stop)

    def answer_turn_without_cache(self, document: Document, question: QuestionTurn, *, prompt: Prompt | None = None,
                             should_stop: Callable[[], bool] | None = None) -> AnswerStream:
        return answer_from_scratch(self.lm, document, question, self.options, config=self.config, prompt=prompt,
                                    should_stop=should_stop, same_schedule=self.same_schedule)

    def remembered(self, doc: PrefilledDocument, history: Sequence[tuple[str, str]], question: str) -> int:
        """How many of the latest turns of `history` fit before the question in the room the cache keeps."""
        return doc.prompt.remembered(history, question, limit=doc.max_question_tokens)

    def count_tokens(self, text: str) -> int:
        return len(self.lm.tokenizer(text, add_special_tokens=False)["input_ids"]) if text else 0

    def cut(self, read: PrefilledDocument, spans: Sequence[tuple[int, int]]) -> list[Run]:
        return cut(self.lm, read, spans)

    def compose(self, like: PrefilledDocument, runs: Sequence[Run], document: Document) -> PrefilledDocument:
        head, tail = template(like)
        return compose(self.lm, head, runs, tail, document, prompt=like.prompt, config=self.config)
