"""Small statistics helpers shared by the orchestrator and the peers."""

from __future__ import annotations

import statistics
import time
from collections.abc import Sequence


def median(xs: Sequence[float]) -> float:
    return statistics.median(xs)


def quantile(xs: Sequence[float], q: float) -> float:
    """The q-quantile by nearest rank (q in [0, 1])."""
    ordered = sorted(xs)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def now_us() -> float:
    return time.perf_counter() * 1e6
