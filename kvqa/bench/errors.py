"""The bench's one error, in a module of its own so every bench module can raise it without importing another."""

from __future__ import annotations

from ..errors import KvqaError


class BenchError(KvqaError):
    """A bench flag or input that cannot be used."""
