"""Timing that tells the truth: the device is synchronised before the clock is read. Also what one answer cost
(Timings), and what reading a document costs here (ReadCost), fitted from a read's progress to estimate the next."""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import torch


def sync(device: torch.device) -> None:
    """Wait for queued GPU work, so a clock read after it includes that work (torch imported only then: a server
    engine's answers are timed without it)."""
    if device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)
    elif device.type == "mps":
        import torch

        torch.mps.synchronize()


def now(device: torch.device) -> float:
    """perf_counter() after synchronising the device."""
    sync(device)
    return time.perf_counter()


@dataclass(frozen=True)
class ReadCost:
    """What reading n tokens takes here: per_token * n + per_pair * n^2 seconds (the second term: attention to the
    tokens read before, which makes long reads slower per token), fitted from one read's progress."""

    per_token: float
    per_pair: float = 0.0

    def seconds(self, tokens: int) -> float:
        return self.per_token * tokens + self.per_pair * tokens * tokens

    @classmethod
    def fit(cls, points: Sequence[tuple[float, float]]) -> ReadCost | None:
        """From (tokens read so far, seconds since the read began) points of one read: least squares for both terms
        with three points or more (when both come out positive), else the last point's rate; None without a point."""
        points = [(n, t) for n, t in points if n > 0 and t > 0]
        if not points:
            return None
        if len({n for n, _ in points}) >= 3:
            s2, s3, s4 = (sum(n**k for n, _ in points) for k in (2, 3, 4))
            r1, r2 = sum(n * t for n, t in points), sum(n * n * t for n, t in points)
            det = s2 * s4 - s3 * s3
            if det > 0:
                a, b = (r1 * s4 - r2 * s3) / det, (s2 * r2 - s3 * r1) / det
                if a > 0 and b >= 0:
                    return cls(a, b)
        n, t = max(points)
        return cls(t / n)


MIN_RATE_TOKENS = 256  # a read shorter than this is mostly fixed costs: its rate would not predict a longer one


class ReadCosts(dict[str, ReadCost]):
    """Each model's latest read here (model -> its ReadCost), to say before a read about how long it will take."""

    def learn(self, model: str, tokens: int, ticks: Sequence[tuple[float, float]]) -> None:
        """Fit the cost of `model`'s read of `tokens` from its progress, ticks of (fraction read, seconds since the
        read began); a read shorter than MIN_RATE_TOKENS, or without a tick, changes nothing."""
        cost = ReadCost.fit([(f * tokens, t) for f, t in ticks]) if tokens >= MIN_RATE_TOKENS else None
        if cost is not None:
            self[model] = cost

    def estimate(self, model: str, tokens: int) -> float | None:
        """Seconds that reading `tokens` should take `model`, from its latest read here; None before its first."""
        cost = self.get(model)
        return cost.seconds(tokens) if cost is not None else None

    @classmethod
    def kept(cls, path) -> ReadCosts:
        """The costs kept in the JSON file at `path` (none when it is missing or unreadable)."""
        import json

        try:
            return cls({m: ReadCost(*c) for m, c in json.loads(open(path).read()).items()})
        except (OSError, ValueError, TypeError):
            return cls()

    def keep(self, path) -> None:
        """Write the costs to the JSON file at `path`, whole or not at all; nothing when it cannot be written."""
        import json
        import os

        partial = f"{path}.partial-{os.getpid()}"
        try:
            with open(partial, "w") as f:
                json.dump({m: [c.per_token, c.per_pair] for m, c in self.items()}, f)
            os.replace(partial, path)
        except OSError:
            try:
                os.unlink(partial)
            except OSError:
                pass


@dataclass(frozen=True)
class Timings:
    """What one answer cost."""

    question_tokens: int  # tokens computed before the first answer token: the question (or the whole prompt)
    new_tokens: int
    ttft_s: float  # from the question to its first generated token (its id chosen, not its text shown)
    answer_s: float  # from the question to the last token
    sources_s: float = 0.0  # finding the passages the answer relies on (after the answer, not in answer_s)
    decode_steps: int = 0  # forwards after the first token (each one token, or one token and its drafted guesses)
    drafted_tokens: int = 0  # tokens that came from drafting (guesses the model agreed with)
    rejected_tokens: int = 0  # guesses the model did not agree with (checked, then rolled back)
    single_step_s: float = 0.0  # mean time of this answer's one-token steps (no guesses): a step without drafting
    prompt_tokens: int | None = None  # a serving engine: the whole prompt as the server counted it
    cached_tokens: int | None = None  # a serving engine: prompt tokens it took from its prefix cache; None: it did
    #                                   not say (which is not 0)

    @property
    def draft_speedup(self) -> float | None:
        """Decode speed against one token per step, estimated from this answer's own one-token steps; None when it
        had none (the bench and scripts/evaluate.py measure it by answering again without drafting)."""
        if not self.drafted_tokens or not self.single_step_s or not self.decode_tokens_per_s:
            return None
        return self.decode_tokens_per_s * self.single_step_s

    @property
    def drafted_per_step(self) -> float:
        """Guessed tokens kept per decode step, on top of the one every step gives."""
        return self.drafted_tokens / self.decode_steps if self.decode_steps else 0.0

    @property
    def decode_tokens_per_s(self) -> float:
        """Generated tokens per second after the first one."""
        rest = self.answer_s - self.ttft_s
        return (self.new_tokens - 1) / rest if self.new_tokens > 1 and rest > 0 else 0.0
