"""Engines compute: they own the model and the settings. make_engine() is the one place that picks one.

- `local`: transformers in this process (kvqa's exact engine).
- `zerogpu`: the local engine's work inside Hugging Face ZeroGPU's @spaces.GPU functions.
"""

from __future__ import annotations

import importlib.util
import os
from collections.abc import Mapping

from ..config import Config
from .base import Engine, EngineInfo
from .local import LocalEngine

__all__ = ["Engine", "EngineInfo", "LocalEngine", "make_engine", "zerogpu_status"]


def _zerogpu(environ: Mapping[str, str]) -> bool:
    """ZeroGPU Spaces have the `spaces` package and set SPACES_ZERO_GPU; a Space with its own GPU has only the first."""
    return (importlib.util.find_spec("spaces") is not None
            and environ.get("SPACES_ZERO_GPU", "").strip().lower() in ("1", "true", "yes"))


def make_engine(config: Config, environ: Mapping[str, str] | None = None, *, lm=None, store=None) -> Engine:
    """The engine for these settings on this machine: ZeroGPU where it is active, else local. The model loads on
    first use (or call engine.load()). `lm` hands the local engine an already loaded model; `store` (a
    kvqa.store.KVStore) gives the local engine a disk tier of prefilled caches."""
    environ = os.environ if environ is None else environ
    if _zerogpu(environ):
        import spaces

        from .zerogpu import ZeroGPUEngine

        return ZeroGPUEngine(config, spaces)
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
