"""Engines compute: they own the model and the settings. make_engine() is the one place that picks one.

- `local`: transformers in this process (kvqa's exact engine).
- `zerogpu`: the local engine's work inside Hugging Face ZeroGPU's @spaces.GPU functions.
- `remote`: an OpenAI-compatible serving engine (vLLM, SGLang, llama.cpp) at config.remote.engine_url, with its own
  prefix cache.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping

from ..config import Config
from .base import Engine, EngineInfo
from .local import LocalEngine

__all__ = ["Engine", "EngineInfo", "LocalEngine", "make_engine", "remote_status", "zerogpu_status"]


def _zerogpu(environ: Mapping[str, str]) -> bool:
    """ZeroGPU Spaces have the `spaces` package and set SPACES_ZERO_GPU; a Space with its own GPU has only the first."""
    return (importlib.util.find_spec("spaces") is not None
            and environ.get("SPACES_ZERO_GPU", "").strip().lower() in ("1", "true", "yes"))


def make_engine(config: Config, environ: Mapping[str, str] | None = None, *, lm=None, store=None) -> Engine:
    """The engine for these settings on this machine: the server at config.remote.engine_url when set, else ZeroGPU
    where
    it is active, else local. The model loads on first use (or call engine.load()). `lm` hands the local engine an
    already loaded model; `store` (a kvqa.cache.store.KVStore) gives the local and ZeroGPU engines a disk tier of
    prefilled
    caches."""
    environ = os.environ if environ is None else environ
    if config.remote.engine_url:
        from .remote import RemoteEngine

        return RemoteEngine(config)
    if _zerogpu(environ):
        import spaces

        from .zerogpu import ZeroGPUEngine

        return ZeroGPUEngine(config, spaces, store=store)
    if store is not None:
        from .stored import StoredLocalEngine

        return StoredLocalEngine(config, lm=lm, store=store)
    return LocalEngine(config, lm=lm)


def zerogpu_status(environ: Mapping[str, str] | None = None) -> str:
    """One line for `doctor`: whether answers will run in @spaces.GPU functions, and why."""
    environ = os.environ if environ is None else environ
    if _zerogpu(environ):
        return "active: prefill and answers run in @spaces.GPU functions"
    if importlib.util.find_spec("spaces") is not None:
        return "not active (spaces is installed, but SPACES_ZERO_GPU is not set)"
    return "not active (the spaces package is not installed)"


def remote_status(config: Config) -> list[tuple[str, str, str | None]]:
    """(name, value, problem) lines for `doctor` when a serving engine is configured: its URL and model, checked
    by asking the server; the problem says what to do."""
    from ..errors import KvqaError
    from .remote import RemoteEngine

    engine = RemoteEngine(config)
    lines = [("engine", f"remote: {engine.url}", None)]
    try:
        info = engine.load()
    except KvqaError as e:
        return [*lines, ("server model", config.remote.engine_model or "(the first it lists)", str(e))]
    finally:
        engine.close()
    context = f"{info.context_tokens:,} tokens" if info.context_tokens else "not reported"
    return [*lines, ("server model", info.model, None), ("context", context, None),
            ("API key", "set" if config.remote.engine_api_key else "not set", None),
            ("prefix cache", "the server's own; each answer shows the prompt tokens it took from it, where the server "
             "reports them", None),
            ("promise", info.guarantee, None)]
