"""Statistics derived from raw latency samples: percentiles, spread, coefficient of variation, noise flag."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

# A measurement is flagged noisy when its coefficient of variation (std / mean) exceeds this.
DEFAULT_NOISE_CV = 0.10


@dataclass(frozen=True)
class LatencyStats:
    """Latency statistics in milliseconds; `noisy` travels with the numbers."""

    iterations: int
    p50_ms: float
    p90_ms: float
    p95_ms: float
    p99_ms: float
    mean_ms: float
    std_ms: float
    min_ms: float
    max_ms: float
    iqr_ms: float
    cv: float
    noisy: bool

    def as_dict(self) -> dict[str, float | int | bool]:
        return asdict(self)


def latency_stats(samples_ns: Sequence[int], noise_cv: float = DEFAULT_NOISE_CV) -> LatencyStats:
    if len(samples_ns) == 0:
        raise ValueError("no latency samples")
    ms = np.asarray(samples_ns, dtype=np.float64) / 1e6
    p50, p90, p95, p99, q1, q3 = np.percentile(ms, [50, 90, 95, 99, 25, 75])
    mean = float(ms.mean())
    std = float(ms.std(ddof=1)) if ms.size > 1 else 0.0
    cv = std / mean if mean > 0 else 0.0
    return LatencyStats(iterations=int(ms.size), p50_ms=float(p50), p90_ms=float(p90), p95_ms=float(p95),
                        p99_ms=float(p99), mean_ms=mean, std_ms=std, min_ms=float(ms.min()),
                        max_ms=float(ms.max()), iqr_ms=float(q3 - q1), cv=cv, noisy=bool(cv > noise_cv))


def throughput_sps(batch: int, mean_ms: float) -> float:
    """Samples per second of a sequential loop: batch size over the mean latency."""
    return batch * 1000.0 / mean_ms if mean_ms > 0 else 0.0
