"""Statistics derived from raw latency samples: percentiles, spread, coefficient of variation, noise flag."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np

# A measurement is flagged noisy when its robust coefficient of variation (1.4826 x MAD / median: the CV a
# normal distribution with that median absolute deviation would have) exceeds this. The plain CV (std / mean)
# is reported too, but one preempted iteration among hundreds of microsecond calls can put it over 1 on a quiet
# machine, so it flags everything or nothing; the robust one moves only when many samples move. Calibrated on
# quiet and loaded quick runs of this 2-core machine (docs/method.md, "What noisy means").
DEFAULT_NOISE_CV = 0.10
MAD_TO_SIGMA = 1.4826


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
    rcv: float = 0.0  # robust CV: 1.4826 x MAD / median; `noisy` is rcv > the noise threshold

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
    rcv = robust_cv(ms)
    return LatencyStats(iterations=int(ms.size), p50_ms=float(p50), p90_ms=float(p90), p95_ms=float(p95),
                        p99_ms=float(p99), mean_ms=mean, std_ms=std, min_ms=float(ms.min()),
                        max_ms=float(ms.max()), iqr_ms=float(q3 - q1), cv=cv, noisy=bool(rcv > noise_cv), rcv=rcv)


def robust_cv(values: Sequence[float] | np.ndarray) -> float:
    """1.4826 x median absolute deviation / median (0 for fewer than two values or a zero median)."""
    x = np.asarray(values, dtype=np.float64)
    if x.size < 2:
        return 0.0
    med = float(np.median(x))
    return float(MAD_TO_SIGMA * np.median(np.abs(x - med)) / med) if med > 0 else 0.0


def throughput_sps(batch: int, p50_ms: float) -> float:
    """Samples per second of a sequential loop: batch size over the median (p50) latency, the one definition
    everywhere (so it never contradicts the p50 column; a mean would follow a few slow outliers)."""
    return batch * 1000.0 / p50_ms if p50_ms > 0 else 0.0
