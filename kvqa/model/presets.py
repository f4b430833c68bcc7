"""Models kvqa has tested, one click away: their architectures (kvqa/model/configs) run through the engine, their chat
templates split, cached answers equal to transformers' own generate (tests/test_presets.py).

What a preset costs is computed from its architecture: weights (parameters x bytes per parameter) plus the KV cache of
a full context. The app offers the presets that fit the machine's memory (on a Space, or with KVQA_PRESETS=1: they
come from the Hugging Face hub); KVQA_MODELS / --models still name the list instead.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

from kvqa.languages import CJK, NAMES, asked_in_chinese, holds_chinese, languages_needed, mostly_chinese
from kvqa.messages import Message
from kvqa.model.architectures import parameters
from kvqa.model.kv_cache import kv_bytes
from kvqa.model.offline import OfflineModel, installed_models, offline_model

CONFIGS = Path(__file__).resolve().parent / "configs"


@dataclass(frozen=True)
class Preset:
    """A model kvqa has tested: its hub id, the architecture file in kvqa/model/configs, and what it is good for."""

    model: str  # Hugging Face hub id
    config: str  # kvqa/model/configs/<config>.json
    note: str
    gated: bool = False  # the hub asks for an accepted licence: offered only with HF_TOKEN set
    chinese: bool = False  # reads and answers Chinese (Qwen's and Gemma's families); the others are English models

    @property
    def name(self) -> str:
        """The hub id's last part, as a loaded model names itself: "SmolLM2-135M-Instruct"."""
        return self.model.rsplit("/", 1)[-1]

    @cached_property
    def settings(self) -> dict:
        """The architecture's config.json values, read once."""
        return json.loads((CONFIGS / f"{self.config}.json").read_text())

    @property
    def parameters(self) -> int:
        """Parameters, counted from the architecture (kvqa.model.architectures; embeddings once when tied)."""
        return parameters(self.settings)

    def kv_bytes_per_token(self, dtype_bytes: int) -> int:
        """One token's cache, as kvqa.model.kv_cache computes it for a loaded model."""
        c = self.settings
        head_dim = c.get("head_dim") or c["hidden_size"] // c["num_attention_heads"]
        return kv_bytes(c["num_hidden_layers"], c.get("num_key_value_heads") or c["num_attention_heads"], head_dim,
                        dtype_bytes)

    def memory_bytes(self, dtype_bytes: int, *, context: int = 8192) -> int:
        """Weights plus the KV cache of one `context`-token document."""
        return self.parameters * dtype_bytes + self.kv_bytes_per_token(dtype_bytes) * context


PRESETS = (
    Preset("HuggingFaceTB/SmolLM2-135M-Instruct", "smollm2-135m", "the offline default: fast, weak, English only"),
    Preset("HuggingFaceTB/SmolLM2-360M-Instruct", "smollm2-360m", "English; about 3x the default's work per token"),
    Preset("Qwen/Qwen2.5-0.5B-Instruct", "qwen2.5-0.5b", "English and Chinese; 32k context", chinese=True),
    Preset("Qwen/Qwen3-0.6B", "qwen3-0.6b", "English and Chinese; 40k context (answers without thinking)",
           chinese=True),
    Preset("google/gemma-3-1b-it", "gemma-3-1b", "English and Chinese; 32k context, sliding-window layers; gated "
           "(HF_TOKEN)", gated=True, chinese=True),
    Preset("meta-llama/Llama-3.2-1B-Instruct", "llama-3.2-1b", "English; 128k context; gated (HF_TOKEN)", gated=True),
    Preset("Qwen/Qwen2.5-1.5B-Instruct", "qwen2.5-1.5b", "English and Chinese; 32k context", chinese=True),
    Preset("HuggingFaceTB/SmolLM2-1.7B-Instruct", "smollm2-1.7b", "English; 8k context"),
    Preset("meta-llama/Llama-3.2-3B-Instruct", "llama-3.2-3b", "what kvqa is built for, on a GPU; gated (HF_TOKEN)",
           gated=True),
)


def preset_for(model: str) -> Preset | None:
    """The tested preset a model is (by hub id, or by its last part, as a loaded model names itself), or None."""
    name = model.rstrip("/").rsplit("/", 1)[-1].lower()
    return next((p for p in PRESETS if p.name.lower() == name), None)


def language_note(model: str, text: str, *, cache_dir=None) -> Message | None:
    """What to tell a reader who loads a Chinese document into a preset that reads English only (its answers are
    mostly wrong or loop: docs/quality.md), or None: the offline model that reads Chinese when it is installed (in
    `cache_dir` or as packages), else the smallest preset that does. Unknown models get no note: kvqa has not
    measured them."""
    preset = preset_for(model)
    if preset is None or preset.chinese or not mostly_chinese(text):
        return None
    return Message("notice.english_model", model=preset.name, better=chinese_model(cache_dir))


def chinese_model(cache_dir=None) -> str:
    """The model to name to a reader who needs one that reads Chinese: the offline one installed here (in `cache_dir`
    or as packages), else the smallest preset that reads Chinese."""
    local = [m.name for m in installed_models(cache_dir) if m.chinese]
    return local[0] if local else next(p.model for p in PRESETS if p.chinese)


PINNED = ("reason.env", "reason.command_line", "reason.app")  # model_reason ids of a model a person named


def chinese_reason(text: str, *, page_lang: str | None = None, questions: Sequence[str] = ()) -> str | None:
    """Why whoever reads this document needs a model that reads Chinese (a reason's message id), or None: a mostly
    Chinese document, a question asked in Chinese (on any document), or a document holding Chinese passages read from
    the page in Chinese (its reader will ask in Chinese)."""
    if mostly_chinese(text):
        return "reason.reads_chinese"
    if any(asked_in_chinese(q) for q in questions):
        return "reason.question_chinese"
    if page_lang == "zh" and holds_chinese(text):
        return "reason.asks_chinese"
    return None


CHARS_PER_TOKEN = 4  # English text: 4.1 characters a SmolLM2 token, 4.3 a Gemma 3 token (HotpotQA's Wikipedia
#                     paragraphs, 103,259 characters); a CJK ideograph counts as a token
ROOM_AROUND = 1024  # what a read needs besides the document: the prompt and the room kept for the question


def estimated_tokens(text: str) -> int:
    """About how many tokens a model reads for `text`, before any tokenizer is loaded (CHARS_PER_TOKEN)."""
    cjk = len(CJK.findall(text))
    return cjk + (len(text) - cjk) // CHARS_PER_TOKEN


def reader_for(model: str, reason: Message, text: str, *, cache_dir, page_lang: str | None = None,
               questions: Sequence[str] = (), contexts: Mapping[str, int] | None = None,
               cuda: bool = False) -> tuple[str, Message] | None:
    """The installed offline model that should read this document, and why, when it is not `model`: among those that
    read the languages of the document and of whoever asks (kvqa.languages.languages_needed), those that hold it
    whole (else all of them), on a CPU (not `cuda`) those whose `cpu_tokens` allow its length (else all), the one
    that answers best (OfflineModel.rank; a tie keeps `model`). Unless a person named the model (KVQA_MODEL, --model,
    the app's list: `reason`; then unread_question says what to do). None: keep `model`."""
    current = offline_model(model)
    if current is None or getattr(reason, "key", None) in PINNED:
        return None
    contexts = contexts or {}
    languages = languages_needed(text, page_lang=page_lang, questions=questions)
    tokens = estimated_tokens(text)
    need = tokens + ROOM_AROUND

    def holds(m: OfflineModel) -> bool:
        return need <= contexts.get(m.name, m.context)

    readers = [m for m in installed_models(cache_dir) if set(languages) <= set(m.languages)]
    if not readers:
        return None
    pool = [m for m in readers if holds(m)] or readers
    if not cuda:
        pool = [m for m in pool if not m.cpu_tokens or tokens <= m.cpu_tokens] or pool
    best = max(pool, key=lambda m: (m.rank, m is current))
    if best is current:
        return None
    unread = [code for code in languages if code not in current.languages]
    if unread:
        why = chinese_reason(text, page_lang=page_lang, questions=questions) if "zh" in unread else None
        return best.name, Message(why or "reason.reads_language", model=current.name,
                                  language=", ".join(NAMES.get(code, code) for code in unread))
    if not holds(current) and holds(best):
        return best.name, Message("reason.long_document", model=current.name, tokens=f"{tokens:,}")
    if best.rank > current.rank:
        return best.name, Message("reason.better_model", model=current.name,
                                  language=", ".join(NAMES.get(code, code) for code in languages))
    return best.name, Message("reason.faster_model", model=current.name, tokens=f"{tokens:,}")


def unread_question(model: str, question: str, *, cache_dir=None) -> Message | None:
    """What to do instead, when `model` (a tested model that reads English only) is to answer a question asked in
    Chinese: its answer would be wrong or echo the prompt (docs/quality.md). None: the model reads the question, or
    kvqa has not measured it."""
    preset = preset_for(model)
    if preset is None or preset.chinese or not asked_in_chinese(question):
        return None
    return Message("question.needs_chinese_model", model=preset.name, better=chinese_model(cache_dir))


def reading_model(config, text: str, *, page_lang: str | None = None, questions: Sequence[str] = (),
                  contexts: Mapping[str, int] | None = None) -> tuple[str, Message] | None:
    """The one rule the app, its API and the CLI follow: the model (and why) that reads a document with these
    settings (a kvqa.config.Config), when it is not config.model, for a reader whose page is in `page_lang` and who
    asks `questions` (those known: the CLI's, or the one asked now). A serving engine (config.remote.engine_url)
    serves the model it loaded, so nothing is switched there; else reader_for() decides. None: keep config.model."""
    if config.remote.engine_url:
        return None
    return reader_for(config.model, config.model_reason, text, cache_dir=config.cache_dir, page_lang=page_lang,
                      questions=questions, contexts=contexts, cuda=on_cuda(config.device))


def on_cuda(device: str) -> bool:
    """Whether the model runs on a CUDA GPU (the device named, or found)."""
    if device != "auto":
        return device.startswith("cuda")
    import torch

    return torch.cuda.is_available()


def fitting(memory_bytes: int, dtype_bytes: int, *, share: float = 0.5) -> list[Preset]:
    """The presets whose weights and one 8k-token cache take at most `share` of `memory_bytes`, smallest first."""
    return [p for p in PRESETS if p.memory_bytes(dtype_bytes) <= share * memory_bytes]


def offered(default: str, environ, *, memory_bytes: int | None = None, cuda: bool | None = None,
            cache_dir=None) -> list[str]:
    """The models the app's dropdown offers when KVQA_MODELS names none: on a Space, or with KVQA_PRESETS=1 (they
    download from the hub), `default` and the presets that fit this machine (GPU memory in bfloat16, else RAM in
    float32), gated ones only with HF_TOKEN; elsewhere `default` and the other offline models installed here (in
    `cache_dir`, or as packages). memory_bytes, cuda: the machine, for tests."""
    if not (environ.get("SPACE_ID") or environ.get("KVQA_PRESETS", "").strip() == "1"):
        local = [m.name for m in installed_models(cache_dir)]
        return list(dict.fromkeys([default, *local])) if offline_model(default) else [default]
    if cuda is None or memory_bytes is None:
        import psutil
        import torch

        cuda = torch.cuda.is_available() if cuda is None else cuda
        if memory_bytes is None:
            memory_bytes = (torch.cuda.get_device_properties(0).total_memory if cuda
                            else psutil.virtual_memory().total)
    token = (environ.get("HF_TOKEN") or environ.get("HUGGING_FACE_HUB_TOKEN") or "").strip()
    fits = [p.model for p in fitting(memory_bytes, 2 if cuda else 4) if token or not p.gated]
    return list(dict.fromkeys([default, *fits]))
