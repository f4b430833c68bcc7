"""The engine seam: what every engine does, whatever computes (this process, ZeroGPU, a server elsewhere)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kvqa.documents.reading import Document
from kvqa.model.offline import Stages

from ..config import Decoding
from ..prompt import Prompt
from ..results import AnswerStream, PrefilledDocument, QuestionTurn

if TYPE_CHECKING:
    from kvqa.generation.compose import Run


@dataclass(frozen=True)
class EngineInfo:
    """What an engine is, for the UI, `doctor` and `--json`."""

    kind: str  # "local", "zerogpu"...
    model: str
    device: str  # where the model computes
    dtype: str
    context_tokens: int  # document + question + answer
    load_s: float
    cache_device: str  # where prefilled caches live between questions: what the memory budget measures
    exact_vs_recompute: bool  # a test proves greedy cached answers token-identical to a one-forward recompute
    guarantee: str  # (a kvqa.messages.Message) what is promised about answers in this precision, in a sentence or two
    keeps_caches: bool = False  # a disk store keeps what it reads: parts of a long document can be read ahead
    composes: bool = False  # compose() joins the caches of parts read apart (kvqa.generation.compose)
    weights: str = ""  # the weights' form where this process holds them (kvqa.model.weights: fp32, int8); "": elsewhere
    weight_bytes: int = 0  # what they hold in memory
    kv_cache: str = ""  # what its caches hold keys and values in, where not the dtype: "int8" (kvqa.model.kv_scales)

    @property
    def precision(self) -> str:
        """The dtype, and the weights' form and size and the cache's form where known: 'float32; int8 weights,
        129 MiB; int8 cache'."""
        if not self.weights:
            return self.dtype
        cache = f"; {self.kv_cache} cache" if self.kv_cache else ""
        return f"{self.dtype}; {self.weights} weights, {self.weight_bytes / 2**20:,.0f} MiB{cache}"


class Engine(Protocol):
    """Owns the model and the settings; Session, the app, the CLI and bench use nothing else."""

    kind: str
    options: Decoding  # how it decodes and how many passages a question's turn may quote: built once, from its Config

    @property
    def loaded(self) -> bool:
        """Whether load() has run (info, count_tokens and the rest would load the model first)."""

    def load(self, *, progress: Stages | None = None) -> EngineInfo:
        """Get ready now (load the model, check its chat template) and describe the engine; progress(fraction,
        stage) as each stage of a model's load begins."""

    @property
    def info(self) -> EngineInfo: ...

    def prefill(self, document: Document, *, progress: Callable[[float], None] | None = None,
                admit: Callable[[int], None] | None = None) -> PrefilledDocument:
        """Read the document once. progress(fraction) as it goes; admit(bytes) before the cache is allocated (it
        may raise to refuse)."""

    def answer_turn(self, doc: PrefilledDocument, question: QuestionTurn, *,
               should_stop: Callable[[], bool] | None = None) -> AnswerStream:
        """Answer from the prefilled document, streaming, with self.options; the document's cache is left as it was.
        The Answer carries no sources: kvqa.session.ask, above the engines, gives them."""

    def answer_turn_without_cache(self, document: Document, question: QuestionTurn, *, prompt: Prompt | None = None,
                             should_stop: Callable[[], bool] | None = None) -> AnswerStream:
        """Answer by reading the whole prompt again (the measured baseline), with the same model and settings."""

    def remembered(self, doc: PrefilledDocument, history: Sequence[tuple[str, str]], question: str) -> int:
        """How many of the latest turns of `history` fit before the question (the rest is forgotten)."""

    def count_tokens(self, text: str) -> int:
        """How many tokens the model reads for `text`."""

    def cut(self, read: PrefilledDocument, spans: Sequence[tuple[int, int]]) -> list[Run]:
        """The runs of a read's cache holding characters [start, end) of its text, copied out of it, to compose
        (kvqa.generation.compose.cut). ModelError where info.composes is False."""

    def compose(self, like: PrefilledDocument, runs: Sequence[Run], document: Document) -> PrefilledDocument:
        """One cache holding the runs (cut from reads before), in order, without reading them again, in the template
        of `like` (a read in memory; kvqa.generation.compose); `document` holds their text. ModelError where
        info.composes is False."""
